"""The norms in aten's reduction order vs the live eager chains, bit for bit.

wan_rmsnorm_silu against both eager forms of the Wan VAE RMSNorm + SiLU
(SGLang: F.normalize on x's dtype; diffusers 0.42 WanRMS_norm: on x.float(),
also under bf16 autocast with f32 weights), with the conv bias folded in by
x.add_ first; hf_rmsnorm against HF LlamaRMSNorm's chain, with the residual
add and the adaLN modulate. Every case compares with torch.equal semantics
(same_bits: identical bits, NaN where NaN) after poisoning the outputs.
Shapes the kernels do not reproduce (C >= 128 not a multiple of 4,
misaligned x) must raise, never give other bits; decode row counts (1..17)
are in test_decode_rows.py.
"""
import random

import pytest

from conftest import record, torch
from test_kernels import TORCH_DT, check, list_configs, poison, randn, same_bits

import torch.nn.functional as F

SEEDS = (0, 1, 2)


# ---- eager references ---------------------------------------------------------

def chan_view(t, x):
    """(C,) -> broadcastable over x's channel dim, like the modules' params."""
    return t.view(1, -1, *([1] * (x.dim() - 2)))


def wan_eager(x, gamma, bias, conv_bias, form, autocast=False):
    """x.add_(conv_bias); then SGLang's or diffusers' RMSNorm + SiLU."""
    x = x.clone()
    if conv_bias is not None:
        x.add_(chan_view(conv_bias, x))
    scale = x.shape[1] ** 0.5
    g = chan_view(gamma, x)
    b = chan_view(bias, x) if bias is not None else 0.
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        if form == "x":
            y = F.silu(F.normalize(x, dim=1) * scale * g + b)
        else:
            y = torch.nn.SiLU()(F.normalize(x.float(), dim=1).to(x.dtype) * scale * g + b)
    return y


def hf_eager(x, w, eps, residual=None, scale=None, shift=None):
    """HF LlamaRMSNorm (+ residual add first, + adaLN modulate after)."""
    s = None
    if residual is not None:
        x = x + residual
        s = x
    h = x.float()
    v = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(v + eps)
    y = w * h.to(x.dtype)
    if scale is not None:
        y = y * (1 + scale[:, None]) + shift[:, None]
    return y, s


# ---- wan_rmsnorm_silu ------------------------------------------------------------

def wan_input(shape, dt, amp, gen, special):
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    sp = special if special in ("signed_zeros",) else None
    x = randn(shape, dt, amp, gen, sp).contiguous(memory_format=fmt)
    if special == "zero_rows":  # whole pixels of zeros: norm 0, the clamp
        x[..., ::3, :] = 0
    if special == "neg_zero_rows":
        x[..., ::5, :] = -0.0
    return x


def wan_cases():
    cases = []
    # The seed shapes, both forms, bias and no bias.
    for shape in [(1, 96, 4, 480, 832), (1, 192, 4, 240, 416), (1, 384, 2, 120, 208)]:
        for form in ("x", "f32"):
            for bias in (False, True):
                cases.append((shape, "bf16", form, "bf16", bias, False, 0, 1.0, None, False))
    # C x frames x 4D/5D, both forms.
    for c in (96, 192, 384, 512, 1024):
        hw = (30, 52) if c <= 384 else (12, 20)
        for shape in [(1, c, 4) + hw, (1, c, 1) + hw, (1, c) + hw, (2, c) + hw]:
            for form in ("x", "f32"):
                cases.append((shape, "bf16", form, "bf16", c % 2 == 0, c == 192, 1, 1.0, None,
                              False))
    # gamma f32 under bf16 autocast (the Wan T2V pipeline), diffusers' form.
    for c in (96, 192, 384, 512):
        for bias in (False, True):
            cases.append(((1, c, 2, 20, 24), "bf16", "f32", "f32", bias, False, 2, 1.0, None,
                          True))
    # Edge values.
    for special in ("zero_rows", "neg_zero_rows", "signed_zeros"):
        for c in (96, 192, 384, 1024):
            for form in ("x", "f32"):
                cases.append(((1, c, 2, 9, 16), "bf16", form, "bf16", False, False, 0, 1.0,
                              special, False))
    for amp in (1e-20, 1e-4, 1e3, 1e18):
        for c in (96, 384):
            for dt in ("bf16", "f16", "f32"):
                a = min(amp, 3e3) if dt == "f16" else amp
                cases.append(((1, c, 2, 8, 16), dt, "x", dt, True, False, 1, a, None, False))
    # Random: odd C below 128, any multiple of 4 above, all dtypes and options.
    rnd = random.Random(2026)
    for _ in range(150):
        c = rnd.choice([1, 3, 17, 31, 32, 33, 63, 64, 65, 96, 100, 127, 128, 132, 192, 200,
                        260, 384, 512, 640, 1000, 1024])
        frames = rnd.choice([1, 4])
        h, w = rnd.randint(2, 24), rnd.randint(2, 24)
        shape = (1, c, frames, h, w) if rnd.random() < 0.6 else (rnd.randint(1, 2), c, h, w)
        if shape[0] * frames * h * w < 16:
            shape = (1, c, 4, 4, 4)
        dt = rnd.choice(["bf16", "bf16", "f16", "f32"])
        form = rnd.choice(["x", "f32"])
        gdt = rnd.choice([dt, "f32"])
        cases.append((shape, dt, form, gdt, rnd.random() < 0.5, rnd.random() < 0.3,
                      rnd.choice(SEEDS), rnd.choice([1e-2, 1.0, 30.0]), None, False))
    return cases


