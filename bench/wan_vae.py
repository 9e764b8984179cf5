"""diffusers' AutoencoderKLWan (Wan 2.1 VAE), encode + decode, patched with
bitfold.torch.patch (verify off) vs unpatched, in the default NCDHW layout
and in channels_last_3d: torch.equal of the outputs, bitfold kernel
launches and eager fallbacks (with their reasons) per forward, and the
wall time of a forward both ways.

    python3 bench/wan_vae.py [--frames 9] [--hw 256] [--reps 10] [--out DIR]
        [--layouts NCDHW,channels_last_3d] [--profile]
        (on a GPU host with torch and diffusers; writes DIR/wan_vae.json
        and DIR/wan_vae.md; --profile also DIR/wan_vae_profile_<layout>.txt:
        torch.profiler's kernels of one forward unpatched and patched, and
        every layout the patched forward refused, with the reason)

Method: random weights (seeded), bf16, a video [1, 3, frames, hw, hw]
(latent [1, 16, 1 + (frames - 1) / 4, hw / 8, hw / 8]); one forward is
vae(video, sample_posterior=False): encode, then decode of the posterior's
mode. Times: medians of `reps` unpatched and `reps` patched forwards,
alternated one by one (so a drift over the run falls on both alike), after
warm ones and one untimed forward after each switch
(bench/_patched_model.py), each between torch.cuda.synchronize() calls. Launches and
fallbacks: bitfold.torch's stats() over one forward after the timed ones. Exit status 1 if any case
differs from eager, falls back, or is slower patched than unpatched.
"""
import argparse
import os

import torch

from _patched_model import difference_notes, finish, interleaved_ms, measured


def build(seed, channels_last):
    from diffusers import AutoencoderKLWan
    torch.manual_seed(seed)
    vae = AutoencoderKLWan().to("cuda", torch.bfloat16).eval()
    if channels_last:  # cuDNN then writes NDHWC activations
        for m in vae.modules():
            if isinstance(m, torch.nn.Conv3d):
                m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last_3d)
    return vae


def profile_table(fwd, rows=40):
    """The CUDA kernels and ops of one forward, most GPU time first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fwd()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows)


def refused_sites():
    """Every layout a patched call refused since the last reset: op, the
    reason and its detail, and the site key (dtypes, shapes, strides)."""
    from bitfold.torch import _ops
    lines = []
    for op, table in _ops._sites.items():
        for key, ent in table.items():
            if ent[0] is None:
                lines.append(f"{op}: {ent[1]}: {ent[2]}\n    key {key}")
    return lines


def case(frames, hw, reps, channels_last, seed=0, profile_dir=None):
    import bitfold.torch as bt
    vae = build(seed, channels_last)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    x = torch.randn(1, 3, frames, hw, hw, generator=g, device="cuda", dtype=torch.bfloat16)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    fwd = lambda: vae(x, sample_posterior=False, return_dict=False)[0]  # noqa: E731
    with torch.no_grad():
        eager = fwd()
        for _ in range(3):
            fwd()
        bt.configure(verify="off")
        patched = bt.patch(vae, verify="off")
        fwd()
        # New shapes compile in the background (eager serves them meanwhile):
        # time and compare the kernels, not that interval.
        bt.wait_for_compiles()
        out = fwd()
        for _ in range(2):
            fwd()
        t_eager, t_bitfold = interleaved_ms(fwd, vae, reps)
        bt.reset_stats()
        fwd()
        torch.cuda.synchronize()
        stats = bt.stats()
        if profile_dir:
            layout = "channels_last_3d" if channels_last else "NCDHW"
            text = ["# patched forward (verify off)", profile_table(fwd),
                    "# layouts refused (op: reason: detail, then the site key)",
                    *refused_sites()]
            bt.unpatch(vae)
            text = ["# unpatched forward", profile_table(fwd)] + text
            with open(os.path.join(profile_dir, f"wan_vae_profile_{layout}.txt"), "w") as f:
                f.write("\n".join(text) + "\n")
        else:
            bt.unpatch(vae)
    return {"layout": "channels_last_3d" if channels_last else "NCDHW",
            "video": list(x.shape), "output": list(out.shape),
            **measured(out, eager, (t_eager, t_bitfold), patched, stats, eager_again=fwd)}


def table(rows, args):
    out = [f"Wan 2.1 VAE (AutoencoderKLWan) encode+decode, video "
           f"[1,3,{args.frames},{args.hw},{args.hw}], bf16, verify off, median of "
           f"{args.reps}; `python3 bench/wan_vae.py --frames {args.frames} --hw {args.hw} "
           f"--reps {args.reps}` on {torch.cuda.get_device_name()}",
           "",
           "| layout | torch.equal | launches | fallbacks | unpatched ms | patched ms | speed-up |",
           "|---|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        out.append(f"| {r['layout']} | {r['torch_equal']} | {r['launches']} | {r['fallbacks']} | "
                   f"{r['ms_unpatched']} | {r['ms_patched']} | "
                   f"{r['ms_unpatched'] / r['ms_patched']:.3f} |")
    for r in rows:
        if r["fallback_reasons"]:
            out.append(f"\n{r['layout']} fallbacks: {r['fallback_reasons']}")
    out += difference_notes(rows, "layout")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=9)
    ap.add_argument("--hw", type=int, default=256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--layouts", default="NCDHW,channels_last_3d",
                    help="comma-separated: NCDHW, channels_last_3d")
    ap.add_argument("--profile", action="store_true",
                    help="also write torch.profiler tables and the refused layouts")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    unknown = set(layouts) - {"NCDHW", "channels_last_3d"}
    if unknown:
        ap.error(f"unknown layouts {sorted(unknown)}: NCDHW, channels_last_3d")
    os.makedirs(args.out, exist_ok=True)
    rows = [case(args.frames, args.hw, args.reps, lay == "channels_last_3d",
                 profile_dir=args.out if args.profile else None) for lay in layouts]
    finish(args.out, "wan_vae", rows, table(rows, args), "layout")

if __name__ == "__main__":
    main()
