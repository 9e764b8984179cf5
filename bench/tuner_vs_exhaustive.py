#!/usr/bin/env python3
"""How far the tuner's winner is from the best config of an exhaustive sweep.

Run `bitfold tune` twice on the same shapes on a GPU host: once as a user
does (its defaults: early cuts, default repetitions) and once exhaustively
(no cut, many repetitions), then compare the two tune DBs:

    bitfold tune --shapes bench/shapes/seed-shapes.json --out tuned
    bitfold tune --shapes bench/shapes/seed-shapes.json --out exhaustive \\
        --cut-ratio 1000 --repetitions 200
    python3 bench/tuner_vs_exhaustive.py tuned/tune-db.json exhaustive/tune-db.json

For each shape it prints the tuner's winner, that config's median in the
exhaustive sweep, the exhaustive best, and the gap in percent; it exits 1
when a gap exceeds --max-gap (default 3%).
"""
import argparse
import json
import sys


def entries(path):
    with open(path) as f:
        db = json.load(f)
    out = {}
    for e in db.get("entries", []):
        k = e["key"]
        key = (k["kernel"], k["kernelHash"], k["shapeClass"], tuple(k.get("dtypes", [])))
        times = {m["config"]: m["medianUs"] for m in e["measurements"] if not m.get("cut")}
        out[key] = (e.get("winner"), times)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tuned")
    ap.add_argument("exhaustive")
    ap.add_argument("--max-gap", type=float, default=3.0, help="percent")
    a = ap.parse_args()
    tuned, full = entries(a.tuned), entries(a.exhaustive)
    print("| kernel | shape class | tuner's winner | its us (exhaustive) | exhaustive best | best us | gap |")
    print("|---|---|---|--:|---|--:|--:|")
    worst, missing = 0.0, 0
    for key, (winner, _) in sorted(tuned.items()):
        if key not in full or not full[key][1]:
            missing += 1
            continue
        times = full[key][1]
        best = min(times, key=times.get)
        if winner not in times:
            print(f"| {key[0]} | {key[2]} | {winner} | (not in the sweep) | {best} | {times[best]:.2f} | - |")
            missing += 1
            continue
        gap = 100.0 * (times[winner] / times[best] - 1.0)
        worst = max(worst, gap)
        print(f"| {key[0]} | {key[2]} | {winner} | {times[winner]:.2f} | {best} | {times[best]:.2f} | {gap:.1f}% |")
    print(f"\nworst gap {worst:.1f}% over {len(tuned) - missing} shapes ({missing} not compared)")
    return 1 if worst > a.max_gap else 0


if __name__ == "__main__":
    sys.exit(main())
