"""qk_layernorm on strided q/k views of a fused QKV projection, read in
place (two-level rows: heads D apart, tokens 3*H*D apart), against the
live eager chain (F.layer_norm on the same views), bit for bit.

Patterns: a slice viewed as (B, S, H, D), unflatten, chunk, unbind of a
(B, S, 3, H, D) tensor, narrow, tokens flattened (B*S, H, D); bf16, f16,
f32; edge values; every legal config through the Runtime API. Each case
also asserts that nothing was copied (the op's own copy rule) and nothing
fell back (stats()), so a pass means the kernel read the views in place.
Views the binding refuses (a third row stride; q and k with different
strides) are copied first and still launched.
"""
import pytest

from conftest import HAVE_CUDA, record, torch

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU torch-op tests skipped",
                allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

from test_kernels import list_configs, poison, randn, same_bits  # noqa: E402

import bitfold.torch as bt  # noqa: E402
from bitfold.torch import _table  # noqa: E402
# fresh: stats reset, auto mode, verify off, for every test of this file.
from test_torch_ops import both, fresh  # noqa: E402,F401

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
SHAPES = [(1, 4096, 32, 128), (2, 77, 24, 128), (1, 33, 8, 64), (3, 5, 2, 4), (2, 1, 4, 128)]
PATTERNS = ["slice_view", "unflatten", "chunk", "unbind", "narrow", "flat_tokens"]


def views(qkv, pattern, h, d):
    """q, k of a fused (B, S, 3*H*D) projection, as a model takes them."""
    b, s = qkv.shape[0], qkv.shape[1]
    if pattern == "slice_view":
        return qkv[..., :h * d].view(b, s, h, d), qkv[..., h * d:2 * h * d].view(b, s, h, d)
    if pattern == "unflatten":
        return (qkv[..., :h * d].unflatten(-1, (h, d)),
                qkv[..., h * d:2 * h * d].unflatten(-1, (h, d)))
    if pattern == "chunk":
        q, k, _ = (t.unflatten(-1, (h, d)) for t in qkv.chunk(3, -1))
        return q, k
    if pattern == "unbind":
        q, k, _ = qkv.view(b, s, 3, h, d).unbind(2)
        return q, k
    if pattern == "narrow":
        return (qkv.narrow(-1, 0, h * d).view(b, s, h, d),
                qkv.narrow(-1, h * d, h * d).view(b, s, h, d))
    flat = qkv.view(b * s, 3 * h * d)  # tokens flattened: (B*S, H, D)
    return flat[:, :h * d].view(b * s, h, d), flat[:, h * d:2 * h * d].view(b * s, h, d)


def check(out, expect, what):
    ok, detail = same_bits(out, expect)
    record("qk_strided", ok, f"{what}: {detail}")
    assert ok, f"qk_layernorm {what}: {detail}"


def served_in_place(q, k, launches_at_least=1):
    assert _table._qk_copies((q, k, 1e-6)) == (False, False), \
        f"views copied: q strides {q.stride()}, k strides {k.stride()}"
    s = bt.stats().get("qk_layernorm", {"fallbacks": {}, "launches": 0})
    assert s["fallbacks"] == {}, f"qk_layernorm fell back: {s['fallbacks']}"
    assert s["launches"] >= launches_at_least, s


def run_case(shape, dtype, pattern, special, seed, eps=1e-6):
    b, s, h, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qkv = randn((b, s, 3 * h * d), dtype, 1.0, gen, special)
    q, k = views(qkv, pattern, h, d)
    assert not q.is_contiguous() or b * s == 1
    eq, ek = F.layer_norm(q, (d,), eps=eps), F.layer_norm(k, (d,), eps=eps)
    what = f"shape {shape} {dtype} {pattern} special {special} seed {seed}"
    for fn in both("qk_layernorm"):
        qo, ko = fn(q, k, eps)
        assert qo.is_contiguous() and ko.is_contiguous(), what
        check(qo, eq, "q " + what)
        check(ko, ek, "k " + what)
    served_in_place(q, k)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("pattern", PATTERNS)
def test_fused_qkv_views_in_place(shape, dtype, pattern):
    run_case(shape, DTYPES[dtype], pattern, None, seed=sum(shape))


