"""Probe: torch CUDA reductions over the innermost dim vs the emulator of
docs/aten-reduce.md, bit for bit. Run on a GPU host:

    OUT=/some/dir python3 aten_reduce_probe.py [--quick]

Writes $OUT/probe.json (one record per case), $OUT/summary.txt and
$OUT/small_cases.json (inputs and torch outputs of a few small cases, for
the C++ tests). For each case the emulator tries the derived launch
parameters first, then the alternatives of params(); the record says which
matched (0 = the derived one, -1 = none).
"""
import json
import os
import sys
import time
from multiprocessing import Pool

import numpy as np
import torch
import torch.nn.functional as F

import aten_reduce_emu as emu
from aten_reduce_emu import (config, params, project, reduce_rows, round_to,
                             F32)

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
ES = {"bf16": 2, "f16": 2, "f32": 4}
MAX_ROWS = 2048


def make_x(shape, dt, seed, mode):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)
    lo, hi = (-4, 4) if dt == "f16" else (-8, 8)
    if mode == "wide":
        e = torch.randint(lo, hi, shape, generator=g, device="cuda")
        x = x * torch.exp2(e.float())
    elif mode == "cancel":
        big = torch.rand(shape, generator=g, device="cuda") < 0.05
        x = torch.where(big, x * 2.0 ** (hi - 2), x * 2.0 ** lo)
    return x.to(DT[dt])


def branch(cfg, base_shift):
    if cfg["G"] > 1:
        return "global"
    if not cfg["vectorized"]:
        return "strided"
    b = "vec"
    if cfg["split_warps"]:
        b += "+warps"
    if cfg["C"] % cfg["V"] or base_shift % cfg["V"]:
        b += "+head/tail"
    return b


def pick_rows(R, seed):
    if R <= MAX_ROWS:
        return np.arange(R)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(R, MAX_ROWS, replace=False))


