"""diffusers' GlmImageTransformer2DModel (GLM-Image's transformer, random
weights, 2 layers), patched with bitfold.torch.patch (verify off) vs
unpatched, at three widths: small (4 heads x 32), odd (5 x 48) and
GLM-Image's own (32 x 128 at a 1024x1024 image): torch.equal of the
outputs, kernel launches and fallbacks per forward, and the wall time of
a forward both ways.

    python3 bench/glm_image.py [--reps 15] [--small] [--out DIR]
        (on a GPU host with torch and diffusers; writes DIR/glm_image.json
        and DIR/glm_image.md)

Method: the models and inputs of examples/torch/glm_image_blocks.py. Times
are medians of `reps` unpatched and `reps` patched forwards, alternated one
by one (so a drift over the run falls on both alike), after warm ones
and one untimed forward after each switch (bench/_patched_model.py),
each between torch.cuda.synchronize() calls; the example's own timing (a
mean of sequential runs, eager first) is for reading, not for claims.
Launches and fallbacks: stats() over one forward after the timed ones.
Exit status 1 if any case differs from eager, falls back, or is slower
patched than unpatched.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "torch"))
from glm_image_blocks import build, inputs  # noqa: E402
from _patched_model import difference_notes, finish, interleaved_ms, measured  # noqa: E402

CONFIGS = [  # name, heads, head_dim, latent_hw, text_len
    ("small", 4, 32, 32, 16),
    ("odd", 5, 48, 24, 10),
    ("glm-image width", 32, 128, 128, 64),
]


def case(name, heads, head_dim, latent_hw, text_len, reps, seed=0):
    import bitfold.torch as bt
    model = build(heads, head_dim, layers=2, seed=seed)
    kw = inputs(latent_hw, text_len, seed + 1)
    fwd = lambda: model(**kw)[0]  # noqa: E731
    with torch.no_grad():
        eager = fwd()
        bt.configure(verify="off")
        patched = bt.patch(model, verify="off")
        fwd()
        bt.wait_for_compiles()  # time the kernels, not the compile interval
        out = fwd()
        t_plain, t_patched = interleaved_ms(fwd, model, reps)
        bt.reset_stats()
        fwd()
        torch.cuda.synchronize()
        stats = bt.stats()
        bt.unpatch(model)
    return {"config": name, "hidden": heads * head_dim, "heads": heads,
            "head_dim": head_dim, "tokens": (latent_hw // 2) ** 2 + text_len,
            **measured(out, eager, (t_plain, t_patched), patched, stats, digits=3,
                       eager_again=fwd)}


def table(rows, args):
    out = [f"GLM-Image transformer (GlmImageTransformer2DModel, 2 layers, random weights), "
           f"bf16, verify off, median of {args.reps}; `python3 bench/glm_image.py "
           f"--reps {args.reps}{' --small' if args.small else ''}` on "
           f"{torch.cuda.get_device_name()}",
           "",
           "| config | hidden (heads x dim) | tokens | torch.equal | launches | fallbacks "
           "| unpatched ms | patched ms | speed-up |",
           "|---|---|--:|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        out.append(f"| {r['config']} | {r['hidden']} ({r['heads']} x {r['head_dim']}) | "
                   f"{r['tokens']} | {r['torch_equal']} | {r['launches']} | {r['fallbacks']} | "
                   f"{r['ms_unpatched']} | {r['ms_patched']} | "
                   f"{r['ms_unpatched'] / r['ms_patched']:.3f} |")
    for r in rows:
        if r["fallback_reasons"]:
            out.append(f"\n{r['config']} fallbacks: {r['fallback_reasons']}")
    out += difference_notes(rows, "config")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--small", action="store_true", help="small and odd configs only")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    configs = CONFIGS[:2] if args.small else CONFIGS
    rows = [case(*c, reps=args.reps) for c in configs]
    finish(args.out, "glm_image", rows, table(rows, args), "config")

if __name__ == "__main__":
    main()
