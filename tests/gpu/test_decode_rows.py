"""Decode row counts: the aten-order kernels at 1..17 rows and a few large
counts vs the live eager chains, bit for bit.

Below 16 rows aten's generic reduction gives one row more lanes (at D 4096
and one row, 512 threads with shared-memory stages); bitfold builds one
definition per row class (1, 2..3, 4..7, 8..15, 16..). Every row count of
every class is compared here, every legal config at the decode shapes, and
a class boundary crossed in one process (a definition of one class never
serves another). The LayerNorm-based kernels (ln_modulate, qk_layernorm)
take one block of 128 threads per row whatever the row count; their few-row
cases are in test_kernels.py's shapes and here at 1..17 rows.
"""
import pytest

from conftest import torch
from test_aten_norms import (check_hf_every_config, hf_eager, hf_launch, hf_operands,
                             hf_params, wan_eager, wan_launch, wan_operands, wan_params)
from test_kernels import check

ROWS = list(range(1, 18)) + [64, 1000]
WIDTHS = (2048, 3072, 4096, 5120, 8192, 1000, 96)


def hf_decode_cases():
    cases = []
    for d in WIDTHS:
        for r in ROWS:
            cases.append(((1, r, d), "bf16", "bf16", False, False))
    for r in (1, 2, 3, 5, 8, 15, 17):
        for dt, wdt in (("f16", "f16"), ("bf16", "f32"), ("f32", "f32")):
            cases.append(((1, r, 4096), dt, wdt, False, False))
        cases.append(((1, r, 4096), "bf16", "bf16", True, False))
        cases.append(((r, 1, 2048), "bf16", "bf16", False, True))  # per-batch modulate
    return cases


@pytest.mark.parametrize("shape,dt,wdt,residual,modulate", hf_decode_cases())
def test_hf_rmsnorm_at_decode_rows(rt, shape, dt, wdt, residual, modulate):
    gen = torch.Generator(device="cuda").manual_seed(shape[0] * 131 + shape[1])
    x, r, w, sc, sh = hf_operands(shape, dt, wdt, residual, modulate, 1.0, gen, None)
    expect, expect_sum = hf_eager(x, w, 1e-6, r, sc, sh)
    params = hf_params(dt, wdt, residual, modulate)
    y, s = hf_launch(rt.kernel("hf_rmsnorm", params), x, r, w, sc, sh, 1e-6, expect.dtype)
    check("hf_rmsnorm", y, expect, f"decode shape {shape} {params}")
    if residual:
        check("hf_rmsnorm", s, expect_sum, f"decode sum shape {shape} {params}")


@pytest.mark.parametrize("shape", [(1, 1, 4096), (1, 3, 4096), (1, 7, 5120), (1, 9, 8192),
                                   (1, 2, 1000)])
def test_hf_every_config_at_decode_rows(rt, shape):
    check_hf_every_config(rt, shape)


def test_hf_one_kernel_object_serves_every_row_class(rt):
    # One kernel handle, row counts crossing every class boundary in turn:
    # each launch takes its own class's definition.
    params = hf_params("bf16", "bf16", False, False)
    kernel = rt.kernel("hf_rmsnorm", params)
    gen = torch.Generator(device="cuda").manual_seed(11)
    for r in (16, 1, 2, 4, 8, 3, 15, 1, 17, 7, 64):
        x, _, w, _, _ = hf_operands((1, r, 4096), "bf16", "bf16", False, False, 1.0, gen,
                                    None)
        expect, _ = hf_eager(x, w, 1e-6)
        y, _ = hf_launch(kernel, x, None, w, None, None, 1e-6, expect.dtype)
        check("hf_rmsnorm", y, expect, f"class sweep rows {r}")


@pytest.mark.parametrize("pixels", ROWS)
@pytest.mark.parametrize("c,form", [(96, "x"), (192, "f32"), (384, "x"), (1024, "f32")])
def test_wan_rmsnorm_silu_at_few_pixels(rt, pixels, c, form):
    gen = torch.Generator(device="cuda").manual_seed(pixels + c)
    shape = (1, c, 1, 1, pixels)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", True, False, 1.0, gen, None)
    expect = wan_eager(x, g, b, cb, form)
    params = wan_params("bf16", form, "bf16", True, False)
    y = wan_launch(rt.kernel("wan_rmsnorm_silu", params), x, g, b, cb, expect.dtype)
    check("wan_rmsnorm_silu", y, expect, f"pixels {pixels} shape {shape} {params}")


@pytest.mark.parametrize("rows", ROWS)
def test_ln_modulate_at_decode_rows(rt, rows):
    # aten's LayerNorm takes one 128-thread block per row at every row count.
    import references as ref
    from test_kernels import poison, randn
    gen = torch.Generator(device="cuda").manual_seed(rows)
    x = randn((1, rows, 4096), torch.bfloat16, 1.0, gen)
    proj = randn((1, 4 * 4096), torch.bfloat16, 0.1, gen)
    scale, shift = proj[:, 4096:2 * 4096], proj[:, 3 * 4096:]
    y = poison(torch.empty_like(x))
    rt.kernel("ln_modulate").launch([x, scale, shift, y], [1e-6])
    check("ln_modulate", y, ref.ln_modulate(x, scale, shift, 1e-6), f"decode rows {rows}")
