"""Probe: aten's reduction order at decode row counts (1..17, 64, 1024), bit
for bit against the numpy emulator of docs/aten-reduce.md, and the HF
RMSNorm chain with the emulated mean. Run on a GPU host, next to
aten_reduce_emu.py and aten_reduce_probe.py:

    OUT=/some/dir python3 decode_rows_probe.py

Writes $OUT/decode_probe.json (one record per case) and
$OUT/decode_summary.txt. Per case: the torch result, the emulator with the
derived launch parameters (match 0) or an alternative (match > 0, -1 none),
and for the HF chain whether `weight * (h * rsqrt(mean + eps)).to(dt)`
with the emulated mean gives torch's bits.
"""
import json
import os
import time
from multiprocessing import Pool

import numpy as np
import torch

from aten_reduce_emu import config, project, reduce_rows, F32
from aten_reduce_probe import DT, emulate, make_x, run_case

ROWS = list(range(1, 18)) + [64, 1024]
COLS = (2048, 3072, 4096, 5120, 8192, 4099, 1001, 130, 96)


def hf_chain_case(dt, R, C, seed):
    """Eager HF LlamaRMSNorm at (R, C); the mean the emulator gives, put
    through the same torch ops, must give the same output bits."""
    x = make_x((R, C), dt, seed, "wide")
    w = make_x((C,), dt, seed + 1, "plain")
    eps = 1e-6
    h = x.float()
    var = h.pow(2).mean(-1, keepdim=True)
    y = w * (h * torch.rsqrt(var + eps)).to(DT[dt])
    sq = h.pow(2).cpu().numpy()
    cfg = config(C, R, 4, 4)
    acc = reduce_rows(sq, cfg, "sum", 4, False, np.arange(R))
    emu_var = torch.from_numpy(project("mean", acc, C, R, "f32")).cuda()[:, None]
    y_emu = w * (h * torch.rsqrt(emu_var + eps)).to(DT[dt])
    same_var = torch.equal(var, emu_var)
    same_y = torch.equal(y, y_emu)
    return dict(op="hf_chain", dt=dt, R=R, C=C, seed=seed,
                cfg={k: cfg[k] for k in ("bw", "bh", "G", "vectorized")},
                match=0 if (same_var and same_y) else -1,
                mean_equal=bool(same_var), y_equal=bool(same_y))


def cases():
    out = []
    for C in COLS:
        for R in ROWS:
            for dt in ("bf16", "f16", "f32"):
                ops = ["mean_pow", "norm"] + (["mean_fpow", "sum_f32out"] if dt != "f32" else [])
                for op in ops:
                    out.append((op, dt, R, C, 1000 * R + C, "wide", 0, "2d"))
    return out


def main():
    od = os.environ.get("OUT", ".")
    t0 = time.time()
    meta = dict(torch=torch.__version__, git=torch.version.git_version,
                device=torch.cuda.get_device_name(),
                sms=torch.cuda.get_device_properties(0).multi_processor_count)
    todo, errors, chain = [], [], []
    for c in cases():
        try:
            todo.append(run_case(*c))
        except Exception as e:  # one broken case must not cost the run
            errors.append(f"{c}: {e!r}")
    for C in COLS:
        for R in ROWS:
            for dt in ("bf16", "f16", "f32"):
                try:
                    chain.append(hf_chain_case(dt, R, C, 7 * R + C))
                except Exception as e:
                    errors.append(f"hf_chain {dt} {R} {C}: {e!r}")
    torch.cuda.synchronize()
    t1 = time.time()
    with Pool(max(1, (os.cpu_count() or 2) - 1)) as pool:
        recs = pool.map(emulate, todo, chunksize=4)
    t2 = time.time()
    recs += chain
    with open(os.path.join(od, "decode_probe.json"), "w") as f:
        json.dump(dict(meta=meta, records=recs), f)
    summ = {}
    for r in recs:
        cls = "R<16" if r["R"] < 16 else "R>=16"
        key = (r["op"], r["dt"], cls)
        s = summ.setdefault(key, [0, 0, 0])
        s[0] += 1
        s[1 if r["match"] == 0 else 2] += 1
    lines = [json.dumps(meta),
             f"cases {len(recs)}; torch {t1 - t0:.1f}s emu {t2 - t1:.1f}s",
             "op dt rows: cases, derived-order matches, other"]
    for k in sorted(summ):
        lines.append(f"{k[0]} {k[1]} {k[2]}: {summ[k][0]} {summ[k][1]} {summ[k][2]}")
    blocks = sorted({(r["C"], r["R"], json.dumps(r.get("cfg"))) for r in recs
                     if r["op"] in ("mean_fpow", "hf_chain") and r["dt"] == "bf16"})
    lines.append("block shapes (C, R, cfg) of the f32 mean:")
    lines += [f"  {c} {r} {g}" for c, r, g in blocks]
    bad = [r for r in recs if r["match"] != 0][:40]
    lines.append("non-derived records: %d" % sum(r["match"] != 0 for r in recs))
    lines += [json.dumps(r) for r in bad]
    lines.append("errors: %d %s" % (len(errors), errors[:5]))
    with open(os.path.join(od, "decode_summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))


if __name__ == "__main__":
    main()
