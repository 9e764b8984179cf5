"""The Wan norm's exact fallbacks, taken by some accesses and not others,
vs the eager chains, bit for bit (codegen/ExactRewrites.h; docs/
exact-division.md and docs/exact-silu.md).

x gets sparse elements outside the row division's fast range (zeros, -0,
magnitudes below 2^-60) and gamma/bias spread SiLU's inputs below -80, so
within one warp some accesses take the fallback region and others do not,
and inside a fallback some elements need the exact chain and others keep
the fast value. Each case runs with the fallbacks as loops, the rounded
division and the row bound (the defaults) and with all three off
(BITFOLD_FALLBACK_LOOPS=0, BITFOLD_ROUNDED_DIVISION=0, BITFOLD_ROW_BOUND=0),
each on a runtime of its own; bf16 and f16, both forms, and every tile
config at one shape.

On a GPU host: python3 -m pytest tests/gpu/test_wan_fallbacks.py -q
(BITFOLD_LIB set, bitfold CLI on PATH for the config list). Skips where
torch sees no GPU.
"""
import os

import pytest

from conftest import torch
from test_aten_norms import (wan_eager, wan_every_config, wan_launch, wan_operands,
                             wan_params)
from test_kernels import check

VARS = ("BITFOLD_FALLBACK_LOOPS", "BITFOLD_ROUNDED_DIVISION", "BITFOLD_ROW_BOUND")
MODES = {"on": dict.fromkeys(VARS, "1"), "off": dict.fromkeys(VARS, "0")}


@pytest.fixture(params=sorted(MODES))
def mode_rt(request, rt):
    """(mode, a runtime of its own): the variables are part of the cache
    key, and a fresh runtime reuses no kernel compiled under the other."""
    import bitfold.torch
    old = {k: os.environ.get(k) for k in MODES[request.param]}
    os.environ.update(MODES[request.param])
    r = bitfold.torch.Runtime()
    try:
        yield request.param, r
    finally:
        r.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def sparse_specials(x, gen, rate):
    """About `rate` of x's elements replaced by 0, -0 or +-1e-25 (below
    2^-60): each such element sends its access to the division's fallback."""
    r = torch.rand(x.shape, generator=gen, device="cuda")
    v = x.float()
    v = torch.where(r < rate / 4, 0.0, v)
    v = torch.where((r >= rate / 4) & (r < rate / 2), -0.0, v)
    v = torch.where((r >= rate / 2) & (r < rate), torch.sign(v) * 1e-25, v)
    return v.to(x.dtype).contiguous(memory_format=torch.channels_last_3d)


def operands(shape, dt, form, gen, rate, spread):
    x, g, b, cb = wan_operands(shape, dt, dt, True, False, 1.0, gen, None)
    x = sparse_specials(x, gen, rate)
    g = (g.float() * spread).to(g.dtype)
    b = (b.float() * spread).to(b.dtype)
    return x, g, b, cb


@pytest.mark.parametrize("shape", [(1, 96, 2, 60, 104), (1, 384, 1, 30, 52)])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("form", ["x", "f32"])
@pytest.mark.parametrize("rate,spread", [(1e-3, 1.0), (2e-2, 1.0), (1e-3, 40.0)])
def test_sparse_fallbacks_are_eager_bits(mode_rt, shape, dt, form, rate, spread):
    mode, rt = mode_rt
    gen = torch.Generator(device="cuda").manual_seed(int(rate * 1e4) + int(spread))
    x, g, b, cb = operands(shape, dt, form, gen, rate, spread)
    expect = wan_eager(x, g, b, cb, form)
    params = wan_params(dt, form, dt, True, False)
    y = wan_launch(rt.kernel("wan_rmsnorm_silu", params), x, g, b, cb, expect.dtype)
    check("wan_rmsnorm_silu", y, expect,
          f"sparse fallbacks shape {shape} {params} rate {rate} spread {spread} mode {mode}")


@pytest.mark.parametrize("form", ["x", "f32"])
def test_every_config_with_sparse_fallbacks(mode_rt, form):
    mode, rt = mode_rt
    wan_every_config(rt, form, True, f" sparse fallbacks mode {mode}",
                     lambda shape, gen: operands(shape, "bf16", form, gen, 1e-3, 8.0))
