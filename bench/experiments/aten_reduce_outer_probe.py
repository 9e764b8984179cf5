"""Probe: torch CUDA reductions over dim 1 of NC[D]HW tensors (the reduced
dim is not the fastest) vs the emulator's config_outer (docs/aten-reduce.md
section 9), bit for bit. Run on a GPU host:

    OUT=/some/dir python3 aten_reduce_outer_probe.py

Writes $OUT/outer_probe.json (one record per case) and $OUT/summary.txt.
Per case (dtype, C, N, T, H, W, base offset) it compares, on a sample of
output pixels: x.sum(1, dtype=f32) (SumOps: the raw order), x.norm(dim=1)
(NormTwoOps, fma pushes) and F.normalize(x, dim=1), each with the derived
config; on a mismatch it also tries other lane counts and records which
(if any) matched.
"""
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import aten_reduce_emu as emu
from aten_reduce_emu import F32, config_outer, output_vec_size, reduce_rows, round_to

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
ES = {"bf16": 2, "f16": 2, "f32": 4}
SAMPLE = 2048


def make_x(shape, dt, seed, offset):
    g = torch.Generator(device="cuda").manual_seed(seed)
    n = int(np.prod(shape))
    x = torch.randn(n, generator=g, device="cuda", dtype=torch.float32)
    lo, hi = (-4, 4) if dt == "f16" else (-8, 8)
    e = torch.randint(lo, hi, (n,), generator=g, device="cuda")
    x = (x * torch.exp2(e.float())).to(DT[dt])
    if offset:
        buf = torch.empty(n + offset, device="cuda", dtype=DT[dt])
        buf[offset:] = x
        x = buf[offset:]
    return x.view(shape)


def emulate(xs, C, R, ovs, kind, use_fma, bh=None):
    cfg = config_outer(C, R, ovs)
    if bh is not None:
        cfg = dict(cfg, bh=bh, G=1)
    return reduce_rows(xs, cfg, kind, 4, use_fma, np.zeros(len(xs), np.int64)), cfg


def to_np(t):
    return t.float().cpu().numpy().astype(F32)


def case(dt, C, shape_sp, offset, seed):
    N, T, H, W = shape_sp
    S = T * H * W
    shape = (N, C, T, H, W)
    x = make_x(shape, dt, seed, offset)
    es = ES[dt]
    ovs = output_vec_size(S, x.data_ptr() // es, (S, C * S) if N > 1 else (S,))
    R = N * S
    rng = np.random.default_rng(seed)
    pix = np.sort(rng.choice(R, size=min(R, SAMPLE), replace=False))
    xr = x.reshape(N, C, S).permute(0, 2, 1).reshape(R, C)  # rows = outputs
    xs = to_np(xr[torch.as_tensor(pix, device="cuda")])
    rec = dict(dtype=dt, C=C, N=N, T=T, H=H, W=W, offset=offset, ovs=ovs)
    cfg = config_outer(C, R, ovs)
    rec.update(bh=cfg["bh"], G=cfg["G"], block=cfg["block"])
    torch.cuda.synchronize()
    got_sum = to_np(x.sum(1, dtype=torch.float32).reshape(R)[torch.as_tensor(pix, device="cuda")])
    got_norm = to_np(x.norm(dim=1).reshape(R)[torch.as_tensor(pix, device="cuda")])
    got_nz = F.normalize(x, dim=1).reshape(N, C, S).permute(0, 2, 1).reshape(R, C)
    got_nz = to_np(got_nz[torch.as_tensor(pix, device="cuda")])
    acc_sum, _ = emulate(xs, C, R, ovs, "sum", False)
    acc_norm, _ = emulate(xs, C, R, ovs, "norm", True)
    with np.errstate(invalid="ignore"):
        norm = round_to(np.sqrt(acc_norm).astype(F32), dt)
        den = np.maximum(norm, round_to(np.float32(1e-12), dt))
        nz = round_to((xs / den[:, None]).astype(F32), dt)
    ok_sum = np.array_equal(acc_sum.view(np.uint32), got_sum.view(np.uint32))
    ok_norm = np.array_equal(norm.view(np.uint32), got_norm.view(np.uint32))
    ok_nz = np.array_equal(nz.view(np.uint32), got_nz.view(np.uint32))
    rec.update(sum=bool(ok_sum), norm=bool(ok_norm), normalize=bool(ok_nz))
    if not ok_sum:  # which lane count (one CTA) would have matched?
        alts = []
        for bh in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            a, _ = emulate(xs, C, R, ovs, "sum", False, bh)
            if np.array_equal(a.view(np.uint32), got_sum.view(np.uint32)):
                alts.append(bh)
        rec["sum_matches_bh"] = alts
    return rec


SPATIAL = [(1, 1, 1, 1), (1, 1, 2, 3), (1, 1, 3, 5), (1, 1, 4, 4), (1, 1, 4, 8),
           (1, 1, 8, 16), (1, 4, 8, 8), (1, 1, 60, 104), (1, 4, 60, 104),
           (2, 1, 30, 52), (2, 4, 15, 26), (1, 4, 30, 52)]
CS = [2, 12, 96, 192, 384, 512, 1024, 7, 33, 129, 257, 1023]
BIG = [(96, (1, 4, 480, 832)), (192, (1, 4, 240, 416)), (384, (1, 4, 120, 208)),
       (12, (1, 4, 480, 832)), (1024, (1, 1, 30, 52))]


def run(recs, dt, C, sp, off, seed, t0):
    if time.time() - t0 > float(os.environ.get("PROBE_SECONDS", "170")):
        return  # the summary says how many cases ran
    try:
        recs.append(case(dt, C, sp, off, seed))
    except Exception as e:  # recorded, never silent
        recs.append(dict(dtype=dt, C=C, spatial=sp, offset=off, error=repr(e),
                         sum=False, norm=False, normalize=False, ovs=0, bh=0, G=0))


def main():
    out = os.environ.get("OUT", ".")
    t0 = time.time()
    recs = []
    seed = 1
    for dt in ("bf16", "f16", "f32"):
        for C in CS:
            for sp in SPATIAL:
                for off in ((0, 1) if sp in ((1, 1, 8, 16), (1, 4, 60, 104)) else (0,)):
                    run(recs, dt, C, sp, off, seed, t0)
                    seed += 1
        for C, sp in BIG:
            run(recs, dt, C, sp, 0, seed, t0)
            seed += 1
    bad = [r for r in recs if not (r["sum"] and r["norm"] and r["normalize"])]
    branches = {}
    for r in recs:
        k = f"ovs={r['ovs']} bh={r['bh']} G={r['G']}"
        branches[k] = branches.get(k, 0) + 1
    lines = [f"cases: {len(recs)}, mismatching cases: {len(bad)}, "
             f"comparisons: {3 * len(recs)}, seconds: {time.time() - t0:.1f}",
             f"torch {torch.__version__}, {torch.cuda.get_device_name()}",
             "cases per derived config: " + json.dumps(branches, sort_keys=True)]
    for r in bad[:60]:
        lines.append("MISMATCH " + json.dumps(r))
    with open(os.path.join(out, "outer_probe.json"), "w") as f:
        json.dump(recs, f)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
