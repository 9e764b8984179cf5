#!/usr/bin/env python3
"""Instructions on a kernel's path when no fallback is taken, from SASS.

Walks an `nvdisasm -c` listing from the entry: an unconditional BRA jumps,
a conditional forward BRA is taken when the region it skips holds a
fallback (FCHK, FFMA.RM or a CALL: div.rn's range check, libdevice's expf,
div.rn's slow path), and falls through otherwise; counts what it passes.
Used for the SiLU fast path's per-element counts (docs/exact-silu.md).

    ptxas -arch=sm_90 kernel.ptx -o k.cubin && nvdisasm -c k.cubin > k.sass
    python3 bench/experiments/sass_path.py k.sass
"""
import re
import sys
from collections import Counter

INSN = re.compile(r"\s+/\*([0-9a-f]{4})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"\s*(\.L_x_\d+):")
TARGET = re.compile(r"BRA\s+(?:!?U?P\d,\s*)?`\((\.L_x_\d+)\)")


def parse(path):
    # The kernel's own section: nvdisasm may list libdevice's slow-path
    # functions (div.rn, sqrt.rn, rcp.rn) before it.
    lines = open(path).read().split("\n")
    entry = [i for i, l in enumerate(lines) if l.startswith(".text.bitfold")]
    insns, label_at, pending = [], {}, []
    for line in lines[entry[0] if entry else 0:]:
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSN.match(line)
        if m:
            for name in pending:
                label_at[name] = len(insns)
            pending = []
            insns.append(m.group(2))
    return insns, label_at


def walk(insns, label_at):
    def holds_fallback(lo, hi):
        body = " ".join(insns[lo:hi])
        return "FCHK" in body or "FFMA.RM" in body or "CALL" in body

    ops, i = Counter(), 0
    while i < len(insns):
        text = insns[i]
        guarded = text.startswith("@")
        op = text.split()[1 if guarded else 0]
        ops[op.split(".")[0]] += 1
        if op == "EXIT" and not guarded:
            break
        m = TARGET.search(text)
        if op == "BRA" and m:
            target = label_at[m.group(1)]
            if not guarded or (target > i and holds_fallback(i + 1, target)):
                i = target
                continue
        i += 1
    return ops


def main():
    ops = walk(*parse(sys.argv[1]))
    print("path", sum(ops.values()))
    print(" ".join(f"{k} {v}" for k, v in ops.most_common()))


if __name__ == "__main__":
    main()
