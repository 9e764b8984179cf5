"""Hostile and real-model views through bitfold.torch: every op either
launches with the eager chain's bits or falls back to that chain (counted,
with a reason); never a wrong result or a crash.

Hostile: arbitrary permutations, expanded (stride 0) and broadcast
operands, overlapping views (as_strided), slices, a lazily negated view. The binding's side of
it (which views bind and that each element is addressed exactly) is
tests/runtime/BadLayoutBindingTest.cpp; this file is the same walk on the
GPU against the live eager chains.

Real: the stride patterns the diffusers call sites produce (GLM-Image's
attention output split into text and image rows at batch 2, gates and
modulations as chunks of one projection, broadcast over rows or expanded
over the batch; q/k as chunks of a fused qkv projection; conv outputs
channels-last, NCDHW and permuted).
"""
import itertools

import pytest

from conftest import HAVE_CUDA, torch
from test_kernels import randn, same_bits

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU torch-op tests skipped",
                allow_module_level=True)

import bitfold.torch as bt  # noqa: E402
from bitfold.torch import _eager  # noqa: E402
# fresh: stats reset, auto mode, verify off, for every test of this file.
from test_aten_refusals import fresh, served_or_fell_back  # noqa: E402,F401

BF = torch.bfloat16


def check(op, args, name):
    """bitfold.torch.<op>(*args) vs the eager chain, bit for bit; twice (the
    second call takes the prepared or the remembered path)."""
    expect = getattr(_eager, op)(*args)
    expect = expect if isinstance(expect, tuple) else (expect,)
    for _ in range(2):
        got = getattr(bt, op)(*args)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for g, e in zip(got, expect):
            ok, detail = same_bits(g, e)
            assert ok, f"{op} {name}: {detail}"
    return served_or_fell_back(op)


def hostile_views(base):
    """(name, view) of a contiguous 3-D tensor `base` with the same logical
    shape: permuted storage, expanded, overlapping, sliced."""
    b, s, d = base.shape
    out = []
    for perm in itertools.permutations(range(3)):
        inv = [perm.index(i) for i in range(3)]
        stored = base.permute(*perm).contiguous()  # storage order perm
        out.append((f"storage order {perm}", stored.permute(*inv)))
    out.append(("expanded batch", base[:1].expand(b, s, d)))
    out.append(("expanded rows", base[:, :1].expand(b, s, d)))
    wide = torch.empty(b * s * d + d, dtype=base.dtype, device=base.device)
    wide.normal_()
    out.append(("overlapping rows", wide.as_strided((b, s, d), (s * d // 2, d // 2, 1))))
    out.append(("columns 2 apart", torch.cat([base, base], -1)[..., ::2]))
    out.append(("sliced rows", torch.cat([base, base], -1)[..., :d]))
    # base's layout and memory, read as -base (z.conj().imag makes such):
    # after base itself (storage order (0, 1, 2)), at a layout already served.
    out.append(("negated view", torch._neg_view(base)))
    return out


@pytest.mark.parametrize("which", [0, 1, 2])
def test_residual_gate_on_hostile_views_is_exact(which):
    """Operand `which` (residual, update, a full-shape gate) hostile."""
    gen = torch.Generator(device="cuda").manual_seed(which)
    args = [randn((2, 8, 128), BF, 1.0, gen) for _ in range(3)]
    for name, v in hostile_views(args[which]):
        call = list(args)
        call[which] = v
        check("residual_gate", tuple(call), f"operand {which} {name}")


@pytest.mark.parametrize("which", ["x", "scale"])
def test_ln_modulate_on_hostile_views_is_exact(which):
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = randn((2, 8, 128), BF, 1.0, gen)
    proj = randn((2, 4 * 128), BF, 1.0, gen)
    scale, shift = proj[:, :128], proj[:, 256:384]
    for name, v in hostile_views(x):
        args = (v, scale, shift, 1e-6) if which == "x" else (x, v[:, 0], shift, 1e-6)
        check("ln_modulate", args, f"{which} {name}")


def test_hf_rmsnorm_on_hostile_views_is_exact():
    gen = torch.Generator(device="cuda").manual_seed(11)
    x = randn((2, 8, 256), BF, 1.0, gen)
    w = randn((256,), BF, 1.0, gen)
    for name, v in hostile_views(x):
        check("hf_rmsnorm", (v, w, 1e-6, None, None, None), name)
        check("hf_rmsnorm", (x, w, 1e-6, v, None, None), "residual " + name)


def test_conv_bias_on_every_permutation_of_a_5d_tensor_is_exact():
    gen = torch.Generator(device="cuda").manual_seed(5)
    base = randn((1, 12, 3, 8, 8), BF, 1.0, gen)
    bias = randn((12,), BF, 1.0, gen)
    for perm in itertools.permutations(range(5)):
        inv = [perm.index(i) for i in range(5)]
        x = base.permute(*perm).contiguous().permute(*inv)
        check("conv_bias", (x, bias, None), f"storage order {perm}")
        check("conv_bias", (x, bias, x.clone()), f"storage order {perm} with residual")
    check("conv_bias", (base[:, :, :1].expand(1, 12, 3, 8, 8), bias, None), "expanded frames")


def test_glm_image_batch_two_call_site_patterns_are_exact():
    """GLM-Image's block at batch 2 (CFG): the attention output split into
    text and image rows (rows that no single stride reaches when B > 1),
    gates as chunks of the (B, 12D) modulation projection, unsqueezed."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    b, text, img, d = 2, 5, 16, 96
    attn = randn((b, text + img, d), BF, 1.0, gen)
    enc_part, img_part = attn.split([text, img], dim=1)
    emb = randn((b, 12 * d), BF, 1.0, gen)
    chunks = emb.chunk(12, dim=1)
    h = randn((b, img, d), BF, 1.0, gen)
    e = randn((b, text, d), BF, 1.0, gen)
    check("residual_gate", (h, img_part, chunks[4].unsqueeze(1)), "image rows of a split")
    check("residual_gate", (e, enc_part, chunks[5].unsqueeze(1)), "text rows of a split")
    ff = randn((b, img, d), BF, 1.0, gen)
    s = check("residual_gate", (h, ff, chunks[10].unsqueeze(1)), "ff gate")
    assert s["launches"] > 0, s  # contiguous update, chunk gate: served
    check("ln_modulate", (h, chunks[3], chunks[2], 1e-6), "modulation chunks")
    # The same gate computed once and expanded over the batch (CFG).
    g1 = randn((1, 1, d), BF, 1.0, gen).expand(b, 1, d)
    bt.reset_stats()
    s = check("residual_gate", (h, ff, g1), "gate expanded over the batch")
    assert s["launches"] > 0, s


def test_qk_from_a_fused_qkv_projection_is_exact():
    gen = torch.Generator(device="cuda").manual_seed(9)
    b, s, heads, dh = 2, 7, 4, 128
    qkv = randn((b, s, 3 * heads * dh), BF, 1.0, gen)
    q, k, _ = (t.unflatten(-1, (heads, dh)) for t in qkv.chunk(3, -1))
    out = check("qk_layernorm", (q, k, 1e-6), "fused qkv chunks")
    assert out["launches"] > 0, out
