"""Every stock template vs PyTorch eager on the GPU, bit for bit.

Each case draws fresh data (seeded), poisons the outputs (all-ones bits, a
NaN), launches bitfold through its C API and compares with the reference:
identical bits wherever the reference is not NaN, NaN exactly where it is
NaN, and no element left holding the poison.
"""
import os
import random

import pytest

import references as ref
from conftest import record, torch

SEEDS = (0, 1, 2)
AMPLITUDES = (1e-4, 1e-2, 1.0, 1e2, 1e3)


def poison(t):
    """All-ones bits (a NaN) in every element, whatever the strides."""
    t.view(torch.int16 if t.element_size() == 2 else torch.int32).fill_(-1)
    return t


def gate_operand(g, gate, b, d):
    """The gate as the kernel takes it: (B,S,D), (B,D) or (D,)."""
    if gate == "per_batch":
        return g.view(b, d)
    if gate == "global":
        return g.view(d)
    return g


def same_bits(out, expect):
    """(equal, detail) comparing two tensors bit for bit, NaN where NaN."""
    a, b = out.contiguous(), expect.contiguous()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, f"shape/dtype {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    ia = a.view(ints[a.element_size()])
    ib = b.view(ints[b.element_size()])
    diff = (ia != ib) & ~(nan_a & nan_b)
    if not bool(diff.any()):
        return True, ""
    idx = int(diff.flatten().nonzero()[0])
    return False, (f"{int(diff.sum())} of {a.numel()} differ; first flat index {idx}: "
                   f"bitfold {a.flatten()[idx].item()!r} vs torch {b.flatten()[idx].item()!r}")


def randn(shape, dtype, amp, gen, special=None):
    x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * amp
    if special == "signed_zeros":
        mask = torch.rand(shape, generator=gen, device="cuda") < 0.3
        x = torch.where(mask, torch.where(x > 0, 0.0, -0.0), x)
    elif special == "subnormal":
        tiny = torch.finfo(dtype).tiny
        mask = torch.rand(shape, generator=gen, device="cuda") < 0.3
        x = torch.where(mask, x.sign() * tiny * torch.rand(shape, generator=gen, device="cuda"), x)
    elif special == "inf_nan":
        r = torch.rand(shape, generator=gen, device="cuda")
        x = torch.where(r < 0.001, float("inf"), x)
        x = torch.where((r > 0.5) & (r < 0.5005), float("nan"), x)
        x = torch.where((r > 0.9) & (r < 0.9005), float("-inf"), x)
    x = x.to(dtype)
    if special is None and bool((x == 0).all()):
        x = x + 1
    return x


def check(template, out, expect, what):
    ok, detail = same_bits(out, expect)
    record(template, ok, f"{what}: {detail}")
    assert ok, f"{template} {what}: {detail}"


# ---- case lists -------------------------------------------------------------

