"""What the aten-order kernels still refuse, through bitfold.torch: the
result is the eager chain's bits, and the call is counted as a fallback
with its reason (docs/aten-reduce.md section 7, "Not served"). A case that
a later change serves must still be torch.equal; the test then asserts the
launch instead (no silent third outcome).

Also the decode row counts through the ops: served, no fallback.
"""
import pytest

from conftest import HAVE_CUDA, torch
from test_aten_norms import hf_eager, wan_eager
from test_kernels import randn, same_bits

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU torch-op tests skipped",
                allow_module_level=True)

import bitfold.torch as bt  # noqa: E402


@pytest.fixture(autouse=True)
def fresh():
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    yield


def served_or_fell_back(op):
    s = bt.stats().get(op, {"fallbacks": {}, "launches": 0})
    assert s["launches"] > 0 or s["fallbacks"], f"{op}: neither launched nor fell back"
    return s


def hf_call(shape, dt, residual, gen):
    x = randn(shape, dt, 1.0, gen)
    r = randn(shape, dt, 1.0, gen) if residual else None
    w = randn((shape[-1],), dt, 1.0, gen)
    out = bt.hf_rmsnorm(x, w, 1e-6, r)
    expect = hf_eager(x, w, 1e-6, r)
    y = out[0] if residual else out
    ok, detail = same_bits(y, expect[0])
    assert ok, f"hf_rmsnorm {shape} {dt} residual {residual}: {detail}"
    if residual:
        ok, detail = same_bits(out[1], expect[1])
        assert ok, f"hf_rmsnorm sum {shape} {dt}: {detail}"


@pytest.mark.parametrize("d", [3600, 4096, 6144, 8160, 8192])
@pytest.mark.parametrize("rows", [1, 5, 16, 64, 77])
def test_hf_f32_with_residual_launches_exactly(rows, d):
    # f32 rows with a residual: at 16 rows and more, 32 lanes hold D/32
    # elements of two f32 operands, so only two passes (x and the residual
    # read again for the outputs) fit at D ~3600..8160; fewer rows have
    # more lanes per row. Served at every width: a launch, no fallback.
    gen = torch.Generator(device="cuda").manual_seed(rows + d)
    hf_call((1, rows, d), torch.float32, True, gen)
    s = served_or_fell_back("hf_rmsnorm")
    assert s["launches"] > 0 and not s["fallbacks"], s


@pytest.mark.parametrize("d", [130, 1001, 4099])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_hf_width_with_head_and_tail_is_served_exactly(rows, d):
    # D >= 128, not a multiple of 4: each row has its own head and tail,
    # mapped in two passes (docs/aten-reduce.md section 7): a launch.
    gen = torch.Generator(device="cuda").manual_seed(rows * d)
    hf_call((1, rows, d), torch.bfloat16, False, gen)
    s = served_or_fell_back("hf_rmsnorm")
    assert s["launches"] == 1 and not s["fallbacks"], s


@pytest.mark.parametrize("rows", list(range(1, 18)))
def test_hf_decode_rows_are_served(rows):
    gen = torch.Generator(device="cuda").manual_seed(rows)
    hf_call((1, rows, 4096), torch.bfloat16, False, gen)
    s = bt.stats()["hf_rmsnorm"]
    assert s["fallbacks"] == {} and s["launches"] == 1, s


@pytest.mark.parametrize("pixels", [1, 2, 5, 15, 16])
def test_wan_few_pixels_are_served(pixels):
    gen = torch.Generator(device="cuda").manual_seed(pixels)
    c = 96
    x = randn((1, c, 1, 1, pixels), torch.bfloat16, 1.0, gen).contiguous(
        memory_format=torch.channels_last_3d)
    g = randn((c,), torch.bfloat16, 1.0, gen)
    y = bt.wan_rmsnorm_silu(x, g)
    expect = wan_eager(x, g, None, None, "x")
    ok, detail = same_bits(y, expect)
    assert ok, f"wan pixels {pixels}: {detail}"
    s = bt.stats()["wan_rmsnorm_silu"]
    assert s["fallbacks"] == {} and s["launches"] == 1, s


def test_wan_width_with_head_and_tail_is_served_exactly():
    gen = torch.Generator(device="cuda").manual_seed(130)
    c = 130
    x = randn((1, c, 1, 4, 4), torch.bfloat16, 1.0, gen).contiguous(
        memory_format=torch.channels_last_3d)
    g = randn((c,), torch.bfloat16, 1.0, gen)
    y = bt.wan_rmsnorm_silu(x, g)
    ok, detail = same_bits(y, wan_eager(x, g, None, None, "x"))
    assert ok, detail
    s = served_or_fell_back("wan_rmsnorm_silu")
    assert s["launches"] == 1 and not s["fallbacks"], s


def at_offset(shape, dt, off, gen):
    """A (shape) view starting `off` elements into a fresh buffer: the row
    starts' residues mod 4 that aten's vectorized head depends on."""
    n = 1
    for s in shape:
        n *= s
    buf = randn((n + 4,), dt, 1.0, gen)
    return buf[off:off + n].view(shape)


@pytest.mark.parametrize("d", [129, 130, 131, 1001, 4097, 5123])
@pytest.mark.parametrize("off", [0, 1, 2, 3])
def test_hf_head_and_tail_widths_at_every_base_offset_are_exact(d, off):
    # Each row r of the f32 h*h copy starts at r*D: its head is
    # (4 - r*D % 4) % 4 elements whatever x's own offset is.
    gen = torch.Generator(device="cuda").manual_seed(d * 4 + off)
    for rows in (1, 3, 17):
        x = at_offset((1, rows, d), torch.bfloat16, off, gen)
        w = randn((d,), torch.bfloat16, 1.0, gen)
        y = bt.hf_rmsnorm(x, w, 1e-6)
        y = y[0] if isinstance(y, (list, tuple)) else y
        ok, detail = same_bits(y, hf_eager(x, w, 1e-6)[0])
        assert ok, f"hf_rmsnorm D {d} offset {off} rows {rows}: {detail}"
    served_or_fell_back("hf_rmsnorm")


@pytest.mark.parametrize("c", [129, 130, 131, 1001])
@pytest.mark.parametrize("off", [0, 1, 2, 3])
@pytest.mark.parametrize("form", ["x", "f32"])
def test_wan_head_and_tail_channels_at_every_base_offset_are_exact(c, off, form):
    # form x reduces x itself: the head follows x's address (offset).
    from bitfold.torch import _eager
    gen = torch.Generator(device="cuda").manual_seed(c * 8 + off)
    x = at_offset((1, 4, 4, c), torch.bfloat16, off, gen).permute(0, 3, 1, 2)
    g = randn((c,), torch.bfloat16, 1.0, gen)
    y = bt.wan_rmsnorm_silu(x, g, None, None, form)
    ok, detail = same_bits(y, _eager.wan_rmsnorm_silu(x, g, None, None, form))
    assert ok, f"wan C {c} offset {off} form {form}: {detail}"
    served_or_fell_back("wan_rmsnorm_silu")