@pytest.mark.parametrize("special", ["signed_zeros", "subnormal", "inf_nan"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("seed", [0, 1])
def test_edge_values_in_place(special, dtype, seed):
    for shape in [(1, 4096, 32, 128), (2, 77, 24, 128), (1, 33, 8, 4)]:
        run_case(shape, DTYPES[dtype], "unflatten", special, seed, eps=1e-5)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_config_on_fused_views(rt, dtype):
    """Every legal config of the contiguous class (the strided class takes
    the same space), pinned, on the in-place views through the Runtime."""
    shape = (1, 4096, 32, 128)
    b, s, h, d = shape
    configs = list_configs("qk_layernorm", shape, ["--params", f"dtype={dtype}"])
    gen = torch.Generator(device="cuda").manual_seed(7)
    qkv = randn((b, s, 3 * h * d), DTYPES[dtype], 1.0, gen)
    q, k = views(qkv, "unflatten", h, d)
    eq, ek = F.layer_norm(q, (d,), eps=1e-6), F.layer_norm(k, (d,), eps=1e-6)
    kernel = rt.kernel("qk_layernorm", f"dtype={dtype}")
    try:
        for cfg in configs:
            kernel.set_config(cfg)
            qo, ko = poison(torch.empty_like(eq)), poison(torch.empty_like(ek))
            kernel.launch([q, qo, k, ko], [1e-6])
            check(qo, eq, f"q config {cfg} {dtype}")
            check(ko, ek, f"k config {cfg} {dtype}")
    finally:
        kernel.set_config(None)


def test_contiguous_and_strided_calls_interleave():
    """The two specialisations never share a kernel: alternate them, and
    B, S, with the same eps."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    h, d = 8, 128
    for b, s in [(1, 16), (2, 9), (1, 16), (3, 1)]:
        qkv = randn((b, s, 3 * h * d), torch.bfloat16, 1.0, gen)
        q, k = views(qkv, "unbind", h, d)
        qc, kc = q.contiguous(), k.contiguous()
        for x, y in [(q, k), (qc, kc), (q, k)]:
            qo, ko = bt.qk_layernorm(x, y, 1e-6)
            check(qo, F.layer_norm(x, (d,), eps=1e-6), f"q ({b}, {s}) strided {x is q}")
            check(ko, F.layer_norm(y, (d,), eps=1e-6), f"k ({b}, {s}) strided {x is q}")
    served_in_place(q, k, 12)


def test_three_row_strides_and_unshared_strides_are_copied_and_launched():
    gen = torch.Generator(device="cuda").manual_seed(5)
    b, s, h, d = 2, 6, 4, 64
    # Heads 2D apart, tokens (H+1)*2D apart, batches with one padding token:
    # three strides, copied to contiguous first.
    wide = randn((b, s + 1, h + 1, 2 * d), torch.bfloat16, 1.0, gen)
    q3 = wide[:, :s, :h, :d]
    k = randn((b, s, h, d), torch.bfloat16, 1.0, gen)
    assert _table._row_levels(q3) is None
    assert _table._qk_copies((q3, k, 1e-6)) == (True, False)
    # q from one fused projection, k from another of a different width:
    # two levels each, not shared: both copied.
    qkv = randn((b, s, 3 * h * d), torch.bfloat16, 1.0, gen)
    kv = randn((b, s, 2 * h * d), torch.bfloat16, 1.0, gen)
    qf, kf = qkv[..., :h * d].unflatten(-1, (h, d)), kv[..., :h * d].unflatten(-1, (h, d))
    assert _table._row_levels(qf) == (h, 3 * h * d)
    assert _table._qk_copies((qf, kf, 1e-6)) == (True, True)
    for x, y in [(q3, k), (qf, kf)]:
        for fn in both("qk_layernorm"):
            qo, ko = fn(x, y, 1e-6)
            check(qo, F.layer_norm(x, (d,), eps=1e-6), "q copied")
            check(ko, F.layer_norm(y, (d,), eps=1e-6), "k copied")
    s = bt.stats()["qk_layernorm"]
    assert s["fallbacks"] == {} and s["launches"] >= 2, s
