"""Channels-first (contiguous NC[D]HW) kernels vs the live eager chains, bit
for bit: wan_rmsnorm_silu (both eager forms, bias and conv bias, gamma f32
under autocast) whose norm folds along the strided C axis in aten's
outer-reduction order (docs/aten-reduce.md section 9), and the conv-bias
epilogue. Several C (odd ones too), frames and spatial sizes (S % 4 == 0, 2,
odd: the three output_vec_size cases), edge values, every legal config at
the seed shape; the wide rows the Wan VAE has (C = 192, 384, odd C up to
1000) that run rolled (a loop over C, config t1.v1.p2); layouts the kernels
refuse raise instead of giving other bits; configs with 2 or 4 adjacent
pixels per thread (suffix .o2/.o4, one vector access per channel) at
several images, partial last CTAs and odd C; bitfold.torch serves NCDHW
without a fallback at every C, and the frames-major layout (a contiguous
(N, T, C, H, W) seen as (N, C, T, H, W)) as its N*T images; a channels-
last x (and y) with a residual that is dense images (residual_layout=
channels_first: the Wan VAE's shortcut under channels_last_3d convs);
images below 32 * output_vec_size pixels, whose order is their pixel
class's.
"""
import random

import pytest

from conftest import torch
import test_aten_norms as aten
from test_aten_norms import expect_refused, wan_check_configs, wan_eager
from test_kernels import TORCH_DT, check, list_configs, poison, randn
import references as ref

SEEDS = (0, 1, 2)


def outvec(shape):
    s = 1
    for d in shape[2:]:
        s *= d
    return 4 if s % 4 == 0 else 2 if s % 2 == 0 else 1


def wan_params(dt, form, gdt, bias, conv_bias, shape):
    return (f"dtype={dt},form={form},gamma={gdt},bias={int(bias)},conv_bias={int(conv_bias)},"
            f"layout=channels_first,outvec={outvec(shape)}")


def wan_operands(shape, dt, gdt, bias, conv_bias, amp, gen, special):
    """test_aten_norms' operands (and edge values), x as contiguous NC[D]HW."""
    x, g, b, cb = aten.wan_operands(shape, dt, gdt, bias, conv_bias, amp, gen, special)
    return x.contiguous(), g, b, cb


def wan_launch(kernel, x, g, b, cb, out_dtype):
    y = aten.wan_launch(kernel, x, g, b, cb, out_dtype)
    assert y.is_contiguous()
    return y


def wan_cases():
    cases = []
    for shape in [(1, 96, 4, 480, 832), (1, 96, 1, 480, 832)]:
        for form in ("x", "f32"):
            for bias in (False, True):
                for conv in (False, True):
                    cases.append((shape, "bf16", form, "bf16", bias, conv, 0, 1.0, None, False))
    # C (odd too) x frames x spatial (S % 4 == 0, S % 4 == 2, odd S), 4-D and 5-D.
    for c in (2, 3, 12, 33, 64, 96, 97, 127, 128):
        for sp in [(4, 30, 52), (1, 60, 104), (1, 15, 13), (2, 5, 7), (30, 52), (9, 14)]:
            for form in ("x", "f32"):
                cases.append(((1, c) + sp, "bf16", form, "bf16", c % 2 == 0, c % 3 == 0,
                              1, 1.0, None, False))
        cases.append(((2, c, 3, 8, 8), "bf16", "x", "bf16", True, False, 2, 1.0, None, False))
    # Wide rows (rolled): the Wan VAE's widths, odd C, both forms, with and
    # without the conv bias, frames and spatial sizes of every ovs.
    for c in (160, 192, 200, 256, 333, 384, 512, 1000):
        for sp in [(3, 32, 32), (1, 15, 13), (2, 5, 7), (30, 52), (3, 64, 64)]:
            for form in ("x", "f32"):
                cases.append(((1, c) + sp, "bf16", form, "bf16", c % 2 == 0, True,
                              1, 1.0, None, False))
            # Under autocast F.normalize runs in f32 (autocast's fp32 list),
            # so only diffusers' f32 form is the pipeline's chain there.
            cases.append(((1, c) + sp, "bf16", "f32", "f32", True, False, 2, 1.0, None, True))
        cases.append(((2, c, 3, 8, 8), "f32", "x", "f32", True, True, 0, 1.0, None, False))
        cases.append(((1, c, 2, 8, 16), "f16", "x", "f16", False, True, 0, 30.0, None, False))
    # gamma f32 under bf16 autocast (the Wan pipeline), diffusers' form.
    for c in (12, 96, 128):
        for bias in (False, True):
            cases.append(((1, c, 2, 20, 24), "bf16", "f32", "f32", bias, False, 2, 1.0, None,
                          True))
    # Edge values.
    for special in ("zero_rows", "neg_zero_rows", "signed_zeros"):
        for c in (12, 96):
            for form in ("x", "f32"):
                cases.append(((1, c, 2, 9, 16), "bf16", form, "bf16", False, False, 0, 1.0,
                              special, False))
    for amp in (1e-20, 1e-4, 1e3, 1e18):
        for c in (12, 96, 128):
            for dt in ("bf16", "f16", "f32"):
                a = min(amp, 3e3) if dt == "f16" else amp
                cases.append(((1, c, 2, 8, 16), dt, "x", dt, True, False, 1, a, None, False))
    rnd = random.Random(96)
    for _ in range(60):
        c = rnd.choice([2, 5, 12, 31, 33, 64, 65, 96, 100, 127, 128])
        shape = (rnd.randint(1, 2), c, rnd.choice([1, 4]), rnd.randint(2, 24), rnd.randint(2, 24))
        if shape[0] * shape[2] * shape[3] * shape[4] < 128 * 4:
            shape = (1, c, 4, 12, 12)
        dt = rnd.choice(["bf16", "bf16", "f16", "f32"])
        cases.append((shape, dt, rnd.choice(["x", "f32"]), rnd.choice([dt, "f32"]),
                      rnd.random() < 0.5, rnd.random() < 0.3, rnd.choice(SEEDS),
                      rnd.choice([1e-2, 1.0, 30.0]), None, False))
    return cases


