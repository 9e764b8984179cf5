#!/usr/bin/env python3
"""examples/zoo/ on the GPU: each kernel against its PyTorch reference
(torch.equal, or the bound its file states) and a bench row (eager,
bitfold, a same-size copy; median of CUDA-event timed launches).

On a GPU host, with the package built (BITFOLD_LIB set):
    python3 tests/gpu/test_zoo.py --out OUT
Writes OUT/zoo.json and OUT/zoo.md; exit 0 when every kernel is within its
bound. Under pytest it skips where torch sees no GPU.
"""
import argparse
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ZOO = os.path.join(ROOT, "examples", "zoo")
sys.path.insert(0, os.path.join(ROOT, "python"))

import pytest  # noqa: E402

torch = pytest.importorskip("torch")  # without torch the module skips
import torch.nn.functional as F  # noqa: E402

SHAPES = [(4096, 4096), (33, 5120)]
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
WORD = {BF16: "bf16", torch.float32: "f32", FP8: "u8", torch.int32: "i32", torch.int8: "i8"}


def text_of(name):
    with open(os.path.join(ZOO, name + ".bfk")) as f:
        return f.read()


def raw(bitfold, t):
    word = WORD[t.dtype]
    data = t.view(torch.uint8) if t.dtype == FP8 else t
    return bitfold.RawTensor(data.data_ptr(), word, tuple(t.shape), tuple(t.stride()),
                             t.device.index)


def bf16_ulps(a, b):
    ia = a.contiguous().view(torch.int16).to(torch.int32)
    ib = b.contiguous().view(torch.int16).to(torch.int32)
    oa = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ob = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return int((oa - ob).abs().max())


