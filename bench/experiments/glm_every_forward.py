"""Every patched forward of a GLM-Image config against eager, from the
first one (the kernels still compiling: bitfold.torch serves the eager
chain, then the quick config, then the chosen one) to three after
wait_for_compiles(). With --nan-fill, torch fills every fresh tensor
(bitfold's outputs included) with NaN, so a kernel that left an output
element unwritten would show as a difference instead of being hidden by a
reused block's old value.

    python3 bench/experiments/glm_every_forward.py [--config 4,32,32,16]
        [--nan-fill] [--verify off|once|always]
    (heads,head_dim,latent_hw,text_len; a GPU host with torch and
    diffusers; run it with an empty BITFOLD_CACHE_DIR to see the compiles)

Prints one line: whether eager equals itself, whether each of the four
patched forwards equals eager, and stats() per op (launches, mismatches,
fallbacks); then, for a differing forward, how it differs. Exit status 1
if any forward differs.
"""
import argparse
import os
import sys

import torch

here = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "torch"))
sys.path.insert(0, os.path.join(here, ".."))
from glm_image_blocks import build, inputs  # noqa: E402
from _patched_model import difference  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="4,32,32,16",
                    help="heads,head_dim,latent_hw,text_len (bench/glm_image.py's CONFIGS)")
    ap.add_argument("--nan-fill", action="store_true",
                    help="torch fills fresh memory with NaN (deterministic mode, warn only)")
    ap.add_argument("--verify", default="off", choices=["off", "once", "always"])
    args = ap.parse_args()
    heads, head_dim, hw, text_len = (int(v) for v in args.config.split(","))
    if args.nan_fill:
        torch.use_deterministic_algorithms(True, warn_only=True)
        import torch.utils.deterministic
        torch.utils.deterministic.fill_uninitialized_memory = True
    import bitfold.torch as bt
    model = build(heads, head_dim, layers=2, seed=0)
    kw = inputs(hw, text_len, 1)
    fwd = lambda: model(**kw)[0]  # noqa: E731
    with torch.no_grad():
        eager, eager_again = fwd(), fwd()
        bt.configure(verify=args.verify)
        bt.patch(model, verify=args.verify)
        first = fwd()
        bt.wait_for_compiles()
        patched = [first] + [fwd() for _ in range(3)]
        torch.cuda.synchronize()
    equal = [torch.equal(p, eager) for p in patched]
    stats = {op: (s["launches"], s.get("mismatches"), s["fallbacks"])
             for op, s in bt.stats().items()
             if s["launches"] or s["fallbacks"] or s.get("mismatches")}
    print(f"config {args.config} nan_fill {args.nan_fill}: eager equals itself "
          f"{torch.equal(eager, eager_again)}; patched forwards equal eager {equal}; "
          f"stats (launches, mismatches, fallbacks) {stats}")
    for i, (p, same) in enumerate(zip(patched, equal)):
        if not same:
            print(f"  forward {i + 1}: {difference(p, eager, None)}")
    sys.exit(0 if all(equal) else 1)


if __name__ == "__main__":
    main()