def run_case(op, dt, R, C, seed, mode, base_shift=0, layout="2d"):
    """Runs torch; returns the record's inputs (numpy) for the emulator."""
    t = DT[dt]
    if layout == "cl":  # channels-last 4D (N, C, H, W), rows = pixels
        H = max(1, R // 8)
        N, W = 1, R // H
        R = N * H * W
        x4 = make_x((N, H, W, C), dt, seed, mode).permute(0, 3, 1, 2)
        x = x4.permute(0, 2, 3, 1).reshape(R, C)
    elif base_shift:
        buf = make_x((R * C + 16,), dt, seed, mode)
        x = buf[base_shift:base_shift + R * C].view(R, C)
    else:
        x = make_x((R, C), dt, seed, mode)
    if mode == "zeros":
        x[::3] = 0
    extra = {}
    if op == "sum":
        red, y = x, x.sum(-1)
    elif op == "sum_f32out":  # the fp32 accumulator itself (same kernel order)
        red, y = x, x.sum(-1, dtype=torch.float32)
    elif op == "mean_f32out":
        red, y = x, x.mean(-1, dtype=torch.float32)
    elif op == "norm_f32out":
        red, y = x, x.norm(dim=-1, dtype=torch.float32)
    elif op == "mean_pow":
        red = x.pow(2)
        y = red.mean(-1)
        want = round_to(x.float().cpu().numpy() ** 2, dt)
        extra["pow_exact"] = bool(np.array_equal(red.float().cpu().numpy(), want))
        base_shift = 0  # x.pow(2) is a fresh, aligned tensor
    elif op == "mean_fpow":
        red = x.float().pow(2)
        y = red.mean(-1)
        base_shift = 0
    elif op == "norm":
        red, y = x, x.norm(dim=-1)
    elif op == "normalize":
        red = x
        y = x4.norm(dim=1, keepdim=True).permute(0, 2, 3, 1).reshape(R)
        z = F.normalize(x4, dim=1).permute(0, 2, 3, 1).reshape(R, C)
        extra["z"] = z
    rows = pick_rows(R, seed)
    ri = torch.from_numpy(rows).cuda()
    rec = dict(op=op, dt=dt, R=R, C=C, seed=seed, mode=mode,
               base_shift=base_shift, layout=layout)
    rec.update({k: v for k, v in extra.items() if k != "z"})
    data = dict(x=x[ri].float().cpu().numpy(), red=red[ri].float().cpu().numpy(),
                y=y[ri].float().cpu().numpy(), rows=rows)
    if "z" in extra:
        data["z"] = extra["z"][ri].float().cpu().numpy()
    return rec, data


def emulate(args):
    rec, data = args
    op, dt, R, C = rec["op"], rec["dt"], rec["R"], rec["C"]
    pop = op.split("_")[0]
    pop = "norm" if pop == "normalize" else pop
    kind = "norm" if pop == "norm" else "sum"
    red_dt = "f32" if op == "mean_fpow" else dt
    out_dt = "f32" if op.endswith("_f32out") else red_dt
    cands = params(pop, ES[red_dt], C)
    cands = cands + [c + ("asc",) for c in cands]
    want = data["y"]
    rec = dict(rec)
    rec["match"] = -1
    for ci, cand in enumerate(cands):
        vt0, V, fma = cand[:3]
        emu.ASCENDING_SHUFFLES = len(cand) > 3
        cfg = config(C, R, V, ES[red_dt])
        acc = reduce_rows(data["red"], cfg, kind, vt0, fma, data["rows"],
                          rec["base_shift"])
        got = project(pop, acc, C, R, out_dt)
        bad = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
        if ci == 0:
            rec["branch"] = branch(cfg, rec["base_shift"])
            rec["cfg"] = {k: cfg[k] for k in ("bw", "bh", "G", "vectorized")}
            rec["bad_rows_derived"] = int(len(bad))
            if len(bad):
                r = int(bad[0])
                rec["first_bad"] = dict(row=int(data["rows"][r]),
                                        torch=float(want[r]), emu=float(got[r]))
        if not len(bad):
            rec["match"] = ci
            rec["params"] = list(cand)
            if "z" in data:  # F.normalize: x / clamp_min(norm, eps)
                den = np.maximum(got, round_to(np.float32(1e-12), dt))
                z = round_to((data["x"] / den[:, None]).astype(F32), dt)
                rec["normalize_exact"] = bool(np.array_equal(
                    z.view(np.uint32), data["z"].view(np.uint32)))
            break
    return rec


def cases(quick):
    out = []
    step = 7 if quick else 1
    for C in range(1, 1101, step):
        for op, dts in (("sum", "bf16 f32"), ("sum_f32out", "bf16 f16"),
                        ("mean_pow", "bf16 f16"), ("mean_fpow", "bf16"),
                        ("mean_f32out", "bf16"), ("norm", "bf16 f32"),
                        ("norm_f32out", "bf16 f16")):
            for dt in dts.split():
                if dt == "f16" and C % 5:
                    continue
                out.append((op, dt, 37, C, C * 7 + len(out) % 3, "wide", 0, "2d"))
    bigC = (96, 192, 384, 512, 1024, 2048, 3072, 4096, 5120, 8192)
    for C in bigC:
        for R in (1, 5, 64, 4096):
            for op in ("sum", "sum_f32out", "mean_pow", "mean_fpow", "norm", "norm_f32out"):
                for dt in ("bf16", "f16", "f32"):
                    if (op == "mean_fpow" or op.endswith("_f32out")) and dt == "f32":
                        continue
                    if op == "mean_fpow" and dt != "bf16":
                        continue
                    out.append((op, dt, R, C, R + C, "wide", 0, "2d"))
    # HF RMSNorm shapes, Wan normalize shapes (channels-last rows).
    for R, C in ((4096, 4096), (8192, 5120), (4216, 4096)):
        for op in ("mean_pow", "mean_fpow"):
            out.append((op, "bf16", R, C, R, "wide", 0, "2d"))
    for R, C in ((4 * 480 * 832, 96), (4 * 240 * 416, 192), (2 * 120 * 208, 384),
                 (60 * 104, 384), (4096, 512), (4096, 1024)):
        for dt in ("bf16", "f32", "f16"):
            out.append(("normalize", dt, R, C, C, "wide", 0, "cl"))
        out.append(("normalize", "bf16", R, C, C + 1, "zeros", 0, "cl"))
    # Split across CTAs (few rows, long C) and across warps.
    for R, C in ((1, 131072), (1, 262147), (1, 1 << 20), (2, 200000), (3, 65536),
                 (4, 65536), (1, 8192), (1, 16384), (16, 100000)):
        for op in ("sum", "norm", "mean_pow", "sum_f32out", "norm_f32out"):
            for dt in ("bf16", "f32"):
                if op.endswith("_f32out") and dt == "f32":
                    continue
                out.append((op, dt, R, C, C + R, "wide", 0, "2d"))
    # Misaligned base address: the vectorized path's head.
    for off in range(1, 8):
        for C in (128, 130, 200, 1001, 4096):
            for op in ("sum", "norm", "sum_f32out", "norm_f32out"):
                for dt in ("bf16", "f32"):
                    if op.endswith("_f32out") and dt == "f32":
                        continue
                    out.append((op, dt, 9, C, off * C, "wide", off, "2d"))
    for C in (128, 256, 4096, 1000):
        for op in ("sum_f32out", "norm_f32out", "mean_fpow", "sum"):
            out.append((op, "bf16", 64, C, 3 * C, "cancel", 0, "2d"))
    return out


def main():
    quick = "--quick" in sys.argv
    od = os.environ.get("OUT", ".")
    t0 = time.time()
    meta = dict(torch=torch.__version__, git=torch.version.git_version,
                device=torch.cuda.get_device_name(),
                sms=torch.cuda.get_device_properties(0).multi_processor_count)
    todo, errors = [], []
    for c in cases(quick):
        try:
            todo.append(run_case(*c))
        except Exception as e:  # keep going: one broken case must not cost the run
            errors.append(f"{c}: {e!r}")
    torch.cuda.synchronize()
    t1 = time.time()
    with Pool(max(1, (os.cpu_count() or 2) - 1)) as pool:
        recs = pool.map(emulate, todo, chunksize=8)
    t2 = time.time()
    small = []
    for (rec, data) in todo:
        if rec["R"] <= 5 and rec["C"] in (5, 33, 130, 200, 1001) and rec["op"] in ("sum_f32out", "norm_f32out", "mean_fpow", "sum", "norm"):
            small.append(dict(rec, x=data["x"].view(np.uint32).tolist(),
                              y=data["y"].view(np.uint32).tolist()))
    with open(os.path.join(od, "probe.json"), "w") as f:
        json.dump(dict(meta=meta, records=recs), f)
    with open(os.path.join(od, "small_cases.json"), "w") as f:
        json.dump(small, f)
    summ = {}
    for r in recs:
        key = (r["op"], r["dt"], r["branch"])
        s = summ.setdefault(key, dict(n=0, derived=0, alt={}, none=0))
        s["n"] += 1
        if r["match"] == 0:
            s["derived"] += 1
        elif r["match"] > 0:
            s["alt"][str(r["params"])] = s["alt"].get(str(r["params"]), 0) + 1
        else:
            s["none"] += 1
    lines = [json.dumps(meta), f"cases {len(recs)}; torch {t1 - t0:.1f}s emu {t2 - t1:.1f}s",
             "op dt branch: cases, derived-order matches, alternative matches, no match"]
    for k in sorted(summ):
        s = summ[k]
        lines.append(f"{k[0]} {k[1]} {k[2]}: {s['n']} {s['derived']} {s['alt']} {s['none']}")
    bad = [r for r in recs if r["match"] != 0][:40]
    lines.append("first non-derived records:")
    lines += [json.dumps(r) for r in bad]
    lines.append("errors: %d %s" % (len(errors), errors[:5]))
    lines.append("pow exact: %s" % all(r.get("pow_exact", True) for r in recs))
    nz = [r for r in recs if "normalize_exact" in r]
    lines.append("normalize exact: %d of %d" % (sum(r["normalize_exact"] for r in nz), len(nz)))
    with open(os.path.join(od, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:80]))


if __name__ == "__main__":
    main()
