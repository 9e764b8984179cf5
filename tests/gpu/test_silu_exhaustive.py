"""SiLU to bf16 on every input: the fast path (codegen/ExactRewrites.h,
docs/exact-silu.md) against torch.nn.functional.silu, bit for bit.

- every one of the 65536 bf16 bit patterns and of the 65536 f16 ones
  through a user kernel `round(silu(x))` in that type, with
  BITFOLD_FAST_SILU=1 (on sm_90 bf16 without the midpoint test), with
  BITFOLD_FAST_SILU=1 BITFOLD_SM90_SILU=0 (the midpoint test everywhere)
  and with BITFOLD_FAST_SILU=0, compared with F.silu on the same tensor;
- wan_rmsnorm_silu, both forms, at [1,96,4,480,832] and [1,384,2,120,208]
  with the fast path on and off, against the eager chains of
  test_aten_norms.py, plus a case whose gamma and bias spread the SiLU
  inputs over +-100 (the fallback's range, x < -80), and every tile config
  at the seed shape.

On a GPU host: python3 -m pytest tests/gpu/test_silu_exhaustive.py -q
(BITFOLD_LIB set, bitfold CLI on PATH for the config list). Skips where
torch sees no GPU.
"""
import os

import pytest

from conftest import torch
from test_aten_norms import wan_eager, wan_every_config, wan_launch, wan_operands, wan_params
from test_kernels import check

import torch.nn.functional as F

PROGRAM = """bitfold.row_program silu_exhaustive_{dt}_fast{fast} v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16777216
input x : {dt} row_major per_element
body:
  %x = load x : {dt}
  %xf = extend %x : f32
  %s = silu %xf : f32
  %y = round to {dt} %s : {dt}
  output y : {dt} row_major = %y
"""

TORCH = {"bf16": torch.bfloat16, "f16": torch.float16} if torch else {}


def with_fast_silu(value, sm90=None):
    """Sets BITFOLD_FAST_SILU and BITFOLD_SM90_SILU (unset where None; both
    part of the cache key); returns the undo."""
    names = ("BITFOLD_FAST_SILU", "BITFOLD_SM90_SILU")
    old = {n: os.environ.get(n) for n in names}
    for n, v in zip(names, (value, sm90)):
        if v is None:
            os.environ.pop(n, None)
        else:
            os.environ[n] = v

    def undo():
        for n, v in old.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
    return undo


# label: (BITFOLD_FAST_SILU, BITFOLD_SM90_SILU)
MODES = {"1": ("1", None), "1isa": ("1", "0"), "0": ("0", None)}


@pytest.fixture(params=sorted(MODES), ids=lambda m: {"1": "fast", "1isa": "fast-isa-bounds",
                                                        "0": "exact"}[m])
def fast_rt(request, rt):
    """(mode label, a runtime of its own): a fresh runtime per mode, so no
    kernel compiled under another mode is reused in memory."""
    import bitfold.torch
    undo = with_fast_silu(*MODES[request.param])
    r = bitfold.torch.Runtime()
    try:
        yield request.param, r
    finally:
        r.close()
        undo()


def every_bit_pattern(dt):
    bits = torch.arange(-32768, 32768, dtype=torch.int32, device="cuda").to(torch.int16)
    return bits.view(TORCH[dt]).reshape(256, 256).contiguous()


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_silu_of_every_input_is_eager_bits(fast_rt, dt):
    fast_silu, rt = fast_rt
    kernel = rt.kernel_from_source(PROGRAM.format(dt=dt, fast=fast_silu))
    x = every_bit_pattern(dt)
    y = torch.full_like(x, float("nan"))
    kernel.launch([x, y])
    torch.cuda.synchronize()
    check("silu_exhaustive", y, F.silu(x), f"{dt} mode {fast_silu}")


WAN_SHAPES = [(1, 96, 4, 480, 832), (1, 384, 2, 120, 208)]


@pytest.mark.parametrize("shape", WAN_SHAPES)
@pytest.mark.parametrize("form", ["x", "f32"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_wan_seed_shapes_are_eager_bits(fast_rt, shape, form, bias, seed):
    fast_silu, rt = fast_rt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", bias, False, 1.0, gen, None)
    expect = wan_eager(x, g, b, cb, form)
    params = wan_params("bf16", form, "bf16", bias, False)
    y = wan_launch(rt.kernel("wan_rmsnorm_silu", params), x, g, b, cb, expect.dtype)
    check("wan_rmsnorm_silu", y, expect,
          f"shape {shape} form {form} bias {bias} seed {seed} mode {fast_silu}")


@pytest.mark.parametrize("form", ["x", "f32"])
def test_wan_wide_silu_inputs_are_eager_bits(fast_rt, form):
    fast_silu, rt = fast_rt
    # gamma ~ 40 N(0,1), bias ~ 20 N(0,1): SiLU sees |v| up to ~150, so many
    # elements take the fallback (v < -80) and the far tails of the sigmoid.
    shape = (1, 96, 2, 60, 104)
    gen = torch.Generator(device="cuda").manual_seed(7)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", True, False, 1.0, gen, None)
    g = (g.float() * 40).to(torch.bfloat16)
    b = (b.float() * 40).to(torch.bfloat16)
    expect = wan_eager(x, g, b, cb, form)
    params = wan_params("bf16", form, "bf16", True, False)
    y = wan_launch(rt.kernel("wan_rmsnorm_silu", params), x, g, b, cb, expect.dtype)
    check("wan_rmsnorm_silu", y, expect, f"wide inputs form {form} mode {fast_silu}")


@pytest.mark.parametrize("form", ["x", "f32"])
def test_wan_every_config_with_the_fast_path(rt, form):
    import bitfold.torch
    undo = with_fast_silu("1")
    r = bitfold.torch.Runtime()
    try:
        wan_every_config(r, form, True, " FAST_SILU=1")
    finally:
        r.close()
        undo()
