"""diffusers' AutoencoderKLWan decode, patched with bitfold.torch.patch vs
unpatched: torch.equal of the decoded frames and the decode time.

Random weights (seeded), bf16, channels_last_3d activations (bitfold's conv
bias and RMSNorm + SiLU kernels are channels-last; in the default NCDHW
layout the patched sites fall back to eager, which stats() shows):
    python3 examples/torch/wan_vae_decode.py [--frames 3] [--hw 32]
"""
import argparse
import json
import time

import torch

from _timing import time_ms


def build(seed):
    from diffusers import AutoencoderKLWan
    torch.manual_seed(seed)
    vae = AutoencoderKLWan().to("cuda", torch.bfloat16).eval()
    for m in vae.modules():  # Conv3d weights channels-last: cuDNN then writes NDHWC
        if isinstance(m, torch.nn.Conv3d):
            m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last_3d)
    return vae


def run(frames, hw, seed=0, channels_last=True):
    import bitfold.torch as bt
    bt.reset_stats()
    vae = build(seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    z = torch.randn(1, 16, frames, hw, hw, generator=g, device="cuda", dtype=torch.bfloat16)
    if channels_last:
        z = z.contiguous(memory_format=torch.channels_last_3d)
    with torch.no_grad():
        eager = vae.decode(z, return_dict=False)[0]
        t_eager = time_ms(lambda: vae.decode(z, return_dict=False))
        patched = bt.patch(vae)
        out = vae.decode(z, return_dict=False)[0]
        t_bitfold = time_ms(lambda: vae.decode(z, return_dict=False))
        bt.unpatch(vae)
    res = {"latent": list(z.shape), "output": list(out.shape),
           "torch_equal": bool(torch.equal(out, eager)), "decode_ms_eager": round(t_eager, 2),
           "decode_ms_bitfold": round(t_bitfold, 2), "patched_sites": len(patched),
           "stats": bt.stats(),
           # torch.equal alone would also hold if every site fell back:
           "kernel_launches": sum(s["launches"] for s in bt.stats().values()),
           "verify_mismatches": sum(s["mismatches"] for s in bt.stats().values())}
    print(json.dumps(res, indent=1, default=str))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=3)
    ap.add_argument("--hw", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a.frames, a.hw)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    if not res["torch_equal"]:
        raise SystemExit("patched decode differs from eager")


if __name__ == "__main__":
    main()