@pytest.mark.parametrize("shape,dt,form,gdt,bias,conv_bias,seed,amp,special,autocast",
                         wan_cases())
def test_wan_rmsnorm_silu_channels_first(rt, shape, dt, form, gdt, bias, conv_bias, seed, amp,
                                         special, autocast):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, g, b, cb = wan_operands(shape, dt, gdt, bias, conv_bias, amp, gen, special)
    expect = wan_eager(x, g, b, cb, form, autocast)
    params = wan_params(dt, form, gdt, bias, conv_bias, shape)
    y = wan_launch(rt.kernel("wan_rmsnorm_silu", params), x, g, b, cb, expect.dtype)
    check("wan_rmsnorm_silu", y, expect,
          f"NCDHW shape {shape} {params} seed {seed} amp {amp} special {special} "
          f"autocast {autocast}")


@pytest.mark.parametrize("shape,form,bias,conv", [
    ((1, 96, 4, 480, 832), "x", False, False), ((1, 96, 4, 480, 832), "x", True, False),
    ((1, 96, 4, 480, 832), "f32", False, False), ((1, 96, 4, 480, 832), "f32", True, False),
    ((1, 96, 4, 480, 832), "x", True, True),
    # Odd S (ovs 1): one lane of four accumulators, split over 2 or 4
    # threads by the t2 / t4 configs (FoldPlan::split).
    ((1, 96, 3, 13, 17), "x", True, False),
    # Rolled only (no unrolled config holds the row), the Wan VAE's widths.
    ((1, 192, 3, 64, 64), "x", True, True), ((1, 384, 3, 32, 32), "f32", False, True),
    ((1, 333, 2, 15, 13), "x", True, False), ((1, 512, 1, 30, 52), "f32", True, True)])
def test_wan_channels_first_every_config_gives_the_same_bits(rt, shape, form, bias, conv):
    params = wan_params("bf16", form, "bf16", bias, conv, shape)
    configs = list_configs("wan_rmsnorm_silu", shape, ["--params", params])
    assert len(configs) >= 2
    gen = torch.Generator(device="cuda").manual_seed(42)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", bias, conv, 1.0, gen, None)
    expect = wan_eager(x, g, b, cb, form)
    wan_check_configs(rt, params, configs, (x, g, b, cb), expect, f"NCDHW {shape}",
                      launch=wan_launch)


