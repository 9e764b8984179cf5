"""How long a new shape waits for its kernel in bitfold.torch (async compile
mode: the eager chain serves meanwhile), with quick-first on and off.

    python3 bench/first_kernel.py [--out DIR]
        (GPU host; writes DIR/first_kernel.md and .json; run it with
        CUDA_CACHE_DISABLE=1 so the driver's cache hides nothing)

For each op and shape, a fresh runtime (disk cache off, so every class
compiles) becomes the default one; its toolchain set-up is waited out
first (an untimed hf_rmsnorm class of 256 columns). Then one call at the shape
starts the clock; calls follow every 0.2 ms until stats() counts a kernel
launch ("first kernel": what quick-first shortens), then wait_for_compiles()
("all compiled": the chosen config too). Every output is compared with
the op's contract (torch.equal): a kernel's against the eager chain
(rmsnorm_modulate's against tests/gpu/references.py's flashinfer order), a
call served while compiling against the chain that served it. Median of --reps fresh runtimes per mode.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

BF = torch.bfloat16


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g, device="cuda").to(BF)

    def hf(rows, cols):
        x, w = r(1, rows, cols), r(cols)
        return "hf_rmsnorm", (1, rows, cols), (x, w, 1e-6)

    def rmsmod(rows, cols):
        return "rmsnorm_modulate", (1, rows, cols), (r(1, rows, cols), r(cols), r(1, cols),
                                                      r(1, cols), 1e-6)  # scale, shift (B, D)

    def ln(rows, cols):
        return "ln_modulate", (1, rows, cols), (r(1, rows, cols), r(1, cols), r(1, cols), 1e-6)

    def wan(c, f, h, w):
        x = r(1, c, f, h, w).contiguous(memory_format=torch.channels_last_3d)
        return "wan_rmsnorm_silu", (1, c, f, h, w), (x, r(c, 1, 1, 1))

    def qk(rows, heads, dim):
        return "qk_layernorm", (1, rows, heads, dim), (r(1, rows, heads, dim),
                                                       r(1, rows, heads, dim), 1e-6)

    return [hf(4096, 4096), hf(1024, 5120), hf(1024, 2048), rmsmod(4096, 4096),
            ln(4096, 4096), wan(96, 2, 120, 208), wan(384, 2, 60, 104),
            qk(1024, 32, 128)]


def reference(eager, op):
    """The eager chain, except rmsnorm_modulate, whose contract is
    flashinfer's fold order (tests/gpu/references.py emulates it)."""
    if op != "rmsnorm_modulate":
        return getattr(eager, op)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))
    import references
    return references.rmsnorm_modulate


def one_run(bitfold, bt, eager, op, args, quick):
    rt = bitfold.Runtime(disk_cache=False, async_compile=True, quick_first=quick)
    saved = bitfold._default
    bitfold._default = rt
    for o in bt._table.OPS:
        o.new_kernels()
    try:
        fn, chain = getattr(bt, op), getattr(eager, op)
        want, served = reference(eager, op)(*args), chain(*args)

        def check(out):
            """A kernel's output against the op's contract; one served
            while compiling against the chain that served it (the same
            bits, except rmsnorm_modulate's close chain)."""
            by_kernel = bt.stats()[op]["launches"] > 0
            return _equal(out, want if by_kernel else served)
        # The toolchain's set-up and the runtime's first class, untimed.
        x0 = torch.ones(1, 8, 256, device="cuda", dtype=BF)
        bt.hf_rmsnorm(x0, x0[0, 0], 1e-6)
        bt.wait_for_compiles()
        bt.reset_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        equal = check(fn(*args))
        while bt.stats()[op]["launches"] == 0:
            time.sleep(0.0002)
            equal = check(fn(*args)) and equal
            if time.perf_counter() - t0 > 60:
                raise RuntimeError(f"{op}: no kernel in 60 s")
        first = (time.perf_counter() - t0) * 1e3
        st = bt.wait_for_compiles()
        done = (time.perf_counter() - t0) * 1e3
        equal = check(fn(*args)) and equal
        return first, done, equal, st["done"]
    finally:
        bitfold._default = saved
        for o in bt._table.OPS:
            o.new_kernels()
        rt.close()


def _equal(a, b):
    if isinstance(a, tuple):
        return all(torch.equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    import bitfold
    import bitfold.torch as bt
    from bitfold.torch import _eager
    bt.configure(verify="off")
    rows = []
    for op, shape, a in cases():
        row = {"op": op, "shape": list(shape)}
        for quick in (False, True):
            runs = [one_run(bitfold, bt, _eager, op, a, quick) for _ in range(args.reps)]
            key = "quick" if quick else "plain"
            row[key] = {"first_kernel_ms": statistics.median(r[0] for r in runs),
                        "all_compiled_ms": statistics.median(r[1] for r in runs),
                        "torch_equal": all(r[2] for r in runs),
                        "compiles": runs[0][3]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    md = [f"New shape to first kernel in bitfold.torch (async compile), median of "
          f"{args.reps} fresh runtimes, disk cache off, CUDA_CACHE_DISABLE="
          f"{os.environ.get('CUDA_CACHE_DISABLE', '(unset)')}; `python3 bench/first_kernel.py` "
          f"on {torch.cuda.get_device_name()}",
          "",
          "| op | shape | first kernel ms, plain | first kernel ms, quick-first | "
          "all compiled ms, plain | all compiled ms, quick-first | compiles (plain / quick) "
          "| torch.equal |",
          "|---|---|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        p, q = r["plain"], r["quick"]
        md.append(f"| {r['op']} | {r['shape']} | {p['first_kernel_ms']:.1f} | "
                  f"{q['first_kernel_ms']:.1f} | {p['all_compiled_ms']:.1f} | "
                  f"{q['all_compiled_ms']:.1f} | {p['compiles']} / {q['compiles']} | "
                  f"{p['torch_equal'] and q['torch_equal']} |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "first_kernel.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "first_kernel.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(md))
    return 0 if all(r["plain"]["torch_equal"] and r["quick"]["torch_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