def wan_params(dt, form, gdt, bias, conv_bias):
    return f"dtype={dt},form={form},gamma={gdt},bias={int(bias)},conv_bias={int(conv_bias)}"


def wan_operands(shape, dt, gdt, bias, conv_bias, amp, gen, special):
    x = wan_input(shape, getattr(torch, TORCH_DT[dt]), amp, gen, special)
    c = shape[1]
    g = randn((c,), getattr(torch, TORCH_DT[gdt]), 1.0, gen)
    b = randn((c,), getattr(torch, TORCH_DT[gdt]), 0.5, gen) if bias else None
    cb = randn((c,), x.dtype, 0.5, gen) if conv_bias else None
    return x, g, b, cb


def wan_launch(kernel, x, g, b, cb, out_dtype):
    y = poison(torch.empty_like(x, dtype=out_dtype))
    tensors = [x, g] + ([b] if b is not None else []) + ([cb] if cb is not None else []) + [y]
    kernel.launch(tensors, [float(x.shape[1]) ** 0.5])
    return y


@pytest.mark.parametrize("shape,dt,form,gdt,bias,conv_bias,seed,amp,special,autocast",
                         wan_cases())
def test_wan_rmsnorm_silu(rt, shape, dt, form, gdt, bias, conv_bias, seed, amp, special,
                          autocast):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, g, b, cb = wan_operands(shape, dt, gdt, bias, conv_bias, amp, gen, special)
    expect = wan_eager(x, g, b, cb, form, autocast)
    params = wan_params(dt, form, gdt, bias, conv_bias)
    y = wan_launch(rt.kernel("wan_rmsnorm_silu", params), x, g, b, cb, expect.dtype)
    check("wan_rmsnorm_silu", y, expect,
          f"shape {shape} {params} seed {seed} amp {amp} special {special} autocast {autocast}")


def wan_every_config(rt, form, bias, what="", operands=None):
    """Every legal config at [1,96,4,480,832] (bf16) vs the eager chain;
    `operands(shape, gen)` gives (x, gamma, bias, conv_bias) instead of
    wan_operands' normal ones."""
    shape = (1, 96, 4, 480, 832)
    params = wan_params("bf16", form, "bf16", bias, False)
    configs = list_configs("wan_rmsnorm_silu", shape, ["--params", params])
    assert configs
    gen = torch.Generator(device="cuda").manual_seed(42)
    if operands:
        x, g, b, cb = operands(shape, gen)
    else:
        x, g, b, cb = wan_operands(shape, "bf16", "bf16", bias, False, 1.0, gen, None)
    expect = wan_eager(x, g, b, cb, form)
    wan_check_configs(rt, params, configs, (x, g, b, cb), expect, f"shape {shape}", what)


def wan_check_configs(rt, params, configs, operands, expect, where, what="", launch=None):
    """The kernel at each config (None: the default) equals `expect`."""
    x, g, b, cb = operands
    launch = launch or wan_launch
    kernel = rt.kernel("wan_rmsnorm_silu", params)
    try:
        for cfg in configs:
            kernel.set_config(cfg)
            y = launch(kernel, x, g, b, cb, expect.dtype)
            check("wan_rmsnorm_silu", y, expect, f"config {cfg} {where} {params}{what}")
    finally:
        kernel.set_config(None)


@pytest.mark.parametrize("form,bias", [("x", False), ("x", True), ("f32", False)])
def test_wan_every_config_at_seed_shape(rt, form, bias):
    wan_every_config(rt, form, bias)