@pytest.mark.parametrize("shape,form,conv,named", [
    ((2, 96, 3, 6, 10), "x", False, []),     # two images, a partial last CTA
    ((2, 96, 3, 6, 10), "f32", True, []),
    # Odd C: the CLI's dense shape class assumes C-strided rows (2-byte
    # aligned), the launch sees S-strided images (8-byte): name the configs.
    ((1, 97, 2, 10, 14), "x", True, ["r128.t4.v1.p1.o4", "r64.t4.v1.p1.o2"]),
    ((1, 31, 2, 8, 10), "f32", False, ["r128.t1.v1.p1.o2"]),  # >= 32 * ovs pixels
    ((1, 12, 4, 6, 10), "f32", False, []),   # one thread a pixel
    ((1, 64, 3, 8, 12), "x", True, []),
    ((1, 192, 2, 8, 10), "f32", False, []),
    ((1, 384, 1, 12, 20), "x", False, [])])
def test_wan_channels_first_pixels_per_thread_give_the_same_bits(rt, shape, form, conv, named):
    # .oN: a thread holds N adjacent pixels (aten's output_vec_size), each
    # channel one N-element access; every pixel's DAG is the one-pixel one.
    # .oN.w1: the same with a pixel's lanes on adjacent threads of a warp.
    params = wan_params("bf16", form, "bf16", True, conv, shape)
    configs = list_configs("wan_rmsnorm_silu", shape, ["--params", params])
    vec = [c for c in configs if c.endswith((".o2", ".o4", ".o2.w1", ".o4.w1"))] + named
    assert vec, configs
    gen = torch.Generator(device="cuda").manual_seed(11)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", True, conv, 1.0, gen, None)
    expect = wan_eager(x, g, b, cb, form)
    wan_check_configs(rt, params, vec + [None], (x, g, b, cb), expect, f"NCDHW {shape}",
                      launch=wan_launch)


def pixel_configs(shape, params):
    """The legal .o2 / .o4 configs (lanes across warps or in one, .w1) of
    the Wan norm at `shape` (some)."""
    configs = list_configs("wan_rmsnorm_silu", shape, ["--params", params])
    vec = [c for c in configs if c.endswith((".o2", ".o4", ".o2.w1", ".o4.w1"))]
    assert vec, configs
    return vec


@pytest.mark.parametrize("form,conv", [("x", False), ("f32", True)])
def test_wan_channels_first_operands_of_other_s_give_the_same_bits(rt, form, conv):
    # x and y with one S take the kernel that divides the pixel index once
    # (shape class ".s1"); a frames-major x with a contiguous y (or the
    # reverse) has two S and takes the kernel that reads each operand's own,
    # at every .oN config and the default: eager's bits in every case.
    n, c, t, h, w = 1, 96, 3, 8, 12
    shape = (n, c, t, h, w)
    params = wan_params("bf16", form, "bf16", True, conv, shape)
    vec = pixel_configs(shape, params)
    gen = torch.Generator(device="cuda").manual_seed(23)
    _, g, b, cb = wan_operands(shape, "bf16", "bf16", True, conv, 1.0, gen, None)
    frames = randn((n, t, c, h, w), torch.bfloat16, 1.0, gen).transpose(1, 2)
    contiguous = frames.contiguous()
    expect = wan_eager(contiguous, g, b, cb, form)

    def into(y_like):
        def launch(kernel, x, g, b, cb, out_dtype):
            y = poison(torch.empty_like(y_like, dtype=out_dtype))
            tensors = [x, g] + ([b] if b is not None else []) + ([cb] if cb is not None else [])
            kernel.launch(tensors + [y], [float(c) ** 0.5])
            return y
        return launch

    for x, y_like, what in ((contiguous, contiguous, "one S"),
                            (frames, contiguous, "x frames-major, y contiguous"),
                            (contiguous, frames, "x contiguous, y frames-major"),
                            (frames, frames, "both frames-major")):
        wan_check_configs(rt, params, vec + [None], (x, g, b, cb), expect,
                          f"NCDHW {shape} {what}", launch=into(y_like))