def ln_cases():
    cases = []
    for shape in [(1, 4096, 4096), (1, 4359, 4096), (2, 1024, 2240), (1, 1, 128)]:
        for seed in SEEDS:
            for eps in (1e-6, 1e-5):
                cases.append((shape, seed, 1.0, eps, None, False))
    rnd = random.Random(1234)
    for i in range(150):
        d = 4 * rnd.randint(1, 2048)
        rows = max(1, min(100000, rnd.randint(1, 4_000_000 // d)))
        b = rnd.choice([1, 1, 2, 3])
        s = max(1, rows // b)
        cases.append(((b, s, d), rnd.choice(SEEDS), rnd.choice(AMPLITUDES),
                      rnd.choice([1e-6, 1e-5]), None, rnd.random() < 0.5))
    for special in ("signed_zeros", "subnormal", "inf_nan"):
        for shape in [(2, 64, 4096), (1, 33, 260), (3, 7, 4)]:
            for seed in SEEDS:
                cases.append((shape, seed, 1.0, 1e-6, special, True))
    return cases


@pytest.mark.parametrize("shape,seed,amp,eps,special,strided", ln_cases())
def test_ln_modulate(rt, shape, seed, amp, eps, special, strided):
    b, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = randn((b, s, d), torch.bfloat16, amp, gen, special)
    if strided:  # scale and shift as chunks of one (B, 4D) projection
        proj = randn((b, 4 * d), torch.bfloat16, 0.1, gen)
        scale, shift = proj[:, d:2 * d], proj[:, 3 * d:]
    else:
        scale = randn((b, d), torch.bfloat16, 0.1, gen)
        shift = randn((b, d), torch.bfloat16, 0.1, gen)
    y = poison(torch.empty_like(x))
    rt.kernel("ln_modulate").launch([x, scale, shift, y], [eps])
    check("ln_modulate", y, ref.ln_modulate(x, scale, shift, eps),
          f"shape {shape} seed {seed} amp {amp} eps {eps} special {special} strided {strided}")


def test_relaunch_reuses_arguments_but_not_data(rt):
    """Relaunching one kernel: new data in the same tensors, another eps, a
    view with other strides, and eps back again must each give their own
    reference's bits (nothing of an earlier launch's arguments is reused)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = randn((2, 64, 512), torch.bfloat16, 1.0, gen)
    proj = randn((2, 4 * 512), torch.bfloat16, 0.1, gen)
    scale, shift = proj[:, 512:1024], proj[:, 1536:]
    y = torch.empty_like(x)
    k = rt.kernel("ln_modulate")
    for step, eps in enumerate((1e-6, 1e-5, 1e-6, 1e-2)):
        if step == 2:
            x.copy_(randn((2, 64, 512), torch.bfloat16, 10.0, gen))
        if step == 3:
            scale = proj[:, :512]  # same dtype and shape, other data
        poison(y)
        k.launch([x, scale, shift, y], [eps])
        check("ln_modulate", y, ref.ln_modulate(x, scale, shift, eps),
              f"relaunch step {step} eps {eps}")


def qk_cases():
    cases = []
    for seed in SEEDS:
        for eps in (1e-6, 1e-5):
            cases.append(((1, 4360, 32, 128), seed, 1.0, eps, None))
    rnd = random.Random(99)
    for i in range(180):
        d = 4 * rnd.randint(1, 32)
        shape = (rnd.randint(1, 2), rnd.randint(1, 600), rnd.choice([1, 8, 32]), d)
        cases.append((shape, rnd.choice(SEEDS), rnd.choice(AMPLITUDES), rnd.choice([1e-6, 1e-5]), None))
    for special in ("signed_zeros", "subnormal", "inf_nan"):
        for seed in SEEDS:
            for d in (128, 64, 4):
                cases.append(((1, 50, 8, d), seed, 1.0, 1e-6, special))
    return cases


@pytest.mark.parametrize("shape,seed,amp,eps,special", qk_cases())
def test_qk_layernorm(rt, shape, seed, amp, eps, special):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = randn(shape, torch.bfloat16, amp, gen, special)
    k = randn(shape, torch.bfloat16, amp, gen, special)
    qo, ko = poison(torch.empty_like(q)), poison(torch.empty_like(k))
    rt.kernel("qk_layernorm").launch([q, qo, k, ko], [eps])
    eq, ek = ref.qk_layernorm(q, k, eps)
    what = f"shape {shape} seed {seed} amp {amp} eps {eps} special {special}"
    check("qk_layernorm", qo, eq, "q " + what)
    check("qk_layernorm", ko, ek, "k " + what)


def conv_cases():
    cases = []
    seeds_shapes = [(1, 96, 4, 480, 832), (1, 192, 4, 240, 416), (1, 384, 2, 120, 208),
                    (1, 384, 1, 60, 104), (4, 96, 480, 832)]
    for shape in seeds_shapes:
        for dtype in ("bf16", "f16", "f32"):
            for residual in (False, True):
                cases.append((shape, dtype, "f32" if dtype != "f32" else "f32", residual, 0, None))
    rnd = random.Random(7)
    for i in range(150):
        c = rnd.choice([2, 3, 5, 8, 96, 128, 192, 384, 1152])
        if rnd.random() < 0.5:
            shape = (rnd.randint(1, 2), c, rnd.randint(1, 4), rnd.randint(1, 40), rnd.randint(1, 40))
        else:
            shape = (rnd.randint(1, 4), c, rnd.randint(1, 60), rnd.randint(1, 60))
        dtype = rnd.choice(["bf16", "f16", "f32"])
        cases.append((shape, dtype, rnd.choice([dtype, "f32"]), rnd.random() < 0.5,
                      rnd.choice(SEEDS), None))
    for shape in [(1, 3, 4, 8, 8), (2, 1152, 9, 7)]:
        for dtype in ("bf16", "f16", "f32"):
            for residual in (False, True):
                for special in (None, "signed_zeros", "subnormal", "inf_nan"):
                    cases.append((shape, dtype, "f32", residual, 1, special))
    return cases


TORCH_DT = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


@pytest.mark.parametrize("shape,dtype,bias_dtype,residual,seed,special", conv_cases())
def test_conv_bias(rt, shape, dtype, bias_dtype, residual, seed, special):
    dt = getattr(torch, TORCH_DT[dtype])
    bdt = getattr(torch, TORCH_DT[bias_dtype])
    gen = torch.Generator(device="cuda").manual_seed(seed)
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    x = randn(shape, dt, 1.0, gen, special).contiguous(memory_format=fmt)
    bias = randn((shape[1],), bdt, 1.0, gen)
    h = randn(shape, dt, 1.0, gen, special).contiguous(memory_format=fmt) if residual else None
    y = poison(torch.empty_like(x))
    params = f"dtype={dtype},bias_dtype={bias_dtype},residual={int(residual)}"
    tensors = [x, bias] + ([h] if residual else []) + [y]
    rt.kernel("conv_bias", params).launch(tensors, [])
    check("conv_bias", y, ref.conv_bias(x, bias, h),
          f"shape {shape} {params} seed {seed} special {special}")
    assert y.stride() == x.stride()


def gate_cases():
    cases = []
    for gate in ("full", "per_batch", "global"):
        for seed in SEEDS:
            cases.append(((1, 4096, 4096), gate, "bf16", seed, None))
    rnd = random.Random(5)
    for i in range(170):
        d = rnd.randint(1, 2048) * rnd.choice([1, 2, 4])
        b = rnd.randint(1, 3)
        s = rnd.randint(1, max(1, 2_000_000 // (d * b)))
        cases.append(((b, s, d), rnd.choice(["full", "per_batch", "global"]),
                      rnd.choice(["bf16", "f16", "f32"]), rnd.choice(SEEDS), None))
    for special in ("signed_zeros", "subnormal", "inf_nan"):
        for gate in ("full", "per_batch", "global"):
            for seed in SEEDS:
                cases.append(((2, 33, 520), gate, "bf16", seed, special))
    return cases


@pytest.mark.parametrize("shape,gate,dtype,seed,special", gate_cases())
def test_residual_gate(rt, shape, gate, dtype, seed, special):
    dt = getattr(torch, TORCH_DT[dtype])
    b, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    r = randn(shape, dt, 1.0, gen, special)
    u = randn(shape, dt, 1.0, gen, special)
    gshape = {"full": (b, s, d), "per_batch": (b, 1, d), "global": (1, 1, d)}[gate]
    g = randn(gshape, dt, 0.1, gen, special)
    y = poison(torch.empty_like(r))
    gate_arg = gate_operand(g, gate, b, d)
    rt.kernel("residual_gate", f"dtype={dtype},gate={gate}").launch([r, u, gate_arg, y], [])
    check("residual_gate", y, ref.residual_gate(r, u, g),
          f"shape {shape} gate {gate} {dtype} seed {seed} special {special}")


def rms_cases():
    cases = []
    for shape in [(1, 4216, 4096), (1, 4096, 4096), (2, 1140, 4096), (1, 128, 2048)]:
        for seed in SEEDS:
            for eps in (1e-6, 1e-5):
                cases.append((shape, seed, 1.0, eps, None))
    rnd = random.Random(11)
    for i in range(170):
        d = rnd.choice([2048, 4096])
        cases.append(((rnd.randint(1, 3), rnd.randint(1, 1500), d), rnd.choice(SEEDS),
                      rnd.choice(AMPLITUDES), rnd.choice([1e-6, 1e-5]), None))
    for special in ("signed_zeros", "subnormal"):
        for seed in SEEDS:
            for d in (2048, 4096):
                cases.append(((1, 40, d), seed, 1.0, 1e-6, special))
    return cases


@pytest.mark.parametrize("shape,seed,amp,eps,special", rms_cases())
def test_rmsnorm_modulate(rt, shape, seed, amp, eps, special):
    b, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = randn(shape, torch.bfloat16, amp, gen, special)
    w = randn((d,), torch.bfloat16, 1.0, gen)
    proj = randn((b, 2 * d), torch.bfloat16, 0.1, gen)
    scale, shift = proj[:, :d], proj[:, d:]
    y = poison(torch.empty_like(x))
    rt.kernel("rmsnorm_modulate").launch([x, w, scale, shift, y], [eps])
    check("rmsnorm_modulate", y, ref.rmsnorm_modulate(x, w, scale, shift, eps),
          f"shape {shape} seed {seed} amp {amp} eps {eps} special {special}")


# ---- programmatic dependent launch ------------------------------------------
# With PDL a launch may start while its predecessor on the stream runs; the
# kernel waits (griddepcontrol.wait) before touching memory. Chains where
# each kernel reads what the one before wrote (RAW) and overwrites what it
# read (WAR), back to back, plain and inside a CUDA graph.

def test_pdl_chains_see_their_predecessors(rt):
    b, s, d = 1, 4096, 4096
    gen = torch.Generator(device="cuda").manual_seed(5)
    bf = torch.bfloat16
    x = randn((b, s, d), bf, 1.0, gen)
    scale, shift = randn((b, d), bf, 0.1, gen), randn((b, d), bf, 0.1, gen)
    u, g = randn((b, s, d), bf, 1.0, gen), randn((b, s, d), bf, 0.1, gen)
    steps = 8
    expect = x.clone()
    for _ in range(steps):
        expect = ref.residual_gate(ref.ln_modulate(expect, scale, shift, 1e-6), u, g)
    ln, rg = rt.kernel("ln_modulate"), rt.kernel("residual_gate")

    def chain(a, tmp):
        for _ in range(steps):
            ln.launch([a, scale, shift, tmp], [1e-6])  # reads a, writes tmp
            rg.launch([tmp, u, g, a])  # reads tmp, overwrites a
    try:
        for k in (ln, rg):
            k.set_pdl(True)
        a, tmp = x.clone(), poison(torch.empty_like(x))
        chain(a, tmp)
        check("pdl", a, expect, "ln -> residual_gate chain, PDL launches")

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        a2, tmp2 = x.clone(), poison(torch.empty_like(x))
        start = a2.clone()
        with torch.cuda.stream(stream):
            chain(a2, tmp2)  # warm: every specialisation exists before capture
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            chain(a2, tmp2)
        for _ in range(2):
            a2.copy_(start)
            graph.replay()
        torch.cuda.synchronize()
        check("pdl", a2, expect, "ln -> residual_gate chain, PDL launches in a CUDA graph")
    finally:
        for k in (ln, rg):
            k.set_pdl(False)


# ---- every legal TileConfig at the seed shapes ------------------------------

def list_configs(template, shape, cli_args):
    """The legal configs of template at shape (the CLI's --list-configs);
    with $BITFOLD_CACHE_DIR set (scripts/gpu-run.sh sets it), every one of
    them is compiled first, in parallel, into that cache (`bitfold prebuild
    --every-config`), so the launches that follow load instead of compiling
    one by one. The launches stay the test: a config prebuild missed is
    compiled at its launch as before."""
    import shutil
    import subprocess
    exe = shutil.which("bitfold")
    if exe is None:
        pytest.skip("bitfold CLI not on PATH (needed to list the config space)")
    dims = ",".join(map(str, shape))
    cmd = [exe, "compile", template, "--shape", dims, "--list-configs"] + cli_args
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    configs = [line.strip() for line in out.splitlines() if line.strip()]
    prebuild_every_config(exe, template, dims, cli_args)
    return configs


def prebuild_every_config(exe, template, dims, cli_args):
    import json
    import subprocess
    import tempfile
    import warnings
    cache = os.environ.get("BITFOLD_CACHE_DIR")
    if not cache:
        return
    params = {}
    if cli_args[:1] == ["--params"]:
        params = dict(kv.split("=", 1) for kv in cli_args[1].split(",") if kv)
    major, minor = torch.cuda.get_device_capability()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump([{"template": template, "shape": dims, "params": params}], f)
        f.flush()
        r = subprocess.run([exe, "prebuild", "--every-config", "--shapes", f.name,
                            "--arch", f"sm_{major}{minor}", "--cache-dir", cache,
                            "--jobs", str(os.cpu_count() or 1)],
                           capture_output=True, text=True)
    if r.returncode != 0:  # the launches compile what is missing
        warnings.warn(f"bitfold prebuild --every-config {template} {dims}: "
                      f"{(r.stderr or r.stdout).strip()[-300:]}")


def seed_config_cases():
    return [
        ("ln_modulate", (1, 4096, 4096), "", []),
        ("ln_modulate", (2, 1024, 2240), "", []),
        ("ln_modulate", (1, 1, 128), "", []),
        ("qk_layernorm", (1, 4360, 32, 128), "", []),
        ("conv_bias", (1, 96, 4, 480, 832), "", []),
        ("conv_bias", (1, 96, 4, 480, 832), "residual=1", ["--params", "residual=1"]),
        ("conv_bias", (1, 3, 4, 8, 8), "", []),
        ("residual_gate", (1, 4096, 4096), "gate=full", []),
        ("residual_gate", (1, 4096, 4096), "gate=per_batch", ["--params", "gate=per_batch"]),
        ("residual_gate", (1, 4096, 4096), "gate=global", ["--params", "gate=global"]),
        ("rmsnorm_modulate", (1, 4096, 4096), "", []),
        ("rmsnorm_modulate", (1, 128, 2048), "", []),
    ]


@pytest.mark.parametrize("template,shape,params,cli_args", seed_config_cases())
def test_every_config_at_seed_shape(rt, template, shape, params, cli_args):
    configs = list_configs(template, shape, cli_args)
    assert len(configs) >= 1
    gen = torch.Generator(device="cuda").manual_seed(42)
    bf = torch.bfloat16
    if template == "ln_modulate":
        b, s, d = shape
        x = randn(shape, bf, 1.0, gen)
        scale, shift = randn((b, d), bf, 0.1, gen), randn((b, d), bf, 0.1, gen)
        inputs, expect = [x, scale, shift], [ref.ln_modulate(x, scale, shift, 1e-6)]
        scalars = [1e-6]
    elif template == "qk_layernorm":
        q, k = randn(shape, bf, 1.0, gen), randn(shape, bf, 1.0, gen)
        inputs, expect, scalars = None, list(ref.qk_layernorm(q, k, 1e-6)), [1e-6]
    elif template == "conv_bias":
        fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
        x = randn(shape, bf, 1.0, gen).contiguous(memory_format=fmt)
        bias = randn((shape[1],), bf, 1.0, gen)
        h = randn(shape, bf, 1.0, gen).contiguous(memory_format=fmt) if "residual" in params else None
        inputs = [x, bias] + ([h] if h is not None else [])
        expect, scalars = [ref.conv_bias(x, bias, h)], []
    elif template == "residual_gate":
        b, s, d = shape
        r, u = randn(shape, bf, 1.0, gen), randn(shape, bf, 1.0, gen)
        gate = params.split("=")[1]
        gshape = {"full": (b, s, d), "per_batch": (b, 1, d), "global": (1, 1, d)}[gate]
        g = randn(gshape, bf, 0.1, gen)
        garg = gate_operand(g, gate, b, d)
        inputs, expect, scalars = [r, u, garg], [ref.residual_gate(r, u, g)], []
    else:
        b, s, d = shape
        x = randn(shape, bf, 1.0, gen)
        w = randn((d,), bf, 1.0, gen)
        scale, shift = randn((b, d), bf, 0.1, gen), randn((b, d), bf, 0.1, gen)
        inputs, expect = [x, w, scale, shift], [ref.rmsnorm_modulate(x, w, scale, shift, 1e-6)]
        scalars = [1e-6]
    kernel = rt.kernel(template, params)
    try:
        for cfg in configs:
            kernel.set_config(cfg)
            outs = [poison(torch.empty_like(e)) for e in expect]
            if template == "qk_layernorm":
                tensors = [q, outs[0], k, outs[1]]
            else:
                tensors = inputs + outs
            kernel.launch(tensors, scalars)
            for o, e in zip(outs, expect):
                check(template, o, e, f"config {cfg} shape {shape} {params}")
    finally:
        kernel.set_config(None)


# ---- exhaustive: bf16/f16 add and mul as the kernels compute them ----------
# codegen writes round(x op y) of two bf16 (f16) values as the narrow IEEE op
# (docs/design-notes.md, "Exact rewrites in codegen"). residual_gate is
# rnd(r + rnd(u * g)): with r = -0 it is rnd(u * g) (-0 + p = p, signs and
# NaN included), with g = 1 it is rnd(r + u). Every pair of 16-bit patterns
# (NaN, Inf, subnormals, signed zeros) against PyTorch's f32 arithmetic.

@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("op", ["mul", "add"])
def test_narrow_arith_every_pair(rt, dtype, op):
    dt = getattr(torch, TORCH_DT[dtype])
    every = torch.arange(-32768, 32768, device="cuda", dtype=torch.int32)
    every = every.to(torch.int16).view(dt)  # all 65536 bit patterns
    rows = 4096
    kernel = rt.kernel("residual_gate", f"dtype={dtype},gate=global")
    y = torch.empty((1, rows, every.numel()), device="cuda", dtype=dt)
    for start in range(0, every.numel(), rows):
        a = every[start:start + rows].view(1, rows, 1).expand(1, rows, every.numel())
        b = every.view(1, 1, -1).expand(1, rows, every.numel())
        if op == "mul":
            r = torch.full_like(y, -0.0)
            u, g = a.contiguous(), every
        else:
            r, u = a.contiguous(), b.contiguous()
            g = torch.ones_like(every)
        poison(y)
        kernel.launch([r, u, g, y], [])
        expect = ref.residual_gate(r, u, g.view(1, 1, -1))
        check("residual_gate", y, expect,
              f"every pair, {op} {dtype}, rows {start}..{start + rows - 1}")
