"""What the whole-model benches (wan_vae.py, glm_image.py) share: a forward
timed patched and unpatched in turns, stats() summed, and the results
written and judged the same way."""
import json
import os
import statistics
import time

import torch


def one_ms(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def interleaved_ms(fwd, model, reps):
    """Median ms of an unpatched and a patched forward, alternated rep by
    rep (unpatch, warm, time, patch, warm, time), so a drift of the host or
    the GPU over the run (clocks, other load, the allocator) falls on both
    alike. Each switch is followed by one untimed forward: a model is
    patched once and then run, so the first forward after a switch (new
    bound methods, cold caches on both sides) is not what a user waits for
    per call. Without it the small GLM configs timed a tie (H200, session
    14) where 30 forwards in a row ran 1.10x faster patched."""
    import bitfold.torch as bt
    plain, patched = [], []
    for _ in range(reps):
        bt.unpatch(model)
        one_ms(fwd)
        plain.append(one_ms(fwd))
        bt.patch(model, verify="off")
        one_ms(fwd)
        patched.append(one_ms(fwd))
    return statistics.median(plain), statistics.median(patched)


def difference(out, eager, eager_again):
    """Where out and eager differ: how many elements (NaN against NaN
    counts as equal), the largest |difference|, and whether eager run once
    more (eager_again(): the unpatched forward) equals eager, which tells a
    kernel's difference from the model's own run-to-run variation."""
    def differing(x, y):
        return (x != y) & ~(x.isnan() & y.isnan())
    a, b = out.float().flatten(), eager.float().flatten()
    diff = differing(a, b)
    with torch.no_grad():
        again = eager_again() if eager_again is not None else None
    d = (a - b)[diff].abs()
    return {"elements": int(diff.sum()), "of": diff.numel(),
            "max_abs": float(d.max()) if d.numel() else 0.0,
            "eager_repeats": None if again is None else not bool(differing(again.float().flatten(), b).any())}


def difference_notes(rows, name):
    """A line for each row whose output differs from eager."""
    again = {True: "; eager run again equals the first eager run",
             False: "; eager run again differs from the first eager run too", None: ""}
    return [f"\n{r[name]} differs from eager in {d['elements']} of {d['of']} elements "
            f"(largest |difference| {d['max_abs']:.3g}){again[d['eager_repeats']]}"
            for r in rows if (d := r.get("difference"))]


def measured(out, eager, ms, patched, stats, digits=2, eager_again=None):
    """The fields every row shares: torch.equal, the two medians (ms:
    unpatched, patched), the patched sites, and stats()' kernel launches,
    fallbacks and {"op: reason": n}; where out differs from eager, how
    (difference(), eager_again: the unpatched forward)."""
    reasons = {f"{op}: {why}": n for op, s in stats.items() for why, n in s["fallbacks"].items()}
    equal = bool(torch.equal(out, eager))
    return {"torch_equal": equal,
            "difference": None if equal else difference(out, eager, eager_again),
            "ms_unpatched": round(ms[0], digits), "ms_patched": round(ms[1], digits),
            "patched_sites": len(patched),
            "launches": sum(s["launches"] for s in stats.values()),
            "fallbacks": sum(reasons.values()), "fallback_reasons": reasons}


def finish(out_dir, stem, rows, md, name):
    """Writes out_dir/stem.json and .md, prints md; exits 1 naming the rows
    (by their `name` field) that differ, fall back or are slower patched."""
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write(md)
    print(md)
    bad = [r[name] for r in rows
           if not r["torch_equal"] or r["fallbacks"] or r["ms_patched"] > r["ms_unpatched"]]
    if bad:
        raise SystemExit(f"not equal, falling back or slower patched: {bad}")