@pytest.mark.parametrize("scale", [3e17, 1e-30, 0.0])  # norm > 2^60, x < 2^-60, zero
@pytest.mark.parametrize("form,conv", [("x", False), ("f32", True)])
def test_wan_channels_first_pixels_per_thread_with_unlike_neighbours(rt, scale, form, conv):
    # .oN output groups interleave a thread's pixels, each element with its
    # own pixel's row division: every odd pixel scaled out of the division's
    # fast range (or zeroed) sends a group holding both kinds to the exact
    # fallback, where each element must still divide by its own pixel's norm.
    shape = (1, 96, 2, 8, 16)
    params = wan_params("bf16", form, "bf16", True, conv, shape)
    vec = pixel_configs(shape, params)
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", True, conv, 1.0, gen, None)
    x[..., 1::2] *= scale
    expect = wan_eager(x, g, b, cb, form)
    wan_check_configs(rt, params, vec + [None], (x, g, b, cb), expect,
                      f"NCDHW {shape} odd pixels x {scale}", launch=wan_launch)


def conv_cases():
    cases = []
    for c in (3, 7, 33, 96, 192, 384):
        for sp in [(4, 30, 52), (1, 15, 13), (9, 14)]:
            for residual in (False, True):
                cases.append(((1, c) + sp, "bf16", "bf16" if c % 2 else "f32", residual, 1, None))
    cases.append(((1, 96, 4, 480, 832), "bf16", "bf16", False, 0, None))
    cases.append(((1, 96, 4, 480, 832), "bf16", "f32", True, 0, None))
    for dtype in ("bf16", "f16", "f32"):
        for special in (None, "signed_zeros", "subnormal", "inf_nan"):
            cases.append(((2, 12, 3, 8, 8), dtype, "f32", True, 2, special))
    return cases


@pytest.mark.parametrize("shape,dtype,bias_dtype,residual,seed,special", conv_cases())
def test_conv_bias_channels_first(rt, shape, dtype, bias_dtype, residual, seed, special):
    dt = getattr(torch, TORCH_DT[dtype])
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = randn(shape, dt, 1.0, gen, special)
    bias = randn((shape[1],), getattr(torch, TORCH_DT[bias_dtype]), 1.0, gen)
    h = randn(shape, dt, 1.0, gen, special) if residual else None
    y = poison(torch.empty_like(x))
    params = (f"dtype={dtype},bias_dtype={bias_dtype},residual={int(residual)},"
              "layout=channels_first")
    rt.kernel("conv_bias", params).launch([x, bias] + ([h] if residual else []) + [y], [])
    check("conv_bias", y, ref.conv_bias(x, bias, h),
          f"NCDHW shape {shape} {params} seed {seed} special {special}")


@pytest.mark.parametrize("shape", [(1, 96, 4, 60, 104), (1, 384, 3, 32, 32),
                                   (2, 1500, 1, 15, 13)])
def test_conv_bias_channels_first_every_config_gives_the_same_bits(rt, shape):
    params = "dtype=bf16,bias_dtype=f32,residual=0,layout=channels_first"
    configs = list_configs("conv_bias", shape, ["--params", params])
    assert any(c.endswith("p2") for c in configs), configs  # rolled: any C
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = randn(shape, torch.bfloat16, 1.0, gen)
    bias = randn((shape[1],), torch.float32, 1.0, gen)
    expect = ref.conv_bias(x, bias, None)
    kernel = rt.kernel("conv_bias", params)
    try:
        for cfg in configs:
            kernel.set_config(cfg)
            y = poison(torch.empty_like(x))
            kernel.launch([x, bias, y], [])
            check("conv_bias", y, expect, f"config {cfg} NCDHW {shape}")
    finally:
        kernel.set_config(None)


@pytest.mark.parametrize("c,conv", [(1021, False), (1024, True)])
def test_wan_channels_first_rows_split_across_ctas_are_refused_not_wrong(rt, c, conv):
    # At ovs 4 and at most 270336 pixels aten splits each pixel's C over
    # CTAs (docs/aten-reduce.md section 9): outside the order's row range,
    # the binding refuses; bitfold.torch then runs the eager chain.
    shape = (1, c, 2, 16, 16)
    gen = torch.Generator(device="cuda").manual_seed(c)
    x, g, b, cb = wan_operands(shape, "bf16", "bf16", True, conv, 1.0, gen, None)
    k = rt.kernel("wan_rmsnorm_silu", wan_params("bf16", "x", "bf16", True, conv, shape))
    ts = [x, g, b] + ([cb] if conv else []) + [torch.empty_like(x)]
    expect_refused(k, ts, [c ** 0.5], ["rows"])


