"""Times every stock template at its seed shapes on the GPU, beside PyTorch
eager, in one run; checks bit-exactness on the same data.

    BITFOLD_LIB=.../libbitfold.so python3 bench/bench_kernels.py --out DIR

Per row: bitfold median (CUDA events via triton.testing.do_bench, which
flushes L2 between repetitions), spread (p20-p80), bytes moved, TB/s,
fraction of the measured copy bandwidth, eager median and speed-up, and
torch.equal. do_bench's flush writes 256 MB, leaving L2 full of dirty
lines that the timed kernel must write back: up to ~50 MB of extra DRAM
writes, which matters for kernels of 20-100 MB. So each row also has a
device-to-device copy of the same bytes timed the same way, and both the
kernel and that copy in a steady stream (back-to-back over rotating
buffers, graph replay: each launch pays for its predecessor's write-backs,
as in a model's pipeline), the copy both as a memcpy and as a kernel on
the SMs (sm_copy_fn: a graph's memcpy node ran far slower than the
flushed memcpy at some rows). Small shapes are launch-bound, so host time per launch and
CUDA-graph replay time are reported separately. The steady stream (and the
graph replay of small shapes) is timed again with bitfold's programmatic
dependent launch on (bitfold_kernel_set_pdl): each launch may start while
its predecessor finishes. The copy has no such launch, so those columns
compare with the plain steady copy only as a pipeline would see them. Writes DIR/bench.md,
DIR/bench.json and, where matplotlib is available, DIR/bench.png.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))
import bitfold.torch  # noqa: E402
import references as ref  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench  # noqa: E402

BF = torch.bfloat16


def rnd(shape, amp=1.0, dtype=BF):
    x = torch.randn(shape, device="cuda", dtype=torch.float32) * amp
    return x.to(dtype)


def measure(fn, rep_ms=400):
    q = do_bench(fn, warmup=50, rep=rep_ms, quantiles=[0.5, 0.2, 0.8], return_mode="median")
    return q  # [median, p20, p80] in ms


def copy_bandwidth():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    med, _, _ = measure(lambda: b.copy_(a))
    return 2 * n / (med * 1e-3)


def graph_replay_us(fn, n=100):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    med, _, _ = measure(lambda: g.replay())
    return med * 1e3 / n


# Launches one steady-stream graph holds at most: small rows rotate through
# tens of thousands of buffer sets (steady_sets), and 20 rounds of them took
# most of a bench run's time in capture (the HF RMSNorm decode rows).
MAX_GRAPH_LAUNCHES = 20_000


def steady_us(fns, rounds=20):
    """Time per launch in a back-to-back stream over rotating buffer sets
    (no flush), replayed from a CUDA graph so the host is out of the way:
    every launch pays for writing back what the one before it left dirty in
    L2, as in a pipeline of kernels, and finds its inputs outside L2 (the
    sets together are larger than L2). `rounds` passes over the sets, fewer
    where that would exceed MAX_GRAPH_LAUNCHES (at least one: every set
    once). (median, min, max) over 7 replays."""
    rounds = max(1, min(rounds, MAX_GRAPH_LAUNCHES // max(len(fns), 1)))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            for f in fns:
                f()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(7):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (rounds * len(fns)))
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def steady_sets(nbytes):
    """Buffer sets to rotate through: together >= 600 MB (L2 is 50-60 MB)."""
    return max(2, -(-600_000_000 // nbytes))


def copy_fn(nbytes):
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    return lambda: b.copy_(a)


@triton.jit
def _sm_copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def sm_copy_fn(nbytes):
    """A copy of nbytes / 2 bytes by a kernel on the SMs (Triton, 16-byte
    accesses, 16 KiB a CTA): the steady reference. `b.copy_(a)` is a
    cudaMemcpyAsync, a memcpy node in a CUDA graph, which the driver may
    serve otherwise (bench/results/2026-12-04-s19-gpu-session.md: 223.8 us
    for 613 MB in one row, 144.2 in another)."""
    n = nbytes // 8  # int32 words of each buffer
    a = torch.empty(n, dtype=torch.int32, device="cuda")
    b = torch.empty_like(a)
    block = 4096
    grid = (triton.cdiv(n, block),)
    return lambda: _sm_copy[grid](a, b, n, BLOCK=block, num_warps=8)


def host_us(fn, n=2000):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / n * 1e6


def cases(rt):
    """(name, bytes, bitfold fn, eager fn, result fn[, exact reference fn])."""
    return [build() for build in builders(rt)]


def builders(rt):
    """One zero-argument function per case; each call builds the case on
    fresh tensors (the steady-state timing rotates through several)."""
    out = []

    def ln(b, s, d):
        x = rnd((b, s, d))
        proj = rnd((b, 4 * d), 0.1)
        scale, shift = proj[:, d:2 * d], proj[:, 3 * d:]
        y = torch.empty_like(x)
        k = rt.kernel("ln_modulate")
        nbytes = 2 * x.numel() * 2 + 2 * 2 * b * d
        return (f"LN+modulate ({b},{s},{d})", nbytes,
                lambda: k.launch([x, scale, shift, y], [1e-6]),
                lambda: ref.ln_modulate(x, scale, shift, 1e-6), lambda: y)

    out.append(lambda: ln(1, 4096, 4096))
    out.append(lambda: ln(2, 1024, 2240))

    def qk(s):
        q, k_ = rnd((1, s, 32, 128)), rnd((1, s, 32, 128))
        qo, ko = torch.empty_like(q), torch.empty_like(k_)
        kern = rt.kernel("qk_layernorm")
        nbytes = 4 * q.numel() * 2
        return (f"qk LN (1,{s},32,128) q+k", nbytes,
                lambda: kern.launch([q, qo, k_, ko], [1e-6]),
                lambda: torch.cat([t.flatten() for t in ref.qk_layernorm(q, k_, 1e-6)]),
                lambda: torch.cat([qo.flatten(), ko.flatten()]))

    out.append(lambda: qk(4360))

    def conv(shape, residual, images_residual=False):
        # images_residual: the Wan VAE's contiguous shortcut under a
        # channels-last conv output (residual_layout=channels_first).
        fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
        x = rnd(shape).contiguous(memory_format=fmt)
        bias = rnd((shape[1],))
        h = None
        if residual:
            h = rnd(shape) if images_residual else rnd(shape).contiguous(memory_format=fmt)
        y = torch.empty_like(x)
        params = f"residual={int(residual)}"
        if images_residual:
            params += ",residual_layout=channels_first"
        k = rt.kernel("conv_bias", params)
        tensors = [x, bias] + ([h] if residual else []) + [y]
        nbytes = (3 if residual else 2) * x.numel() * 2
        name = (f"conv bias{' + residual' if residual else ''}"
                f"{' (NCDHW)' if images_residual else ''} {list(shape)}")
        return (name, nbytes, lambda: k.launch(tensors, []),
                lambda: ref.conv_bias(x, bias, h), lambda: y)

    out.append(lambda: conv((1, 96, 4, 480, 832), False))
    out.append(lambda: conv((1, 96, 4, 480, 832), True))
    out.append(lambda: conv((1, 96, 4, 480, 832), True, images_residual=True))
    out.append(lambda: conv((1, 192, 1, 64, 64), True, images_residual=True))

    def gate(b, s, d):
        r, u = rnd((b, s, d)), rnd((b, s, d))
        g = rnd((b, 1, d), 0.1)
        y = torch.empty_like(r)
        k = rt.kernel("residual_gate", "gate=per_batch")
        nbytes = 3 * r.numel() * 2 + b * d * 2
        return (f"residual + u*gate ({b},{s},{d})", nbytes,
                lambda: k.launch([r, u, g.view(b, d), y], []),
                lambda: ref.residual_gate(r, u, g), lambda: y)

    out.append(lambda: gate(1, 4096, 4096))

    def rms(b, s, d):
        x = rnd((b, s, d))
        w = rnd((d,))
        proj = rnd((b, 2 * d), 0.1)
        scale, shift = proj[:, :d], proj[:, d:]
        y = torch.empty_like(x)
        k = rt.kernel("rmsnorm_modulate")
        nbytes = 2 * x.numel() * 2 + 3 * d * 2
        # eager: the flashinfer transcription is numpy (slow, not a kernel);
        # time the aten chain it replaces instead (norm + modulate) and
        # check bits against the transcription.
        def eager():
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            yy = ((xf * rstd) * w.float()).to(BF)
            return yy * (1 + scale[:, None]) + shift[:, None]
        return (f"RMSNorm + scale/shift ({b},{s},{d})", nbytes,
                lambda: k.launch([x, w, scale, shift, y], [1e-6]), eager, lambda: y,
                lambda: ref.rmsnorm_modulate(x, w, scale, shift, 1e-6))

    out.append(lambda: rms(1, 4096, 4096))

    def wan(shape, form, ncdhw=False):
        # Wan VAE RMSNorm + SiLU, bias=False (`+ 0.`), both eager forms;
        # channels-last, or contiguous NC[D]HW (the fold along strided C).
        fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
        x = rnd(shape).contiguous(memory_format=torch.contiguous_format if ncdhw else fmt)
        c = shape[1]
        gamma = rnd((c,))
        g = gamma.view(1, c, *([1] * (len(shape) - 2)))
        y = torch.empty_like(x)
        s = x[0, 0].numel()
        layout = (f",layout=channels_first,outvec={4 if s % 4 == 0 else 2 if s % 2 == 0 else 1}"
                  if ncdhw else "")
        k = rt.kernel("wan_rmsnorm_silu", f"form={form},bias=0{layout}")
        nbytes = 2 * x.numel() * 2 + c * 2
        scale = c ** 0.5

        def eager():
            if form == "x":
                return torch.nn.functional.silu(
                    torch.nn.functional.normalize(x, dim=1) * scale * g + 0.)
            return torch.nn.functional.silu(
                torch.nn.functional.normalize(x.float(), dim=1).to(x.dtype) * scale * g + 0.)
        return (f"Wan RMSNorm+SiLU {form}{' NCDHW' if ncdhw else ''} {list(shape)}", nbytes,
                lambda: k.launch([x, gamma, y], [scale]), eager, lambda: y)

    for shape in [(1, 96, 4, 480, 832), (1, 192, 4, 240, 416), (1, 384, 2, 120, 208)]:
        out.append(lambda shape=shape: wan(shape, "x"))
    for shape in [(1, 96, 4, 480, 832), (1, 384, 2, 120, 208)]:
        out.append(lambda shape=shape: wan(shape, "f32"))
    for form in ("x", "f32"):
        out.append(lambda form=form: wan((1, 96, 4, 480, 832), form, ncdhw=True))
    for shape in [(1, 192, 4, 240, 416), (1, 384, 2, 120, 208)]:
        out.append(lambda shape=shape: wan(shape, "x", ncdhw=True))

    def hf(b, s, d):
        # HF LlamaRMSNorm in aten's mean order.
        x = rnd((b, s, d))
        w = rnd((d,))
        y = torch.empty_like(x)
        k = rt.kernel("hf_rmsnorm")
        nbytes = 2 * x.numel() * 2 + d * 2

        def eager():
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return w * h.to(x.dtype)
        return (f"HF RMSNorm ({b},{s},{d})", nbytes,
                lambda: k.launch([x, w, y], [1e-6]), eager, lambda: y)

    out.append(lambda: hf(1, 4096, 4096))
    out.append(lambda: hf(8, 1024, 5120))
    # LLM decode: 1..15 rows, one definition per row class of aten's order
    # (the speed goal: (1,1,4096) in at most 3 us, graph replay).
    for rows in range(1, 16):
        out.append(lambda rows=rows: hf(1, rows, 4096))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default="",
                    help="substrings separated by commas, or by '|' when one holds a "
                         "comma: time only the cases named so")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    rt = bitfold.torch.Runtime()
    bw = copy_bandwidth()
    rows = []
    builds = builders(rt)
    if args.only:
        keys = args.only.split("|" if "|" in args.only else ",")
        names = [b()[0] for b in builds]
        builds = [b for b, n in zip(builds, names) if any(k in n for k in keys)]
    # All cases on their tensors first, as the flushed timings always ran;
    # the steady-state timings (which allocate more buffer sets) after.
    for c in [build() for build in builds]:
        name, nbytes, fn, eager, result = c[:5]
        exact_ref = c[5] if len(c) > 5 else eager
        fn()
        torch.cuda.synchronize()
        got = result().clone()
        expect = exact_ref()
        equal = bool(torch.equal(got, expect))
        med, p20, p80 = measure(fn)
        emed, _, _ = measure(eager)
        row = {
            "kernel": name, "bytes": nbytes, "us": med * 1e3, "p20_us": p20 * 1e3,
            "p80_us": p80 * 1e3, "tbps": nbytes / (med * 1e-3) / 1e12,
            "frac_copy": nbytes / (med * 1e-3) / bw, "eager_us": emed * 1e3,
            "eager_frac_copy": nbytes / (emed * 1e-3) / bw,
            "speedup": emed / med, "equal": equal,
            "target_us": nbytes / (0.85 * bw) * 1e6,
        }
        row["copy_same_us"] = measure(copy_fn(nbytes))[0] * 1e3
        if nbytes < 64e6:
            row["graph_us"] = graph_replay_us(fn)
            row["host_us"] = host_us(fn)
        rows.append(row)
    for row, build in zip(rows, builds):
        name, nbytes = row["kernel"], row["bytes"]
        sets = steady_sets(nbytes)
        cs = [build() for _ in range(sets)]
        row["steady_us"], row["steady_min_us"], row["steady_max_us"] = \
            steady_us([c[2] for c in cs])
        row["steady_frac_copy"] = nbytes / (row["steady_us"] * 1e-6) / bw
        for k in rt.kernels():
            k.set_pdl(True)
        row["steady_pdl_us"] = steady_us([c[2] for c in cs])[0]
        if "graph_us" in row:
            row["graph_pdl_us"] = graph_replay_us(cs[0][2])
        for k in rt.kernels():
            k.set_pdl(False)
        row["steady_pdl_frac_copy"] = nbytes / (row["steady_pdl_us"] * 1e-6) / bw
        del cs
        row["copy_same_steady_us"] = steady_us([copy_fn(nbytes) for _ in range(sets)])[0]
        row["sm_copy_steady_us"] = steady_us([sm_copy_fn(nbytes) for _ in range(sets)])[0]
        print(f"{name:42s} {row['us']:8.1f} us  {row['tbps']:.2f} TB/s  "
              f"{100 * row['frac_copy']:5.1f}% copy  eager {row['eager_us']:8.1f} us  "
              f"x{row['speedup']:.2f}  equal={row['equal']}  steady {row['steady_us']:.1f} us "
              f"({100 * row['steady_frac_copy']:.1f}%)  PDL {row['steady_pdl_us']:.1f} us  "
              f"same-size copy {row['copy_same_us']:.1f} us, "
              f"steady {row['copy_same_steady_us']:.1f} us, "
              f"SM copy steady {row['sm_copy_steady_us']:.1f} us", flush=True)
    info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "copy_tbps": bw / 1e12, "bitfold": rt.version, "rows": rows}
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(info, f, indent=1)
    lines = [f"GPU {info['gpu']}, torch {info['torch']}, bitfold {info['bitfold']}; "
             f"copy bandwidth {bw / 1e12:.2f} TB/s (bytes read + written)", "",
             "| kernel | MB | bitfold us (p20-p80) | TB/s | % of copy | 85% target us | "
             "same-size copy us | steady us (min-max) | steady % of copy | same-size copy steady us | "
             "same-size SM copy steady us | "
             "steady PDL us | steady PDL % of copy | "
             "eager us | eager % copy | speed-up | graph replay us | graph replay PDL us | "
             "host us/launch | bit-exact |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['bytes'] / 1e6:.0f} | {r['us']:.1f} ({r['p20_us']:.1f}-{r['p80_us']:.1f}) | "
            f"{r['tbps']:.2f} | {100 * r['frac_copy']:.0f}% | {r['target_us']:.1f} | "
            f"{r['copy_same_us']:.1f} | {r['steady_us']:.1f} ({r['steady_min_us']:.1f}-"
            f"{r['steady_max_us']:.1f}) | {100 * r['steady_frac_copy']:.0f}% | "
            f"{r['copy_same_steady_us']:.1f} | {r['sm_copy_steady_us']:.1f} | "
            f"{r['steady_pdl_us']:.1f} | "
            f"{100 * r['steady_pdl_frac_copy']:.0f}% | {r['eager_us']:.1f} | "
            f"{100 * r['eager_frac_copy']:.0f}% | {r['speedup']:.2f}x | "
            f"{r.get('graph_us', float('nan')):.1f} | {r.get('graph_pdl_us', float('nan')):.1f} | "
            f"{r.get('host_us', float('nan')):.1f} | "
            f"{'yes' if r['equal'] else 'NO'} |")
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 4.5))
        xs = range(len(rows))
        ax.bar([x - 0.3 for x in xs], [100 * r["frac_copy"] for r in rows], 0.2,
               label="bitfold (L2 flushed)")
        ax.bar([x - 0.1 for x in xs], [100 * r["steady_frac_copy"] for r in rows], 0.2,
               label="bitfold (steady stream)")
        ax.bar([x + 0.1 for x in xs], [100 * r["steady_pdl_frac_copy"] for r in rows], 0.2,
               label="bitfold (steady stream, PDL)")
        ax.bar([x + 0.3 for x in xs], [100 * r["eager_frac_copy"] for r in rows], 0.2,
               label="PyTorch eager")
        ax.axhline(85, color="gray", linestyle="--", label="85% target")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["kernel"] for r in rows], rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("% of copy bandwidth")
        ax.set_title(f"bitfold vs eager on {info['gpu']} (copy {bw / 1e12:.2f} TB/s)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "bench.png"), dpi=110)
    except ImportError:
        print("matplotlib not available: no plot")


if __name__ == "__main__":
    main()
