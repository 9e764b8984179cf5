"""What the Wan norm's exact fallbacks cost: the default kernels at
[1,96,4,480,832] (channels-first and channels-last, form x, bias 0) on the
same x with gamma random, ones and zeros. With gamma zeros every SiLU input
is 0 and no element goes near a rounding midpoint, so no access takes the
fallback while every other instruction stays; the gap to the random row is
what the fallbacks cost at that data (docs/exact-silu.md).

    python3 bench/experiments/wan_fallback_cost.py [TAG]     (GPU host)

Per row (one JSON line each): layout, gamma, torch.equal with the eager
chain, the share of elements whose f32 SiLU value lies within 12 units of a
bf16 midpoint (torch's own SiLU in f32: an estimate of the midpoint test's
rejections where the kernel has the test) and of warp accesses of 8 x 32
elements holding one, and bench_kernels' flushed median and steady time
(us). Run it with the codegen switches of docs/exact-silu.md to compare
forms (each is in the cache key). bench/results/2026-12-05-s25-session.md
section 2 has the H200's answer.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_kernels as bk  # noqa: E402
import bitfold.torch  # noqa: E402

SHAPE = (1, 96, 4, 480, 832)


def gammas(c):
    return {"randn": bk.rnd((c,)),
            "ones": torch.ones(c, device="cuda", dtype=torch.bfloat16),
            "zeros": torch.zeros(c, device="cuda", dtype=torch.bfloat16)}


def midpoint_share(x, g, scale):
    """Share of elements whose f32 SiLU lies within 12 units of a bf16
    rounding midpoint (the low 16 bits in [0x8000 - 12, 0x8000 + 12])."""
    h = (torch.nn.functional.normalize(x, dim=1) * scale * g + 0.).float()
    q = h / (1 + torch.exp(-h))
    low = q.view(torch.int32) & 0xFFFF
    return ((low >= 0x8000 - 12) & (low <= 0x8000 + 12)).float().mean().item()


def rows(rt, ncdhw, tag):
    c = SHAPE[1]
    fmt = torch.contiguous_format if ncdhw else torch.channels_last_3d
    layout = ",layout=channels_first,outvec=4" if ncdhw else ""
    k = rt.kernel("wan_rmsnorm_silu", f"form=x,bias=0{layout}")
    scale = c ** 0.5
    sets = bk.steady_sets(2 * 2 * torch.Size(SHAPE).numel())
    xs = [bk.rnd(SHAPE).contiguous(memory_format=fmt) for _ in range(sets)]
    ys = [torch.empty_like(x) for x in xs]
    for name, gamma in gammas(c).items():
        g = gamma.view(1, c, 1, 1, 1)
        x, y = xs[0], ys[0]
        k.launch([x, gamma, y], [scale])
        torch.cuda.synchronize()
        eager = torch.nn.functional.silu(
            torch.nn.functional.normalize(x, dim=1) * scale * g + 0.)
        p = midpoint_share(x, g, scale)
        flushed = bk.measure(lambda: k.launch([x, gamma, y], [scale]))[0] * 1e3
        steady = bk.steady_us([lambda i=i: k.launch([xs[i], gamma, ys[i]], [scale])
                               for i in range(sets)])[0]
        yield dict(tag=tag, layout="NCDHW" if ncdhw else "channels-last", gamma=name,
                   equal=bool(torch.equal(y, eager)), share_elements=p,
                   share_warp_accesses=1 - (1 - p) ** 256,
                   flushed_us=round(flushed, 2), steady_us=round(steady, 2))


def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else "default"
    torch.manual_seed(0)
    rt = bitfold.torch.Runtime()
    for ncdhw in (True, False):
        for row in rows(rt, ncdhw, tag):
            print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
