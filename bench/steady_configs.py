"""Every legal tile config of one template at one shape, timed in the
steady stream of bench_kernels.steady_us (back-to-back launches over
rotating buffer sets, graph replay, no flush), with the output bits of
each config compared against the default config's.

    BITFOLD_LIB=.../libbitfold.so python3 bench/steady_configs.py \
        ln_modulate 1,4096,4096 --out DIR
    ... steady_configs.py wan_rmsnorm_silu 1,96,4,480,832 --params form=x,bias=0 \
        [--ncdhw]   (the Wan norm channels-last, or contiguous NCDHW: the
                     channels-first kernel, layout/outvec params added)
    ... steady_configs.py conv_bias 1,96,4,480,832 \
        --params residual=1,residual_layout=channels_first

Configs come from `bitfold compile TEMPLATE --shape S --list-configs`
(then, where $BITFOLD_CACHE_DIR is set, `bitfold prebuild --every-config`
compiles them all in parallel first), or --configs a,b,... (a host
without the CLI).
Writes DIR/steady-configs-TEMPLATE.md (-rolled.md with
BITFOLD_ROLLED_ROWS=1: the two-pass configs then run their rows as loops,
and the one-pass row configs their outputs, codegen/EmitRolledRows.cpp).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_kernels as bk  # noqa: E402


def wan_operands(shape, ncdhw, gamma_amp):
    """The Wan norm's operands as bench_kernels' Wan rows make them (gamma
    ~ N(0, gamma_amp^2): the exact SiLU's fallback rate depends on it)."""
    fmt = torch.contiguous_format if ncdhw else torch.channels_last_3d
    x = bk.rnd(shape).contiguous(memory_format=fmt)
    c = shape[1]
    y = torch.empty_like(x)
    return [x, bk.rnd((c,), gamma_amp), y], [c ** 0.5], y, 4 * x.numel() + 2 * c


def conv_operands(shape, params):
    """conv_bias as bench_kernels' conv rows make it: a channels-last conv
    output, its bias, the residual (channels-first with
    residual_layout=channels_first, the Wan VAE's shortcut)."""
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    x = bk.rnd(shape).contiguous(memory_format=fmt)
    tensors = [x, bk.rnd((shape[1],))]
    if "residual=1" in params:
        h = bk.rnd(shape)
        tensors.append(h if "residual_layout=channels_first" in params
                       else h.contiguous(memory_format=fmt))
    y = torch.empty_like(x)
    return tensors + [y], [], y, 2 * len(tensors) * x.numel()


def operands(template, dims, ncdhw=False, gamma_amp=1.0, params=""):
    """(tensors, scalars, output tensor, bytes) on fresh data."""
    if template == "wan_rmsnorm_silu":
        return wan_operands(dims, ncdhw, gamma_amp)
    if template == "conv_bias":
        return conv_operands(dims, params)
    b, s, d = dims
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


def prebuild(template, shape, params):
    """Every legal config of the shape compiled in parallel into
    $BITFOLD_CACHE_DIR (`bitfold prebuild --every-config`), so that each
    config's first launch loads its cubin instead of compiling it; where
    the cache directory is unset or the prebuild fails, each config still
    compiles at its first launch."""
    cache = os.environ.get("BITFOLD_CACHE_DIR")
    if not cache:
        return
    major, minor = torch.cuda.get_device_capability()
    kv = dict(p.split("=", 1) for p in params.split(",") if p)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump([{"template": template, "shape": shape, "params": kv}], f)
        f.flush()
        r = subprocess.run(["bitfold", "prebuild", "--every-config", "--shapes", f.name,
                            "--arch", f"sm_{major}{minor}", "--cache-dir", cache,
                            "--jobs", str(os.cpu_count() or 1)],
                           capture_output=True, text=True)
    if r.returncode != 0:
        print(f"steady_configs: prebuild failed, configs compile at their first launch: "
              f"{(r.stderr or r.stdout).strip()[-300:]}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template")
    ap.add_argument("shape", help="B,S,D (the Wan norm: N,C,D,H,W)")
    ap.add_argument("--params", default="")
    ap.add_argument("--ncdhw", action="store_true",
                    help="wan_rmsnorm_silu: contiguous NCDHW (channels-first kernel)")
    ap.add_argument("--gamma-amp", type=float, default=1.0,
                    help="wan_rmsnorm_silu: gamma's standard deviation")
    ap.add_argument("--configs", default="",
                    help="comma-separated configs (default: every legal one, from "
                         "`bitfold compile ... --list-configs`)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    dims = tuple(int(v) for v in args.shape.split(","))
    if args.ncdhw:
        spatial = dims[2] * dims[3] * dims[4]
        ovs = 4 if spatial % 4 == 0 else 2 if spatial % 2 == 0 else 1
        args.params += f"{',' if args.params else ''}layout=channels_first,outvec={ovs}"
    if args.configs:
        configs = args.configs.split(",")
    else:
        listed = subprocess.run(["bitfold", "compile", args.template, "--shape", args.shape,
                                 "--params", args.params, "--list-configs"],
                                capture_output=True, text=True, check=True)
        configs = [c for c in listed.stdout.split() if c.startswith("r")]
        prebuild(args.template, args.shape, args.params)
    rt = bk.bitfold.torch.Runtime()
    kernel = rt.kernel(args.template, args.params)
    first = operands(args.template, dims, args.ncdhw, args.gamma_amp, args.params)
    nbytes = first[3]
    sets = [first] + [operands(args.template, dims, args.ncdhw, args.gamma_amp, args.params)
                      for _ in range(bk.steady_sets(nbytes) - 1)]
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
    copy_us = bk.steady_us([bk.sm_copy_fn(nbytes) for _ in range(len(sets))])[0]
    rolled = os.environ.get("BITFOLD_ROLLED_ROWS") == "1"
    lines = [f"# {args.template} {args.shape} {args.params}: every config, steady stream"
             + (f" (gamma ~ N(0, {args.gamma_amp:g}^2))" if args.gamma_amp != 1.0 else "")
             + (" (BITFOLD_ROLLED_ROWS=1)" if rolled else ""), "",
             f"{nbytes / 1e6:.1f} MB per launch, {len(sets)} rotating buffer sets; "
             "same bits = identical output to the default config; a copy of the "
             f"same bytes on the SMs (bench_kernels.sm_copy_fn): {copy_us:.2f} us.", "",
             "| config | steady us | TB/s | same bits |", "|---|--:|--:|---|"]
    lines += [f"| {c} | {us:.2f} | {nbytes / us / 1e6:.2f} | {'yes' if same else 'NO'} |"
              for us, c, same in rows]
    tag = "".join(ch if ch.isalnum() else "-" for ch in args.params)
    if args.gamma_amp != 1.0:
        tag += f"-gamma{args.gamma_amp:g}"
    name = (f"steady-configs-{args.template}-{args.shape.replace(',', 'x')}"
            f"{'-' + tag if tag else ''}"
            f"{'-rolled' if rolled else ''}.md")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
