"""What the channels-first access pattern allows, measured with Triton.

A channels-first (NC[D]HW) norm reads and writes C planes S elements apart;
a CTA that owns P consecutive pixels touches 2P contiguous bytes (bf16) of
every plane. This probe times, in bench_kernels' steady stream, two Triton
kernels over a [C, P] tile per program at [1, 96, 4, 480, 832]:

- a channels-first copy (the tile loaded, then stored): the ceiling of the
  pattern at that run length;
- an RMSNorm + SiLU over the tile (inexact: Triton's own reduction order),
  the same memory pattern with the norm's work.

    python3 bench/experiments/cf_access_probe.py [P/WARPS ...]   (default: a grid)

C is padded to the next power of two (masked), as Triton needs.
bench/results/2026-12-03-s16-gpu-session.md has the H200's answer: the
copy runs 278 us at 32-byte runs, 167-172 at 128 and 155 at 256 and 512
(a plain copy: 145), so a CTA owning 64 pixels (bitfold's default,
128-byte runs) stays above about 167 us there whatever it computes.
"""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_kernels as bk  # noqa: E402


@triton.jit
def cf_copy(X, Y, S, C: tl.constexpr, CP: tl.constexpr, BP: tl.constexpr):
    p = tl.program_id(0) * BP + tl.arange(0, BP)
    c = tl.arange(0, CP)
    m = (c[:, None] < C) & (p[None, :] < S)
    x = tl.load(X + c[:, None] * S + p[None, :], mask=m)
    tl.store(Y + c[:, None] * S + p[None, :], x, mask=m)


@triton.jit
def cf_norm(X, G, Y, S, scale, C: tl.constexpr, CP: tl.constexpr, BP: tl.constexpr):
    p = tl.program_id(0) * BP + tl.arange(0, BP)
    c = tl.arange(0, CP)
    m = (c[:, None] < C) & (p[None, :] < S)
    x = tl.load(X + c[:, None] * S + p[None, :], mask=m, other=0.).to(tl.float32)
    g = tl.load(G + c, mask=c < C, other=0.).to(tl.float32)
    r = scale / tl.maximum(tl.sqrt(tl.sum(x * x, axis=0)), 1e-12)
    v = x * r[None, :] * g[:, None]
    v = v / (1 + tl.exp(-v))
    tl.store(Y + c[:, None] * S + p[None, :], v.to(tl.bfloat16), mask=m)


def main():
    shape = (1, 96, 4, 480, 832)
    c, s = shape[1], shape[2] * shape[3] * shape[4]
    cp = triton.next_power_of_2(c)
    nbytes = 4 * c * s
    sets = [(bk.rnd(shape), bk.rnd((c,)), torch.empty(shape, device="cuda", dtype=torch.bfloat16))
            for _ in range(bk.steady_sets(nbytes))]
    print(f"{list(shape)} bf16, {nbytes / 1e6:.0f} MB read + written; "
          f"copy {bk.steady_us([bk.copy_fn(nbytes) for _ in sets])[0]:.1f} us")
    grid = [tuple(int(v) for v in a.split("/")) for a in sys.argv[1:]] or \
        [(bp, w) for bp in (16, 32, 64, 128) for w in (2, 4, 8)]
    for bp, warps in grid:
        g = (triton.cdiv(s, bp),)
        copy = bk.steady_us([lambda t=t: cf_copy[g](t[0], t[2], s, c, cp, bp, num_warps=warps)
                             for t in sets])[0]
        norm = bk.steady_us([lambda t=t: cf_norm[g](t[0], t[1], t[2], s, c ** 0.5, c, cp, bp,
                                                    num_warps=warps) for t in sets])[0]
        print(f"{bp:4d} pixels ({2 * bp:4d}-byte runs), {warps} warps: channels-first copy "
              f"{copy:6.1f} us ({nbytes / copy / 1e6:.2f} TB/s), norm {norm:6.1f} us", flush=True)


if __name__ == "__main__":
    main()