def median_us(fn, iters=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1000.0)
    return sorted(ts)[len(ts) // 2]


# ---- The cases: inputs, bitfold launch operands, eager reference ----------

def halves(rows, d, g):
    x = torch.randn(rows, 2 * d, generator=g, device="cuda").to(BF16)
    return {"x": x, "g": x[:, :d], "u": x[:, d:]}


def silu_and_mul(t):
    return {"y": F.silu(t["g"]) * t["u"]}


def gelu_and_mul(t):
    return {"y": F.gelu(t["g"]) * t["u"]}


def gelu_tanh_and_mul(t):
    return {"y": F.gelu(t["g"], approximate="tanh") * t["u"]}


SCALE = 0.0625


def silu_and_mul_fp8(t):
    y = F.silu(t["g"]) * t["u"]
    return {"q": (y.float() / SCALE).clamp(-448.0, 448.0).to(FP8)}


def rope_inputs(rows, d, g):
    heads = 8
    tokens = max(1, rows // heads)
    x = torch.randn(tokens * heads, 2 * d, generator=g, device="cuda").to(BF16)
    ang = torch.rand(tokens, d, generator=g, device="cuda") * 6.28
    return {"x": x, "x1": x[:, :d], "x2": x[:, d:], "cos": ang.cos().to(BF16),
            "sin": ang.sin().to(BF16), "heads": heads}


def rope_neox(t):
    h = t["heads"]
    c = t["cos"].repeat_interleave(h, dim=0)
    s = t["sin"].repeat_interleave(h, dim=0)
    x1, x2 = t["x1"], t["x2"]
    return {"o1": x1 * c - x2 * s, "o2": x2 * c + x1 * s}


def rope_interleaved_inputs(rows, d, g):
    heads = 8
    tokens = max(1, rows // heads)
    x = torch.randn(tokens * heads, d, generator=g, device="cuda").to(BF16)
    ang = torch.rand(tokens, d // 2, generator=g, device="cuda") * 6.28
    cos, sin = ang.cos().to(BF16), ang.sin().to(BF16)
    # The kernel reads cos[i] at columns 2i and 2i+1 (one row per token).
    return {"x": x, "cos_half": cos, "sin_half": sin, "heads": heads,
            "cos": cos.repeat_interleave(2, dim=1).contiguous(),
            "sin": sin.repeat_interleave(2, dim=1).contiguous()}


def rope_interleaved(t):
    # vLLM's _apply_rotary_emb_torch with is_neox_style=False.
    h = t["heads"]
    c = t["cos_half"].repeat_interleave(h, dim=0)
    s = t["sin_half"].repeat_interleave(h, dim=0)
    x1, x2 = t["x"][:, ::2], t["x"][:, 1::2]
    o1 = x1 * c - x2 * s
    o2 = x2 * c + x1 * s
    return {"o": torch.stack((o1, o2), dim=-1).flatten(-2)}


SOFTMAX_SCALE = 0.125


def logits_inputs(rows, d, g):
    return {"x": (4 * torch.randn(rows, d, generator=g, device="cuda")).to(BF16)}


def scaled_softmax(t):
    return {"y": torch.softmax(t["x"] * SOFTMAX_SCALE, dim=-1)}


def scaled_log_softmax(t):
    return {"y": torch.log_softmax(t["x"] * SOFTMAX_SCALE, dim=-1)}


def rms_inputs(rows, d, g):
    return {"x": torch.randn(rows, d, generator=g, device="cuda").to(BF16),
            "residual": torch.randn(rows, d, generator=g, device="cuda").to(BF16),
            "w": (1 + 0.1 * torch.randn(d, generator=g, device="cuda")).to(BF16)}


def fused_add_rms_norm(t):
    s = t["x"].float() + t["residual"].float()
    h = s.to(BF16)
    var = s.pow(2).mean(dim=-1, keepdim=True)
    y = (s * torch.rsqrt(var + 1e-6)).to(BF16) * t["w"]
    return {"h": h, "y": y}


def rms_y(t, eps=1e-6):
    """vLLM RMSNorm.forward_native without residual: y and rstd."""
    x = t["x"].float()
    var = x.pow(2).mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    return (x * rstd).to(BF16) * t["w"], rstd


def rms_norm_rstd(t):
    y, rstd = rms_y(t)
    return {"y": y, "rstd": rstd}


def rms_norm_dynamic_per_token_quant(t):
    # vLLM tests/kernels/quant_utils.py ref_dynamic_per_token_quant (fp8)
    y, _ = rms_y(t)
    amax = y.abs().max(dim=-1)[0].float()
    scale = (amax / 448.0)[:, None].clamp(min=1.0 / (448.0 * 512.0))
    q = (y.float() / scale).clamp(-448.0, 448.0).to(FP8)
    return {"q": q, "scale": scale}


STATIC_SCALE = 0.0137  # its reciprocal is inexact


def rms_norm_static_fp8_quant(t):
    # vLLM's kernel multiplies by scale_inv = 1 / scale (f32), as torch's
    # division by a Python float does
    y, _ = rms_y(t)
    return {"q": (y.float() / STATIC_SCALE).clamp(-448.0, 448.0).to(FP8)}


def quant_inputs(rows, d, g):
    return {"x": (3 * torch.randn(rows, d, generator=g, device="cuda")).to(BF16)}


def dynamic_int8_quant(t):
    amax = t["x"].abs().max(dim=-1)[0].float()
    scale = (amax / 127.0)[:, None]
    q = (t["x"].float() / scale).round().clamp(-128, 127).to(torch.int8)
    return {"q": q, "scale": scale}


def layer_norm_stats(t):
    d = t["x"].shape[-1]
    y, mean, rstd = torch.ops.aten.native_layer_norm(t["x"], [d], None, None, 1e-5)
    return {"y": y, "mean": mean, "rstd": rstd}


def layer_norm_stats2(t):
    """(mean, rstd) side by side: one [rows, 2] f32 tensor."""
    r = layer_norm_stats(t)
    return {"y": r["y"], "stats": torch.stack((r["mean"].view(-1), r["rstd"].view(-1)), -1)}


# aten's mean order is one for D % 4 == 0 in 128..4096 (the RMSNorm
# kernels' guard): D = 4096, then a second and a non-power-of-two width.
RMS_SHAPES = [(4096, 4096), (33, 4096), (64, 2048), (40, 1000)]
# cross_entropy's guard: V % 8192 == 0 (aten's shared-memory kernel at
# 8192 and 16384, its regular kernel without a tail from 24576 on).
CE_SHAPES = [(1024, 32768), (33, 8192), (7, 131072)]


def ce_inputs(rows, v, g):
    x = (4 * torch.randn(rows, v, generator=g, device="cuda")).to(BF16)
    t = torch.randint(0, v, (rows,), generator=g, device="cuda")
    t[::7] = -100  # ignore_index rows: loss 0
    return {"x": x, "target64": t, "target": t.to(torch.int32)}


def cross_entropy(t):
    return {"loss": F.cross_entropy(t["x"], t["target64"], reduction="none")}


# GroupNorm rows: (N * 32 groups, C/32 channels * HxW); shapes of SD/Flux
# VAE blocks (C = 512 at 64x64, C = 128 at 32x32 with N = 2).
GN_GROUPS = 32
GN_SHAPES = [(32, 16 * 4096), (64, 4 * 1024)]


def gn_inputs(rows, d, g):
    cpg = 16 if d == 16 * 4096 else 4
    return {"x": (2 * torch.randn(rows, d, generator=g, device="cuda") + 0.5).to(BF16),
            "cpg": cpg}


def gn_affine_inputs(rows, d, g):
    t = gn_inputs(rows, d, g)
    c = GN_GROUPS * t["cpg"]
    t["gamma"] = (1 + 0.2 * torch.randn(c, generator=g, device="cuda")).to(BF16)
    t["beta"] = (0.1 * torch.randn(c, generator=g, device="cuda")).to(BF16)
    return t


def group_norm_affine(t):
    x, cpg = t["x"], t["cpg"]
    rows, d = x.shape
    n, c, hw = rows // GN_GROUPS, GN_GROUPS * cpg, d // cpg
    y = F.group_norm(x.view(n, c, hw), GN_GROUPS, t["gamma"], t["beta"], 1e-5)
    return {"y": y.view(rows, d)}


def group_norm(t):
    x, cpg = t["x"], t["cpg"]
    rows, d = x.shape
    n, c, hw = rows // GN_GROUPS, GN_GROUPS * cpg, d // cpg
    y, mean, rstd = torch.ops.aten.native_group_norm(x.view(n, c, hw), None, None, n, c, hw,
                                                     GN_GROUPS, 1e-5)
    return {"y": y.view(rows, d), "mean": mean.view(-1), "rstd": rstd.view(-1)}


# name, inputs, operand names (inputs), outputs, scalars, reference,
# {output: allowed bf16 ulps (0: torch.equal)}
CASES = [
    ("silu_and_mul", halves, ["g", "u"], ["y"], [], silu_and_mul, {"y": 0}),
    ("gelu_and_mul", halves, ["g", "u"], ["y"], [], gelu_and_mul, {"y": 0}),
    ("gelu_tanh_and_mul", halves, ["g", "u"], ["y"], [], gelu_tanh_and_mul, {"y": 0}),
    ("silu_and_mul_fp8", halves, ["g", "u"], ["q"], [SCALE], silu_and_mul_fp8, {"q": 0}),
    ("rope_neox", rope_inputs, ["x1", "x2", "cos", "sin"], ["o1", "o2"], [], rope_neox,
     {"o1": 0, "o2": 0}),
    ("fused_add_rms_norm", rms_inputs, ["x", "residual", "w"], ["h", "y"], [1e-6],
     fused_add_rms_norm, {"h": 0, "y": 2}),
    ("rope_interleaved", rope_interleaved_inputs, ["x", "cos", "sin"], ["o"], [],
     rope_interleaved, {"o": 0}),
    # 1 bf16 ulp: the row sum's fold order is not ATen's block reduction
    # (the files say why).
    ("scaled_softmax", logits_inputs, ["x"], ["y"], [SOFTMAX_SCALE], scaled_softmax,
     {"y": 1}),
    ("scaled_log_softmax", logits_inputs, ["x"], ["y"], [SOFTMAX_SCALE],
     scaled_log_softmax, {"y": 1}),
    ("rms_norm_rstd", rms_inputs, ["x", "w"], ["y", "rstd"], [1e-6], rms_norm_rstd,
     {"y": 0, "rstd": 0}),
    ("rms_norm_dynamic_per_token_quant", rms_inputs, ["x", "w"], ["q", "scale"], [1e-6],
     rms_norm_dynamic_per_token_quant, {"q": 0, "scale": 0}),
    ("rms_norm_static_fp8_quant", rms_inputs, ["x", "w"], ["q"], [1e-6, STATIC_SCALE],
     rms_norm_static_fp8_quant, {"q": 0}),
    ("dynamic_int8_quant", quant_inputs, ["x"], ["q", "scale"], [], dynamic_int8_quant,
     {"q": 0, "scale": 0}),
    ("layer_norm_stats", quant_inputs, ["x"], ["y", "mean", "rstd"], [1e-5],
     layer_norm_stats, {"y": 0, "mean": 0, "rstd": 0}),
    # per_row(2): (mean, rstd) packed as one [rows, 2] tensor.
    ("layer_norm_stats2", quant_inputs, ["x"], ["y", "stats"], [1e-5],
     layer_norm_stats2, {"y": 0, "stats": 0}),
    # The per-row i32 target: torch's int64 target as int32.
    ("cross_entropy", ce_inputs, ["x", "target"], ["loss"], [], cross_entropy, {"loss": 0}),
    # GroupNorm without affine (aten's RowwiseMoments order).
    ("group_norm", gn_inputs, ["x"], ["y", "mean", "rstd"], [1e-5], group_norm,
     {"y": 0, "mean": 0, "rstd": 0}),
    # With the per-channel affine: gamma/beta as vector(C) inputs.
    ("group_norm_affine", gn_affine_inputs, ["x", "gamma", "beta"], ["y"], [1e-5],
     group_norm_affine, {"y": 0}),
]
# Kernels guarded to one width, and outputs written over inputs (the
# launch passes the input as the output: vLLM's in-place calling form).
CASE_SHAPES = {"rms_norm_rstd": RMS_SHAPES, "rms_norm_dynamic_per_token_quant": RMS_SHAPES,
               "rms_norm_static_fp8_quant": RMS_SHAPES, "cross_entropy": CE_SHAPES,
               "group_norm": GN_SHAPES, "group_norm_affine": GN_SHAPES}
IN_PLACE = {"fused_add_rms_norm": {"h": "residual", "y": "x"}}


def run_case(rt, bitfold, case, shape, seed=0):
    name, make, ins, outs, scalars, eager, bounds = case
    rows, d = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = make(rows, d, g)
    ref = eager(t)
    k = rt.kernel_from_source(text_of(name))
    alias = IN_PLACE.get(name, {})
    t = {n: (v.clone() if n in alias.values() else v) for n, v in t.items()}
    got = {o: t[alias[o]] if o in alias else torch.empty_like(ref[o]) for o in outs}
    for o in outs:
        if o not in alias:
            got[o].view(torch.uint8).fill_(0xFF)
    args = [raw(bitfold, t[n]) for n in ins] + [raw(bitfold, got[o]) for o in outs]
    stream = torch.cuda.current_stream().cuda_stream

    def launch():  # per_batch rows (RoPE's cos/sin) come from the shapes
        k.launch(args, scalars, stream)
    launch()
    torch.cuda.synchronize()
    row = {"kernel": name, "shape": f"{rows},{d}", "ok": True, "outputs": {}}
    for o in outs:
        a, b = got[o], ref[o]
        equal = bool(torch.equal(a.view(torch.uint8), b.view(torch.uint8)))
        ulps = 0 if equal or a.dtype != BF16 else bf16_ulps(a, b)
        row["outputs"][o] = {"torch_equal": equal, "max_ulp": ulps, "bound": bounds[o]}
        row["ok"] &= equal or (bounds[o] > 0 and ulps <= bounds[o])
    moved = sum(t[n].numel() * t[n].element_size() for n in ins) + sum(
        got[o].numel() * got[o].element_size() for o in outs)
    src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    row["bitfold_us"] = median_us(launch)
    row["eager_us"] = median_us(lambda: eager(t))
    row["copy_us"] = median_us(lambda: dst.copy_(src))
    row["bitfold_vs_copy"] = round(row["copy_us"] / row["bitfold_us"], 3)
    return row


def run_all():
    import bitfold
    rt = bitfold.Runtime()
    return [run_case(rt, bitfold, c, s) for c in CASES for s in CASE_SHAPES.get(c[0], SHAPES)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_zoo_kernels_match_their_references():
    for r in run_all():
        assert r["ok"], r


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_cross_entropy_is_torch_equal_as_a_torch_op_with_an_int32_target():
    """The per-row i32 input through bitfold.torch: the target as an
    int32 tensor of one value per row, the loss one value per row; equal
    to eager with ignore_index rows (0) and in-range targets."""
    import bitfold.torch as bt
    g = torch.Generator(device="cuda").manual_seed(3)
    t = ce_inputs(64, 32768, g)
    ce = bt.op_from_source(text_of("cross_entropy"), "zoo_test::cross_entropy")
    loss = ce(t["x"], t["target"])
    ref = cross_entropy(t)["loss"]
    assert loss.shape == ref.shape and loss.dtype == ref.dtype
    assert torch.equal(loss, ref)
    assert torch.equal(loss[::7], torch.zeros_like(loss[::7]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_group_norm_affine_is_torch_equal_as_a_torch_op_with_vector_inputs():
    """gamma and beta passed as they are ([C] tensors, C taken from their
    length) to the op on the [N*32, C/32*HxW] view of an NCHW tensor."""
    import bitfold.torch as bt
    g = torch.Generator(device="cuda").manual_seed(4)
    t = gn_affine_inputs(64, 4 * 1024, g)
    gn = bt.op_from_source(text_of("group_norm_affine"), "zoo_test::group_norm_affine")
    y = gn(t["x"], t["gamma"], t["beta"], 1e-5)
    assert torch.equal(y, group_norm_affine(t)["y"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_in_place_kernel_checks_aliasing_instead_of_trusting_it():
    """fused_add_rms_norm declares h aliases residual and y aliases x: the
    same tensors run in place, distinct tensors run as usual (same bits),
    any other overlap is refused."""
    import bitfold
    rt = bitfold.Runtime()
    k = rt.kernel_from_source(text_of("fused_add_rms_norm"))
    g = torch.Generator(device="cuda").manual_seed(1)
    t = rms_inputs(64, 1024, g)
    stream = torch.cuda.current_stream().cuda_stream
    h, y = torch.empty_like(t["x"]), torch.empty_like(t["x"])
    k.launch([raw(bitfold, v) for v in (t["x"], t["residual"], t["w"], h, y)], [1e-6], stream)
    x2, r2 = t["x"].clone(), t["residual"].clone()
    k.launch([raw(bitfold, v) for v in (x2, r2, t["w"], r2, x2)], [1e-6], stream)
    torch.cuda.synchronize()
    assert torch.equal(r2, h) and torch.equal(x2, y)
    shifted = t["x"].view(-1)[1024:].view(63, 1024)  # x's rows, one row on
    with pytest.raises(bitfold.BitfoldError, match="overlaps"):
        k.launch([raw(bitfold, v) for v in (t["x"][:63], t["residual"][:63], t["w"],
                                            torch.empty_like(shifted), shifted)], [1e-6], stream)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_torch_ops_return_per_row_outputs_and_run_in_place():
    import bitfold.torch as bt
    g = torch.Generator(device="cuda").manual_seed(2)
    x = (3 * torch.randn(300, 2048, generator=g, device="cuda")).to(BF16)
    ln = bt.op_from_source(text_of("layer_norm_stats"), "zoo_test::layer_norm_stats")
    y, mean, rstd = ln(x, 1e-5)
    ry, rmean, rrstd = torch.ops.aten.native_layer_norm(x, [2048], None, None, 1e-5)
    assert mean.shape == (300,) and rstd.shape == (300,)
    assert torch.equal(y, ry) and torch.equal(mean, rmean.view(-1))
    assert torch.equal(rstd, rrstd.view(-1))
    far = bt.op_from_source(text_of("fused_add_rms_norm"), "zoo_test::fused_add_rms_norm")
    t = rms_inputs(300, 2048, g)
    ref = fused_add_rms_norm(t)
    xs, rs = t["x"].clone(), t["residual"].clone()
    out = far.custom_op(xs, rs, t["w"], 1e-6)  # the registered op: mutates, returns ()
    assert out is None
    assert torch.equal(rs, ref["h"]) and bf16_ulps(xs, ref["y"]) <= 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_torch_op_returns_a_per_row_k_output_as_rows_by_k():
    """layer_norm_stats2's per_row(2) output through bitfold.torch: shape
    [rows..., 2] for 2-D and 3-D inputs, (mean, rstd) of each row equal to
    aten's native_layer_norm statistics; the fake impl gives the same
    shape."""
    import bitfold.torch as bt
    g = torch.Generator(device="cuda").manual_seed(5)
    ln = bt.op_from_source(text_of("layer_norm_stats2"), "zoo_test::layer_norm_stats2")
    for shape in [(300, 2048), (3, 100, 1024)]:
        x = (3 * torch.randn(*shape, generator=g, device="cuda")).to(BF16)
        y, stats = ln(x, 1e-5)
        ry, rmean, rrstd = torch.ops.aten.native_layer_norm(x, [shape[-1]], None, None, 1e-5)
        assert stats.shape == shape[:-1] + (2,) and stats.dtype == torch.float32
        assert torch.equal(y, ry)
        assert torch.equal(stats[..., 0], rmean.squeeze(-1))
        assert torch.equal(stats[..., 1], rrstd.squeeze(-1))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fy, fstats = ln.custom_op(torch.empty(300, 2048, dtype=BF16, device="cuda"), 1e-5)
        assert fstats.shape == (300, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    rows = run_all()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.cuda.get_device_name()
    with open(os.path.join(a.out, "zoo.json"), "w") as f:
        json.dump({"device": dev, "torch": torch.__version__, "rows": rows}, f, indent=1)
    md = [f"# examples/zoo on {dev}", "", "| kernel | shape | exact/bound | eager us | "
          "bitfold us | copy us | bitfold/copy speed |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ex = ", ".join(f"{o}: {'equal' if v['torch_equal'] else str(v['max_ulp']) + ' ulp'}"
                       for o, v in r["outputs"].items())
        md.append(f"| {r['kernel']} | {r['shape']} | {ex} | {r['eager_us']:.1f} | "
                  f"{r['bitfold_us']:.1f} | {r['copy_us']:.1f} | {r['bitfold_vs_copy']} |")
    with open(os.path.join(a.out, "zoo.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