def expect_refused(kernel, tensors, scalars, words):
    from bitfold import BitfoldError
    with pytest.raises(BitfoldError) as e:
        kernel.launch(tensors, scalars)
    msg = str(e.value)
    for w in words:
        assert w in msg, msg


def test_wan_refuses_what_it_does_not_reproduce(rt):
    gen = torch.Generator(device="cuda").manual_seed(3)
    k = rt.kernel("wan_rmsnorm_silu", wan_params("bf16", "x", "bf16", True, False))
    # C >= 128 not a multiple of 4 (a head and tail per row) is served.
    x, g, b, cb = wan_operands((1, 130, 1, 4, 4), "bf16", "bf16", True, False, 1.0, gen, None)
    check("wan_rmsnorm_silu", wan_launch(k, x, g, b, None, x.dtype),
          wan_eager(x, g, b, None, "x"), "C = 130, a head and tail per row")
    # x not aligned to aten's 4-element vectors (C = 192, form x).
    c, n = 192, 64
    base = torch.empty(n * c + 1, device="cuda", dtype=torch.bfloat16)
    x = base[1:].as_strided((1, c, 8, 8), (n * c, 1, 8 * c, c))
    x.copy_(torch.randn((1, c, 8, 8), device="cuda", generator=gen).to(torch.bfloat16))
    g = randn((c,), torch.bfloat16, 1.0, gen)
    b = randn((c,), torch.bfloat16, 1.0, gen)
    y = torch.empty((1, c, 8, 8), device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    expect_refused(k, [x, g, b, y], [c ** 0.5], ["x"])
    # Not channels-last.
    x = torch.randn((1, 96, 8, 8), device="cuda").to(torch.bfloat16)
    g = randn((96,), torch.bfloat16, 1.0, gen)
    expect_refused(k, [x, g, g, torch.empty_like(x)], [96 ** 0.5], ["x"])
    # dtype mix: a bf16 kernel given f16 gamma.
    x, _, b, _ = wan_operands((1, 96, 1, 8, 8), "bf16", "bf16", True, False, 1.0, gen, None)
    expect_refused(k, [x, g.half(), b, torch.empty_like(x)], [96 ** 0.5], ["gamma"])


# ---- hf_rmsnorm ------------------------------------------------------------------------

def hf_cases():
    cases = []
    for d in (1024, 2048, 3072, 4096, 5120, 8192):
        for rows in ((1, 16), (1, 300), (3, 77), (8, 1024)):
            for residual, modulate in ((False, False), (True, False), (False, True),
                                       (True, True)):
                cases.append(((rows[0], rows[1], d), "bf16", "bf16", residual, modulate,
                              rows[1] % 3, 1.0, None, 1e-6))
    for d in (1024, 4096, 5120):
        for same in (True, False):  # weight in x's dtype, or f32
            for dt in ("bf16", "f16", "f32"):
                w = dt if same else "f32"
                cases.append(((2, 40, d), dt, w, False, False, 1, 1.0, None, 1e-5))
    for special in ("signed_zeros", "subnormal", "inf_nan"):
        for d in (1024, 4096, 8192):
            cases.append(((1, 48, d), "bf16", "bf16", True, False, 2, 1.0, special, 1e-6))
    for amp in (1e-20, 1e-4, 1e3, 1e18):
        cases.append(((1, 32, 4096), "bf16", "bf16", False, False, 0, amp, None, 1e-6))
    rnd = random.Random(4096)
    for _ in range(80):
        d = rnd.choice([rnd.randint(1, 127), 4 * rnd.randint(32, 2048)])
        b = rnd.randint(1, 3)
        s = rnd.randint(16, max(16, 400_000 // d))
        dt = rnd.choice(["bf16", "bf16", "f16", "f32"])
        wdt = dt if dt == "f32" else rnd.choice([dt, "f32"])
        cases.append(((b, s, d), dt, wdt, rnd.random() < 0.4, rnd.random() < 0.4,
                      rnd.choice(SEEDS), rnd.choice([1e-2, 1.0, 30.0]), None,
                      rnd.choice([1e-6, 1e-5])))
    return cases


def hf_params(dt, wdt, residual, modulate):
    return f"dtype={dt},weight={wdt},residual={int(residual)},modulate={int(modulate)}"


def hf_operands(shape, dt, wdt, residual, modulate, amp, gen, special):
    b, s, d = shape
    t = getattr(torch, TORCH_DT[dt])
    x = randn(shape, t, amp, gen, special)
    r = randn(shape, t, amp, gen, special) if residual else None
    w = randn((d,), getattr(torch, TORCH_DT[wdt]), 1.0, gen)
    sc = sh = None
    if modulate:
        proj = randn((b, 2 * d), t, 0.1, gen)
        sc, sh = proj[:, :d], proj[:, d:]
    return x, r, w, sc, sh


def hf_launch(kernel, x, r, w, sc, sh, eps, out_dtype):
    y = poison(torch.empty_like(x, dtype=out_dtype))
    s = poison(torch.empty_like(x)) if r is not None else None
    ins = [x] + ([r] if r is not None else []) + [w] + ([sc, sh] if sc is not None else [])
    outs = ([s] if s is not None else []) + [y]
    kernel.launch(ins + outs, [eps])
    return y, s


@pytest.mark.parametrize("shape,dt,wdt,residual,modulate,seed,amp,special,eps", hf_cases())
def test_hf_rmsnorm(rt, shape, dt, wdt, residual, modulate, seed, amp, special, eps):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, r, w, sc, sh = hf_operands(shape, dt, wdt, residual, modulate, amp, gen, special)
    expect, expect_sum = hf_eager(x, w, eps, r, sc, sh)
    params = hf_params(dt, wdt, residual, modulate)
    y, s = hf_launch(rt.kernel("hf_rmsnorm", params), x, r, w, sc, sh, eps, expect.dtype)
    what = f"shape {shape} {params} seed {seed} amp {amp} special {special} eps {eps}"
    check("hf_rmsnorm", y, expect, what)
    if residual:
        check("hf_rmsnorm", s, expect_sum, "sum " + what)


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (8, 1024, 5120)])
def test_hf_every_config_at_seed_shape(rt, shape):
    check_hf_every_config(rt, shape)


@pytest.mark.parametrize("d", [4096, 8192])
def test_hf_f32_with_a_residual_every_config(rt, d):
    # Two passes (x and the residual read again) at D ~3600..8160: the only
    # configs there; every config gives eager's bits.
    check_hf_every_config(rt, (1, 64, d), "f32", residual=True)


@pytest.mark.parametrize("shape,dt,residual,modulate", [
    ((1, 4096, 4096), "bf16", False, False),
    ((8, 1024, 5120), "bf16", False, False),
    ((4, 4096, 3072), "bf16", True, False),   # x and the residual staged
    ((1, 7, 4096), "bf16", False, True),      # rows past the end of a CTA
    ((3, 77, 3072), "f16", True, True),
    ((1, 32768, 2048), "bf16", False, False),
    ((2, 33, 4000), "bf16", True, False),     # accesses past the row's end
])
def test_hf_shared_row_configs(rt, shape, dt, residual, modulate):
    """Every shared-row config (.s1: the fold's loads of x (and the
    residual) also go to shared memory, the outputs read them back) against
    eager, and the default beside them."""
    check_hf_every_config(rt, shape, dt, residual, modulate,
                          pick=lambda cs: [c for c in cs if c.endswith(".s1")] + [None],
                          seed=11)


def check_hf_every_config(rt, shape, dt="bf16", residual=False, modulate=False,
                          pick=lambda cs: cs, seed=42):
    """The legal configs of hf_rmsnorm at shape that `pick` keeps (None:
    the default) against eager."""
    params = hf_params(dt, dt, residual, modulate)
    configs = pick(list_configs("hf_rmsnorm", shape, ["--params", params]))
    assert [c for c in configs if c], f"no legal config picked at {shape} {params}"
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, r, w, sc, sh = hf_operands(shape, dt, dt, residual, modulate, 1.0, gen, None)
    expect, expect_sum = hf_eager(x, w, 1e-6, r, sc, sh)
    kernel = rt.kernel("hf_rmsnorm", params)
    try:
        for cfg in configs:
            kernel.set_config(cfg)
            y, s = hf_launch(kernel, x, r, w, sc, sh, 1e-6, expect.dtype)
            what = f"config {cfg} shape {shape} {params}"
            check("hf_rmsnorm", y, expect, what)
            if residual:
                check("hf_rmsnorm", s, expect_sum, "sum " + what)
    finally:
        kernel.set_config(None)


def test_hf_weight_dtype_mixes_are_refused(rt):
    # f16 x with a bf16 weight promotes to f32 in eager: not a parameter.
    from bitfold import BitfoldError
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, r, w, sc, sh = hf_operands((1, 32, 1024), "f16", "bf16", False, False, 1.0, gen, None)
    with pytest.raises(BitfoldError) as e:
        k = rt.kernel("hf_rmsnorm", hf_params("f16", "bf16", False, False))
        k.launch([x, w, torch.empty_like(x, dtype=torch.float32)], [1e-6])
    assert "weight" in str(e.value)
