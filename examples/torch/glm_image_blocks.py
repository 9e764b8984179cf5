"""diffusers' GlmImageTransformer2DModel, patched with bitfold.torch.patch vs
unpatched: torch.equal of the forward output, the per-block and the
whole-model time, kernel launches and fallbacks (stats()).

Random weights (seeded; nothing is downloaded), bf16, on the GPU:
    python3 examples/torch/glm_image_blocks.py            small, odd and real width
    python3 examples/torch/glm_image_blocks.py --small    small and odd configs only
    python3 examples/torch/glm_image_blocks.py --verify off   no first-call check

How to use bitfold in a model is the three lines marked USE below.
"""
import argparse
import json
import time

import torch

from _timing import time_ms


def build(width_heads, head_dim, layers, seed, device="cuda"):
    from diffusers import GlmImageTransformer2DModel
    torch.manual_seed(seed)
    model = GlmImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=16, num_layers=layers,
        attention_head_dim=head_dim, num_attention_heads=width_heads, text_embed_dim=1472,
        time_embed_dim=512, condition_dim=256, prior_vq_quantizer_codebook_size=16384)
    return model.to(device, torch.bfloat16).eval()


def inputs(latent_hw, text_len, seed, batch=1, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    n = (latent_hw // 2) ** 2
    return dict(
        hidden_states=torch.randn(batch, 16, latent_hw, latent_hw, generator=g, device=device,
                                  dtype=torch.bfloat16),
        encoder_hidden_states=torch.randn(batch, text_len, 1472, generator=g, device=device,
                                          dtype=torch.bfloat16),
        prior_token_id=torch.randint(0, 16384, (batch, n), generator=g, device=device),
        prior_token_drop=torch.zeros(batch, n, dtype=torch.bool, device=device),
        timestep=torch.full((batch,), 500, device=device, dtype=torch.long),
        target_size=torch.tensor([[1024.0, 1024.0]] * batch, device=device),
        crop_coords=torch.zeros(batch, 2, device=device),
        return_dict=False)


def block_inputs(model, kwargs):
    """Block 0's arguments during one forward (for per-block timing)."""
    seen = {}

    def hook(_, args, kw):
        seen["args"], seen["kw"] = args, kw
    h = model.transformer_blocks[0].register_forward_pre_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(**kwargs)
    h.remove()
    return seen["args"], seen["kw"]


def run(name, heads, head_dim, layers, latent_hw, text_len, seed=0, verify="once"):
    import bitfold.torch as bt
    bt.reset_stats()
    model = build(heads, head_dim, layers, seed)
    kw = inputs(latent_hw, text_len, seed + 1)
    with torch.no_grad():
        eager = model(**kw)[0]
        args, bkw = block_inputs(model, kw)
        block = model.transformer_blocks[0]
        t_eager = time_ms(lambda: block(*args, **bkw), reps=20)
        m_eager = time_ms(lambda: model(**kw), reps=10)
        patched = bt.patch(model, verify=verify)      # USE: swap the sites
        out = model(**kw)[0]                          # USE: run as before
        t_bitfold = time_ms(lambda: block(*args, **bkw), reps=20)
        m_bitfold = time_ms(lambda: model(**kw), reps=10)
        bt.unpatch(model)                             # USE: restore
        again = model(**kw)[0]
    res = {"config": name, "verify": verify, "hidden": heads * head_dim, "heads": heads,
           "head_dim": head_dim,
           "layers": layers, "tokens": (latent_hw // 2) ** 2 + text_len,
           "torch_equal": bool(torch.equal(out, eager)),
           "unpatched_again_equal": bool(torch.equal(again, eager)),
           "block_ms_eager": round(t_eager, 3), "block_ms_bitfold": round(t_bitfold, 3),
           "model_ms_eager": round(m_eager, 3), "model_ms_bitfold": round(m_bitfold, 3),
           "patched_sites": len(patched), "stats": bt.stats(),
           # torch.equal alone would also hold if every site fell back:
           "kernel_launches": sum(s["launches"] for s in bt.stats().values()),
           "fallbacks": sum(sum(s["fallbacks"].values()) for s in bt.stats().values()),
           "verify_mismatches": sum(s["mismatches"] for s in bt.stats().values())}
    print(json.dumps(res, indent=1, default=str))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--verify", choices=("once", "off"), default="once",
                    help="bitfold's first-call check against eager (default once)")
    a = ap.parse_args()
    v = a.verify
    results = [run("small", heads=4, head_dim=32, layers=2, latent_hw=32, text_len=16, verify=v),
               # an odd width: 5 heads x 48 = 240, 12x12 patches, 10 text tokens
               run("odd", heads=5, head_dim=48, layers=2, latent_hw=24, text_len=10, verify=v)]
    if not a.small:  # GLM-Image's width: hidden 4096 = 32 heads x 128, 1024x1024 image
        results.append(run("glm-image width", heads=32, head_dim=128, layers=2, latent_hw=128,
                           text_len=64, verify=v))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    if not all(r["torch_equal"] and r["unpatched_again_equal"] for r in results):
        raise SystemExit("patched output differs from eager")


if __name__ == "__main__":
    main()