def outer_lanes(c, pixels, ovs):
    """aten's block.y lanes per pixel for a reduction over dim 1 of
    `pixels` pixels (docs/aten-reduce.md section 9)."""
    def last_pow2(n):
        return 1 << (n.bit_length() - 1)
    mnt, dim0 = 512 // ovs, pixels // ovs
    d0 = last_pow2(dim0) if dim0 < mnt else mnt
    d1 = last_pow2(c) if c < mnt else mnt
    bw = min(d0, 32)
    bh = min(d1, mnt // bw)
    return bh if (c >= bh * 16 or c >= 256) else 1


def small_image_cases():
    # Every class below 32 * ovs pixels at each ovs (1, 2, 4), one lane
    # (C < 256) and block.y splits of 8..256 lanes (C >= 256); N > 1 too.
    cases = []
    for c in (12, 33, 96, 97, 192, 256, 384, 512):
        for sp in [(1, 1, 2), (1, 1, 3), (1, 2, 2), (1, 2, 3), (1, 2, 4), (1, 3, 3),
                   (1, 4, 4), (3, 2, 2), (1, 4, 6), (1, 5, 5), (2, 4, 4), (1, 6, 8),
                   (1, 7, 9), (2, 5, 10)]:
            for n in (1, 2):
                s = sp[0] * sp[1] * sp[2]
                if n * s < 32 * outvec((1, c) + sp):
                    cases.append((n, c) + sp)
    return cases


@pytest.mark.parametrize("shape", small_image_cases())
def test_wan_channels_first_small_images(rt, shape):
    # Below 32 * output_vec_size pixels aten's block shape depends on the
    # pixel count's class (lastPow2(pixels / ovs), docs/aten-reduce.md
    # section 9): a kernel per class, equal to eager in both forms. Up to
    # 64 lanes a pixel every class is served; orders of 128 lanes and more
    # are served where a CTA plan holds them, else refused before a compile
    # ("no tile config"), never run in another order.
    from bitfold import BitfoldError
    n, c = shape[0], shape[1]
    pixels = n * shape[2] * shape[3] * shape[4]
    lanes = outer_lanes(c, pixels, outvec(shape))
    for form in ("x", "f32"):
        gen = torch.Generator(device="cuda").manual_seed(c + pixels)
        x, g, b, cb = wan_operands(shape, "bf16", "bf16", True, c % 2 == 0, 1.0, gen, None)
        k = rt.kernel("wan_rmsnorm_silu", wan_params("bf16", form, "bf16", True, c % 2 == 0,
                                                     shape))
        try:
            y = wan_launch(k, x, g, b, cb, x.dtype)
        except BitfoldError as e:
            assert lanes >= 128 and "no tile config" in str(e), (shape, lanes, str(e))
            continue
        check("wan_rmsnorm_silu", y, wan_eager(x, g, b, cb, form),
              f"small image {shape} ({lanes} lanes) {form}")


@pytest.mark.parametrize("shape", [(1, 96, 1, 4, 8), (2, 384, 1, 2, 3), (1, 1024, 1, 1, 2)])
def test_wan_channels_first_small_images_through_bitfold_torch(rt, shape):
    # bitfold.torch serves the small images (a launch, no fallback) where a
    # plan holds the order's lanes, and answers with the eager chain
    # (counted, same bits) where none does: C = 1024 at 2 pixels, 256 lanes.
    import bitfold.torch as bt
    gen = torch.Generator(device="cuda").manual_seed(shape[1] + shape[-1])
    x, g, b, _ = wan_operands(shape, "bf16", "bf16", True, False, 1.0, gen, None)
    c = shape[1]
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    for _ in range(2):
        y = bt.wan_rmsnorm_silu(x, g.view(c, 1, 1, 1), b, None, "x")
        check("wan_rmsnorm_silu", y, wan_eager(x, g, b, None, "x"), f"small image {shape}")
    s = bt.stats()["wan_rmsnorm_silu"]
    pixels = shape[0] * shape[2] * shape[3] * shape[4]
    if outer_lanes(c, pixels, outvec(shape)) >= 256:
        assert sum(s["fallbacks"].values()) == 2 and s["launches"] == 0, s
    else:
        assert sum(s["fallbacks"].values()) == 0 and s["launches"] == 2, s


def test_channels_first_refuses_other_layouts(rt):
    gen = torch.Generator(device="cuda").manual_seed(3)
    shape = (1, 96, 2, 8, 16)
    k = rt.kernel("wan_rmsnorm_silu", wan_params("bf16", "x", "bf16", True, False, shape))
    x, g, b, _ = wan_operands(shape, "bf16", "bf16", True, False, 1.0, gen, None)
    y = torch.empty_like(x)
    # Channels-last, permuted, sliced, expanded: not dense NC[D]HW.
    for bad in (x.contiguous(memory_format=torch.channels_last_3d), x.transpose(3, 4),
                torch.cat([x, x], 4)[..., :16], x[:, :, :1].expand(-1, -1, 2, -1, -1)):
        expect_refused(k, [bad, g, b, y], [96 ** 0.5], ["x"])
    # A misaligned x: aten's output_vec_size would shrink.
    base = torch.empty(x.numel() + 1, device="cuda", dtype=x.dtype)
    xm = base[1:].view(shape)
    xm.copy_(x)
    expect_refused(k, [xm, g, b, y], [96 ** 0.5], ["x"])
    # S % 4 == 2 with the kernel built for output_vec_size 4.
    x2, g2, b2, _ = wan_operands((1, 96, 2, 5, 15), "bf16", "bf16", True, False, 1.0, gen, None)
    expect_refused(k, [x2, g2, b2, torch.empty_like(x2)], [96 ** 0.5], ["outvec=2"])
    # y over x.
    expect_refused(k, [x, g, b, x], [96 ** 0.5], ["overlaps"])


def test_torch_ops_serve_ncdhw_without_fallback(rt):  # rt: skips without a GPU
    import bitfold.torch as bt
    bt.reset_stats()
    bt.configure(mode="auto", verify="once")
    gen = torch.Generator(device="cuda").manual_seed(7)
    for form in ("x", "f32"):
        for c, conv in ((96, False), (64, True), (96, True), (192, True), (384, False),
                        (384, True), (333, False)):
            x, g, b, cb = wan_operands((1, c, 3, 32, 32), "bf16", "bf16", True, conv, 1.0, gen,
                                       None)
            y = bt.wan_rmsnorm_silu(x, g.view(c, 1, 1, 1), b, cb, form)
            check("wan_rmsnorm_silu", y, wan_eager(x, g, b, cb, form),
                  f"bitfold.torch {form} C {c} conv bias {conv}")
    for c in (96, 192, 384, 1500):
        x = randn((1, c, 3, 32, 32), torch.bfloat16, 1.0, gen)
        bias = randn((c,), torch.bfloat16, 1.0, gen)
        check("conv_bias", bt.conv_bias(x, bias), ref.conv_bias(x, bias),
              f"bitfold.torch NCDHW C {c}")
    s = bt.stats()
    for op in ("wan_rmsnorm_silu", "conv_bias"):
        assert s[op]["fallbacks"] == {}, s[op]
        assert s[op]["launches"] >= 1, s[op]


@pytest.mark.parametrize("form", ["x", "f32"])
def test_torch_ops_serve_frames_major_x_without_fallback(rt, form):  # rt: skips without a GPU
    # The Wan VAE's frame reshapes: x (N, C, T, H, W) stored as a contiguous
    # (N, T, C, H, W). aten folds C over the N*T images; bitfold.torch runs
    # the channels-first kernel on that view (every ovs, odd and wide C,
    # the conv bias), with eager's bits and eager's output strides.
    import bitfold.torch as bt
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    gen = torch.Generator(device="cuda").manual_seed(11)
    for n, c, t, h, w, conv in ((1, 96, 4, 64, 64, False), (1, 192, 2, 32, 32, True),
                                (2, 96, 3, 15, 14, True), (1, 33, 2, 5, 7, False),
                                (1, 384, 4, 16, 16, True)):
        x = randn((n, t, c, h, w), torch.bfloat16, 1.0, gen).transpose(1, 2)
        g, b = randn((c,), torch.bfloat16, 1.0, gen), randn((c,), torch.bfloat16, 1.0, gen)
        cb = randn((c,), torch.bfloat16, 1.0, gen) if conv else None
        y = bt.wan_rmsnorm_silu(x, g.view(c, 1, 1, 1), b, cb, form)
        want = wan_eager(x, g, b, cb, form)
        check("wan_rmsnorm_silu", y, want, f"frames-major {form} {(n, c, t, h, w)} conv {conv}")
        assert y.stride() == want.stride(), (y.stride(), want.stride())
    s = bt.stats()["wan_rmsnorm_silu"]
    assert s["fallbacks"] == {}, s
    assert s["launches"] == 5, s


def test_conv_bias_residual_in_another_image_layout_runs_without_fallback(rt):
    # The Wan VAE's residual blocks: a conv's output (contiguous NCDHW) plus
    # a frames-major residual, and the reverse; each operand binds with its
    # own pixels per image.
    import bitfold.torch as bt
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    gen = torch.Generator(device="cuda").manual_seed(12)
    for n, c, t, h, w in ((1, 192, 4, 64, 64), (1, 96, 3, 15, 14), (2, 384, 2, 8, 8)):
        contiguous = randn((n, c, t, h, w), torch.bfloat16, 1.0, gen)
        frames = randn((n, t, c, h, w), torch.bfloat16, 1.0, gen).transpose(1, 2)
        bias = randn((c,), torch.bfloat16, 1.0, gen)
        for x, res in ((contiguous, frames), (frames, contiguous), (frames, frames)):
            y = bt.conv_bias(x, bias, res)
            want = ref.conv_bias(x, bias, res)
            check("conv_bias", y, want, f"{(n, c, t, h, w)} x {x.stride()} res {res.stride()}")
    s = bt.stats()["conv_bias"]
    assert s["fallbacks"] == {}, s
    assert s["launches"] == 9, s


def channels_last(t):
    fmt = torch.channels_last_3d if t.dim() == 5 else torch.channels_last
    return t.contiguous(memory_format=fmt)


MIXED_SHAPES = [(1, 192, 1, 64, 64), (1, 96, 3, 15, 14), (2, 33, 2, 8, 8), (1, 7, 4, 6, 10),
                (2, 130, 9, 14)]


@pytest.mark.parametrize("shape", MIXED_SHAPES)
@pytest.mark.parametrize("dtype,bias_dtype,special", [
    ("bf16", "f32", None), ("bf16", "bf16", "signed_zeros"), ("f16", "f32", "subnormal"),
    ("f32", "f32", "inf_nan"), ("bf16", "bf16", "inf_nan")])
def test_conv_bias_channels_last_x_with_an_images_residual(rt, shape, dtype, bias_dtype, special):
    # Every legal config of the kernel against the eager chain, the residual
    # contiguous and (5-D) frames-major.
    dt = getattr(torch, TORCH_DT[dtype])
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = channels_last(randn(shape, dt, 1.0, gen, special))
    bias = randn((shape[1],), getattr(torch, TORCH_DT[bias_dtype]), 1.0, gen)
    residuals = [randn(shape, dt, 1.0, gen, special)]
    if len(shape) == 5:
        n, c, t, h, w = shape
        residuals.append(randn((n, t, c, h, w), dt, 1.0, gen, special).transpose(1, 2))
    params = (f"dtype={dtype},bias_dtype={bias_dtype},residual=1,"
              "residual_layout=channels_first")
    configs = list_configs("conv_bias", shape, ["--params", params])
    assert configs, shape
    kernel = rt.kernel("conv_bias", params)
    try:
        for res in residuals:
            expect = ref.conv_bias(x, bias, res)
            for cfg in configs:
                kernel.set_config(cfg)
                y = poison(torch.empty_like(x))
                kernel.launch([x, bias, res, y], [])
                check("conv_bias", y, expect,
                      f"config {cfg} x channels-last {shape} res {res.stride()} {special}")
    finally:
        kernel.set_config(None)


def test_torch_op_serves_a_channels_last_x_with_an_images_residual(rt):  # rt: skips without GPU
    import bitfold.torch as bt
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    gen = torch.Generator(device="cuda").manual_seed(21)
    launches = 0
    for shape in MIXED_SHAPES:
        x = channels_last(randn(shape, torch.bfloat16, 1.0, gen))
        bias = randn((shape[1],), torch.bfloat16, 1.0, gen)
        res = randn(shape, torch.bfloat16, 1.0, gen)
        y = bt.conv_bias(x, bias, res)
        want = ref.conv_bias(x, bias, res)
        check("conv_bias", y, want, f"channels-last x {shape}, contiguous residual")
        assert y.stride() == want.stride(), (y.stride(), want.stride())
        launches += 1
    s = bt.stats()["conv_bias"]
    assert s["fallbacks"] == {}, s
    assert s["launches"] == launches, s
