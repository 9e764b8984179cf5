"""Every legal tile config of one template at one shape, timed in the
steady stream of bench_kernels.steady_us (back-to-back launches over
rotating buffer sets, graph replay, no flush), with the output bits of
each config compared against the default config's.

    BITFOLD_LIB=.../libbitfold.so python3 bench/steady_configs.py \
        ln_modulate 1,4096,4096 --out DIR

Configs come from `bitfold compile TEMPLATE --shape S --list-configs`.
Writes DIR/steady-configs-TEMPLATE.md (-rolled.md with
BITFOLD_ROLLED_ROWS=1: the two-pass configs then run their rows as loops,
codegen/EmitRolledRows.cpp).
"""
import argparse
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_kernels as bk  # noqa: E402


def operands(template, b, s, d):
    """(tensors, scalars, output tensor, bytes) on fresh data."""
    x = bk.rnd((b, s, d))
    if template == "ln_modulate":
        proj = bk.rnd((b, 4 * d), 0.1)
        y = torch.empty_like(x)
        return [x, proj[:, d:2 * d], proj[:, 3 * d:], y], [1e-6], y, 4 * x.numel() + 4 * b * d
    if template == "rmsnorm_modulate":
        proj = bk.rnd((b, 2 * d), 0.1)
        y = torch.empty_like(x)
        return ([x, bk.rnd((d,)), proj[:, :d], proj[:, d:], y], [1e-6], y,
                4 * x.numel() + 6 * d)
    if template == "hf_rmsnorm":
        y = torch.empty_like(x)
        return [x, bk.rnd((d,)), y], [1e-6], y, 4 * x.numel() + 2 * d
    if template == "residual_gate":
        u, g = bk.rnd((b, s, d)), bk.rnd((b, d), 0.1)
        y = torch.empty_like(x)
        return [x, u, g, y], [], y, 6 * x.numel() + 2 * b * d
    sys.exit(f"steady_configs: no operands for {template}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template")
    ap.add_argument("shape", help="B,S,D")
    ap.add_argument("--params", default="")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    b, s, d = (int(v) for v in args.shape.split(","))
    listed = subprocess.run(["bitfold", "compile", args.template, "--shape", args.shape,
                             "--params", args.params, "--list-configs"],
                            capture_output=True, text=True, check=True)
    configs = [c for c in listed.stdout.split() if c.startswith("r")]
    rt = bk.bitfold.torch.Runtime()
    kernel = rt.kernel(args.template, args.params)
    first = operands(args.template, b, s, d)
    nbytes = first[3]
    sets = [first] + [operands(args.template, b, s, d) for _ in range(bk.steady_sets(nbytes) - 1)]
    kernel.set_config(None)
    kernel.launch(first[0], first[1])
    torch.cuda.synchronize()
    expect = first[2].clone()
    rows = []
    for c in configs:
        kernel.set_config(c)
        first[2].fill_(float("nan"))
        kernel.launch(first[0], first[1])
        torch.cuda.synchronize()
        same = bool(torch.equal(first[2].view(torch.int16), expect.view(torch.int16)))
        us = bk.steady_us([lambda t=t: kernel.launch(t[0], t[1]) for t in sets])[0]
        rows.append((us, c, same))
        print(f"{c:16s} {us:7.2f} us  {nbytes / us / 1e6:5.2f} TB/s  same bits {same}", flush=True)
    rows.sort()
    rolled = os.environ.get("BITFOLD_ROLLED_ROWS") == "1"
    lines = [f"# {args.template} {args.shape}: every config, steady stream"
             + (" (BITFOLD_ROLLED_ROWS=1)" if rolled else ""), "",
             f"{nbytes / 1e6:.1f} MB per launch, {len(sets)} rotating buffer sets; "
             "same bits = identical output to the default config.", "",
             "| config | steady us | TB/s | same bits |", "|---|--:|--:|---|"]
    lines += [f"| {c} | {us:.2f} | {nbytes / us / 1e6:.2f} | {'yes' if same else 'NO'} |"
              for us, c, same in rows]
    name = f"steady-configs-{args.template}{'-rolled' if rolled else ''}.md"
    with open(os.path.join(args.out, name), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
