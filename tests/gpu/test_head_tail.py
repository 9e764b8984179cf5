"""Rows of C >= 128 that are not whole vectors: aten's vectorized reduction
gives each row a head and a tail (docs/aten-reduce.md sections 3 and 7),
which codegen maps (two passes). Every case equals the live eager chain by
torch.equal: every legal config at one shape, the default config (through
bitfold.torch, which must launch, not fall back) at the others.
"""
import pytest

from conftest import HAVE_CUDA, torch
from test_aten_norms import (check_hf_every_config, hf_eager, wan_check_configs,
                             wan_eager, wan_operands, wan_params)
from test_kernels import list_configs, randn, same_bits

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU head/tail tests skipped",
                allow_module_level=True)

import bitfold.torch as bt  # noqa: E402
from test_aten_refusals import (fresh, hf_call,  # noqa: E402,F401 (fresh: autouse)
                                served_or_fell_back)

WIDTHS = [129, 130, 131, 1001, 4099]
ROWS = list(range(1, 18)) + [64, 1000]


def launched_once(op):
    s = bt.stats()[op]
    assert s["fallbacks"] == {} and s["launches"] == 1, s


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("residual", [False, True])
def test_hf_every_config_with_head_and_tail(rt, d, dt, residual):
    check_hf_every_config(rt, (1, 64, d), dt, residual=residual)


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("residual", [False, True])
def test_hf_default_config_with_head_and_tail(d, rows, dt, residual):
    gen = torch.Generator(device="cuda").manual_seed(rows * 8192 + d)
    hf_call((1, rows, d), dt, residual, gen)
    launched_once("hf_rmsnorm")


WAN_WIDTHS = [c for c in WIDTHS if c <= 1024]  # the template's C <= 1024


@pytest.mark.parametrize("c", WAN_WIDTHS)
@pytest.mark.parametrize("form", ["x", "f32"])
def test_wan_every_config_with_head_and_tail(rt, c, form):
    shape = (1, c, 2, 8, 8)  # 128 pixels of C channels, channels-last
    params = wan_params("bf16", form, "bf16", False, False)
    configs = list_configs("wan_rmsnorm_silu", shape, ["--params", params])
    assert configs, f"no legal config at {shape}"
    gen = torch.Generator(device="cuda").manual_seed(c)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", False, False, 1.0, gen, None)
    expect = wan_eager(x, g, b, cb, form)
    wan_check_configs(rt, params, configs, (x, g, b, cb), expect, f"shape {shape}")


@pytest.mark.parametrize("c", WAN_WIDTHS)
@pytest.mark.parametrize("pixels", ROWS)
@pytest.mark.parametrize("form", ["x", "f32"])
def test_wan_default_config_with_head_and_tail(c, pixels, form):
    gen = torch.Generator(device="cuda").manual_seed(c * 4096 + pixels)
    x = randn((1, c, 1, 1, pixels), torch.bfloat16, 1.0, gen).contiguous(
        memory_format=torch.channels_last_3d)
    g = randn((c,), torch.bfloat16, 1.0, gen)
    y = bt.wan_rmsnorm_silu(x, g, None, None, form)
    ok, detail = same_bits(y, wan_eager(x, g, None, None, form))
    assert ok, f"wan C {c} pixels {pixels} form {form}: {detail}"
    launched_once("wan_rmsnorm_silu")


@pytest.mark.parametrize("d", [130, 1001])
def test_hf_permuted_rows_with_head_and_tail_stay_exact(d):
    # A (B, S, D) view of an (S, B, D) tensor: rows in two levels, whose
    # fresh f32 copy aten reduces in memory order; codegen maps the head
    # from the row index only, so these fall back (eager bits).
    gen = torch.Generator(device="cuda").manual_seed(d)
    x = randn((5, 3, d), torch.bfloat16, 1.0, gen).transpose(0, 1)
    w = randn((d,), torch.bfloat16, 1.0, gen)
    ok, detail = same_bits(bt.hf_rmsnorm(x, w, 1e-6), hf_eager(x, w, 1e-6)[0])
    assert ok, f"hf_rmsnorm permuted D {d}: {detail}"
    served_or_fell_back("hf_rmsnorm")
