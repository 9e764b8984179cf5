"""Launches one case of bench_kernels.py a few times, for a profiler.

    ncu --clock-control none -k regex:bitfold_ --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight python3 bench/profile_kernel.py "LN+modulate (1,4096"

The case is picked by the start of its name in bench_kernels.cases();
"copy" launches a device-to-device copy of --copy-mb MB instead (the
bandwidth reference, as torch's copy kernel).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_kernels  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", help="start of a case name, or 'copy'")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--copy-mb", type=int, default=67)
    args = ap.parse_args()
    if args.case == "copy":
        n = args.copy_mb * 1000 * 1000 // 2
        a = torch.empty(n, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        fn = lambda: b.copy_(a)  # noqa: E731
    else:
        rt = bench_kernels.bitfold.torch.Runtime()
        picked = [c for c in bench_kernels.cases(rt) if c[0].startswith(args.case)]
        if len(picked) != 1:
            sys.exit(f"'{args.case}' matches {len(picked)} cases: "
                     f"{[c[0] for c in bench_kernels.cases(rt)]}")
        fn = picked[0][2]
    for _ in range(args.launches):
        fn()
    torch.cuda.synchronize()
    print("launched", args.launches)


if __name__ == "__main__":
    main()
