"""bitfold.torch on the GPU: the oracle through the torch ops (direct and
torch.ops.bitfold), guards and fallback, strict mode, verify="once",
torch.compile(fullgraph=True) of a module using every op, CUDA graph
capture (warm and cold shapes) and replay, two threads on two streams.

Kernel cases also assert that no fallback happened, so a pass means the
bitfold kernel produced the bits, not the eager chain.
"""
import threading
import warnings

import pytest

import references as ref
from conftest import HAVE_CUDA, record, torch

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU torch-op tests skipped",
                allow_module_level=True)

from test_kernels import randn, same_bits  # noqa: E402

import bitfold.torch as bt  # noqa: E402

BF = torch.bfloat16
SEEDS = (0, 1, 2)


@pytest.fixture(autouse=True)
def fresh():
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    yield


def check(op, out, expect, what):
    ok, detail = same_bits(out, expect)
    record("torch." + op, ok, f"{what}: {detail}")
    assert ok, f"{op} {what}: {detail}"


def no_fallback(op):
    s = bt.stats().get(op, {"fallbacks": {}, "launches": 0})
    assert s["fallbacks"] == {}, f"{op} fell back: {s['fallbacks']}"
    assert s["launches"] > 0, f"{op} never launched"


def both(op):
    """The direct op and the registered custom op."""
    return [getattr(bt, op), getattr(torch.ops.bitfold, op)]


# ---- oracle through the ops ---------------------------------------------------

LN_SHAPES = [(1, 4096, 4096), (2, 1024, 2240), (1, 1, 128), (3, 77, 260), (2, 33, 4)]


@pytest.mark.parametrize("shape", LN_SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("special", [None, "signed_zeros", "subnormal", "inf_nan"])
def test_ln_modulate(shape, seed, special):
    b, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = randn(shape, BF, 1.0, gen, special)
    proj = randn((b, 12 * d), BF, 0.1, gen)  # GLM's adaLN projection, chunked
    scale, shift = proj[:, 2 * d:3 * d], proj[:, 0:d]
    expect = ref.ln_modulate(x, scale, shift, 1e-5)
    for fn in both("ln_modulate"):
        check("ln_modulate", fn(x, scale, shift, 1e-5), expect,
              f"{fn} shape {shape} seed {seed} special {special}")
    buf = torch.full_like(x, float("nan"))
    assert bt.ln_modulate(x, scale, shift, 1e-5, out=buf) is buf
    check("ln_modulate", buf, expect, f"out= shape {shape} seed {seed} special {special}")
    no_fallback("ln_modulate")


@pytest.mark.parametrize("shape", [(1, 4360, 32, 128), (2, 50, 8, 64), (1, 7, 1, 4)])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fused", [False, True])
def test_qk_layernorm(shape, seed, fused):
    b, s, h, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if fused:  # q, k as views of one fused QKV projection (B, S, 3*H*D)
        qkv = randn((b, s, 3 * h * d), BF, 1.0, gen)
        q = qkv[..., :h * d].unflatten(-1, (h, d))
        k = qkv[..., h * d:2 * h * d].unflatten(-1, (h, d))
    else:
        q, k = randn(shape, BF, 1.0, gen), randn(shape, BF, 1.0, gen)
    eq, ek = ref.qk_layernorm(q, k, 1e-5)
    for fn in both("qk_layernorm"):
        qo, ko = fn(q, k, 1e-5)
        check("qk_layernorm", qo, eq, f"q shape {shape} seed {seed} fused {fused}")
        check("qk_layernorm", ko, ek, f"k shape {shape} seed {seed} fused {fused}")
    no_fallback("qk_layernorm")


CONV = [(1, 96, 4, 60, 104), (2, 384, 30, 52), (1, 3, 4, 8, 8), (2, 1152, 9, 7)]


@pytest.mark.parametrize("shape", CONV)
@pytest.mark.parametrize("dtype,bias_dtype", [(BF, BF), (BF, torch.float32),
                                              (torch.float16, torch.float16),
                                              (torch.float32, torch.float32)])
@pytest.mark.parametrize("residual", [False, True])
def test_conv_bias(shape, dtype, bias_dtype, residual):
    gen = torch.Generator(device="cuda").manual_seed(1)
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    x = randn(shape, dtype, 1.0, gen).contiguous(memory_format=fmt)
    bias = randn((shape[1],), bias_dtype, 1.0, gen)
    h = randn(shape, dtype, 1.0, gen).contiguous(memory_format=fmt) if residual else None
    expect = ref.conv_bias(x, bias, h)
    for fn in both("conv_bias"):
        y = fn(x, bias, h)
        check("conv_bias", y, expect, f"{fn} shape {shape} {dtype}/{bias_dtype} res {residual}")
        assert y.stride() == expect.stride()
    no_fallback("conv_bias")


@pytest.mark.parametrize("gshape", ["full", "per_batch", "global", "global_1d"])
@pytest.mark.parametrize("dtype", [BF, torch.float16, torch.float32])
@pytest.mark.parametrize("seed", SEEDS)
def test_residual_gate(gshape, dtype, seed):
    b, s, d = 2, 333, 1040
    gen = torch.Generator(device="cuda").manual_seed(seed)
    r, u = randn((b, s, d), dtype, 1.0, gen), randn((b, s, d), dtype, 1.0, gen)
    if gshape == "per_batch":  # GLM: gate_mlp.unsqueeze(1), a chunk of the adaLN projection
        g = randn((b, 12 * d), dtype, 0.1, gen)[:, 4 * d:5 * d].unsqueeze(1)
    else:
        g = randn({"full": (b, s, d), "global": (1, 1, d), "global_1d": (d,)}[gshape],
                  dtype, 0.1, gen)
    expect = ref.residual_gate(r, u, g)
    for fn in both("residual_gate"):
        check("residual_gate", fn(r, u, g), expect, f"gate {gshape} {dtype} seed {seed}")
    no_fallback("residual_gate")


@pytest.mark.parametrize("shape", [(1, 4216, 4096), (2, 140, 4096), (1, 128, 2048)])
@pytest.mark.parametrize("seed", SEEDS)
def test_rmsnorm_modulate_against_flashinfer_order(shape, seed):
    b, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, w = randn(shape, BF, 1.0, gen), randn((d,), BF, 1.0, gen)
    proj = randn((b, 2 * d), BF, 0.1, gen)
    scale, shift = proj[:, :d], proj[:, d:]
    expect = ref.rmsnorm_modulate(x, w, scale, shift, 1e-6)
    for fn in both("rmsnorm_modulate"):
        check("rmsnorm_modulate", fn(x, w, scale, shift, 1e-6), expect,
              f"shape {shape} seed {seed}")
    no_fallback("rmsnorm_modulate")


# ---- the aten-order norms (templates registered by the aten-codegen work) --------

def _template_missing(name, params):
    """Why the test cannot run (the library lacks the template or these
    parameters), or None."""
    import bitfold
    try:
        bitfold.default_runtime().kernel(name, params)
        return None
    except bitfold.BitfoldError as e:
        return f"{name} ({params}) is not in this library: {e.message}"


def needs_template(name, params):
    why = _template_missing(name, params)
    return pytest.mark.skipif(why is not None, reason=why or "")


WAN = [(1, 96, 4, 60, 104), (1, 192, 2, 30, 52), (1, 384, 30, 52), (2, 96, 1, 4, 4)]


@needs_template("wan_rmsnorm_silu", "dtype=bf16,form=f32,gamma=bf16,bias=0,conv_bias=0")
@pytest.mark.parametrize("shape", WAN)
@pytest.mark.parametrize("form", ["x", "f32"])
@pytest.mark.parametrize("gamma_dtype", [BF, torch.float32])
@pytest.mark.parametrize("bias,conv", [(False, False), (True, False), (True, True)])
def test_wan_rmsnorm_silu(shape, form, gamma_dtype, bias, conv):
    gen = torch.Generator(device="cuda").manual_seed(5)
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    c = shape[1]
    x = randn(shape, BF, 1.0, gen).contiguous(memory_format=fmt)
    gamma = randn((c,) + (1,) * (len(shape) - 2), gamma_dtype, 1.0, gen)  # WanRMS_norm's shape
    b = randn((c,), gamma_dtype, 0.1, gen) if bias else None
    cb = randn((c,), BF, 0.1, gen) if conv else None
    expect = bt._eager.wan_rmsnorm_silu(x, gamma, b, cb, form)
    what = f"shape {shape} form {form} gamma {gamma_dtype} bias {bias} conv_bias {conv}"
    for fn in both("wan_rmsnorm_silu"):
        y = fn(x, gamma, b, cb, form)
        check("wan_rmsnorm_silu", y, expect, f"{fn} {what}")
        assert y.stride() == expect.stride(), what
    no_fallback("wan_rmsnorm_silu")


HF = [(1, 4096, 4096), (2, 77, 1024), (1, 16, 2048), (3, 5, 130)]


@needs_template("hf_rmsnorm", "dtype=bf16,weight=bf16,residual=0,modulate=0")
@pytest.mark.parametrize("shape", HF)
@pytest.mark.parametrize("dtype,weight_dtype", [(BF, BF), (BF, torch.float32),
                                                (torch.float16, torch.float16),
                                                (torch.float32, torch.float32)])
@pytest.mark.parametrize("residual,modulate", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_hf_rmsnorm(shape, dtype, weight_dtype, residual, modulate):
    b, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(6)
    x, w = randn(shape, dtype, 1.0, gen), randn((d,), weight_dtype, 1.0, gen)
    r = randn(shape, dtype, 1.0, gen) if residual else None
    proj = randn((b, 2 * d), dtype, 0.1, gen)
    sc, sh = (proj[:, :d], proj[:, d:]) if modulate else (None, None)
    expect = bt._eager.hf_rmsnorm(x, w, 1e-6, r, sc, sh)
    expect = expect if residual else (expect,)
    what = f"shape {shape} {dtype}/{weight_dtype} residual {residual} modulate {modulate}"
    out = bt.hf_rmsnorm(x, w, 1e-6, r, sc, sh)
    for o, e in zip(out if residual else (out,), expect):
        check("hf_rmsnorm", o, e, f"direct {what}")
    for o, e in zip(torch.ops.bitfold.hf_rmsnorm(x, w, 1e-6, r, sc, sh), expect):
        check("hf_rmsnorm", o, e, f"custom op {what}")
    # D = 130: aten gives each row a head and tail, mapped in two passes.
    no_fallback("hf_rmsnorm")



@needs_template("hf_rmsnorm", "dtype=bf16,weight=bf16,residual=0,modulate=0")
@needs_template("wan_rmsnorm_silu", "dtype=bf16,form=f32,gamma=bf16,bias=0,conv_bias=0")
def test_compile_fullgraph_and_verify_once_of_the_norm_ops():
    gen = torch.Generator(device="cuda").manual_seed(7)
    x, w = randn((2, 64, 1024), BF, 1.0, gen), randn((1024,), BF, 1.0, gen)
    c = randn((1, 96, 2, 16, 16), BF, 1.0, gen).contiguous(memory_format=torch.channels_last_3d)
    g = randn((96, 1, 1, 1), BF, 1.0, gen)

    def f(x, w, c, g):
        y = torch.ops.bitfold.hf_rmsnorm(x, w, 1e-6)[0]
        return y * 2, torch.ops.bitfold.wan_rmsnorm_silu(c, g, None, None, "f32")
    torch._dynamo.reset()
    y, z = torch.compile(f, fullgraph=True)(x, w, c, g)
    check("compile", y, bt._eager.hf_rmsnorm(x, w, 1e-6) * 2, "hf_rmsnorm compiled")
    check("compile", z, bt._eager.wan_rmsnorm_silu(c, g, None, None, "f32"), "wan compiled")
    bt.hf_rmsnorm(x, w, 1e-6, verify="once")
    bt.wan_rmsnorm_silu(c, g, None, None, "f32", verify="once")
    for op in ("hf_rmsnorm", "wan_rmsnorm_silu"):
        s = bt.stats()[op]
        assert s["verified"] == 1 and s["mismatches"] == 0, (op, s)


# ---- the prepared fast path ------------------------------------------------------------

def test_warm_calls_launch_each_calls_tensors():
    """Warm calls at one layout reuse a prepared launcher: each must use its
    own tensors' addresses, also where one lands in another alignment class
    (a different specialisation, chosen by the C API per launch)."""
    gen = torch.Generator(device="cuda").manual_seed(8)
    buf = torch.empty(2 * 64 * 512 + 8, dtype=BF, device="cuda")
    for i in range(4):
        x = randn((2, 64, 512), BF, 1.0, gen)
        if i == 3:  # 8 bytes off: same shapes and strides, another alignment class
            x = buf[4:4 + x.numel()].view(2, 64, 512).copy_(x)
        proj = randn((2, 3 * 512), BF, 0.1, gen)
        sc, sh = proj[:, :512], proj[:, 1024:]
        check("ln_modulate", bt.ln_modulate(x, sc, sh, 1e-6), ref.ln_modulate(x, sc, sh, 1e-6),
              f"warm call {i}")
    s = bt.stats()["ln_modulate"]
    assert s["launches"] + sum(s["fallbacks"].values()) == 4, s


def test_generated_site_keys_equal_the_generic_key():
    """An op whose site key is one generated expression (Op.key, inlined into
    the direct function and the torch.ops body) keys a call exactly as
    _key(ins, tag) does: with and without out=, on views, on CPU tensors."""
    from bitfold.torch import _ops, _table
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = randn((2, 16, 256), BF, 1.0, gen)
    proj = randn((2, 3 * 256), BF, 0.1, gen)
    sc, sh = proj[:, :256], proj[:, 512:]
    cases = {
        "ln_modulate": [(x, sc, sh, 1e-6), (x.cpu(), sc.cpu(), sh.cpu(), 1e-5)],
        "qk_layernorm": [(x.view(2, 16, 2, 128), x.view(2, 16, 2, 128)[:, :, :1], 1e-6)],
        "residual_gate": [(x, x.clone(), sc)],
        "rmsnorm_modulate": [(x, sc[0], sc, sh, 1e-6)],
    }
    for op in _table.OPS:
        if getattr(op.ins, "count", None) is None:
            continue
        assert op.name in cases, f"{op.name}: add a case"
        for a in cases[op.name]:
            outs = [None] + ([torch.empty_like(a[0])] if op.out else [])
            for out in outs:
                assert op.key(a, out) == _ops._key(op.ins(a, out), op.tag(a)), op.name


# ---- guards and fallback --------------------------------------------------------

def fallback_cases():
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = randn((2, 16, 256), BF, 1.0, gen)
    sc, sh = randn((2, 256), BF, 0.1, gen), randn((2, 256), BF, 0.1, gen)
    odd = randn((2, 16, 258), BF, 1.0, gen)
    return {
        "device": (x.cpu(), sc.cpu(), sh.cpu()),
        "dtype": (x.double(), sc.double(), sh.double()),
        "requires_grad": (x.clone().requires_grad_(True), sc, sh),
        "empty": (x[:, :0], sc, sh),
        "shape": (odd, randn((2, 258), BF, 0.1, gen), randn((2, 258), BF, 0.1, gen)),
        "alignment": (torch.empty(2 * 16 * 256 + 1, dtype=BF, device="cuda")[1:].view(2, 16, 256)
                      .copy_(x), sc, sh),
    }


@pytest.mark.parametrize("reason", ["device", "dtype", "requires_grad", "empty", "shape",
                                    "alignment"])
def test_guards_fall_back_to_eager_counted_and_warned_once(reason):
    args = fallback_cases()[reason]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outs = [bt.ln_modulate(*args, 1e-6) for _ in range(2)]
    expect = ref.ln_modulate(*args, 1e-6)
    for o in outs:
        assert o.shape == expect.shape and o.dtype == expect.dtype
        if o.numel():
            ok, detail = same_bits(o.detach().cpu(), expect.detach().cpu())
            assert ok, f"{reason}: {detail}"
    fb = bt.stats()["ln_modulate"]["fallbacks"]
    assert sum(fb.values()) == 2 and len(fb) == 1, fb
    assert sum("eager fallback" in str(m.message) for m in w) == 1
    if reason == "requires_grad":
        assert outs[0].grad_fn is not None


def test_strict_mode_raises_with_the_guard_message():
    bt.configure(mode="strict")
    args = fallback_cases()["alignment"]
    with pytest.raises(bt.BitfoldFallback, match="alignment"):
        bt.ln_modulate(*args, 1e-6)


def test_verify_once_passes_for_exact_ops_and_disables_inexact_ones(monkeypatch):
    gen = torch.Generator(device="cuda").manual_seed(4)
    x = randn((2, 64, 512), BF, 1.0, gen)
    sc, sh = randn((2, 512), BF, 0.1, gen), randn((2, 512), BF, 0.1, gen)
    for _ in range(3):
        bt.ln_modulate(x, sc, sh, 1e-6, verify="once")
    s = bt.stats()["ln_modulate"]
    assert s["verified"] == 1 and s["mismatches"] == 0 and s["disabled"] is None, s
    # A mismatch must disable the op, warn once and return the reference:
    # the reference is made to differ in one element's last bit.
    eager_wan = bt._eager.wan_rmsnorm_silu

    def off_by_one_ulp(*a, **k):
        y = eager_wan(*a, **k).clone()
        bits = y.view(torch.int16)  # same element size: any strides
        bits[(0,) * bits.dim()] ^= 1
        return y

    monkeypatch.setattr(bt._eager, "wan_rmsnorm_silu", off_by_one_ulp)
    c = randn((1, 96, 2, 16, 16), BF, 1.0, gen).contiguous(memory_format=torch.channels_last_3d)
    gamma, beta = randn((96,), BF, 1.0, gen), randn((96,), BF, 0.1, gen)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = bt.wan_rmsnorm_silu(c, gamma, beta, verify="once")
        y2 = bt.wan_rmsnorm_silu(c, gamma, beta, verify="once")
    s = bt.stats()["wan_rmsnorm_silu"]
    expect = off_by_one_ulp(c, gamma, beta)
    assert s["mismatches"] == 1 and "first differing flat index" in s["disabled"], s
    assert torch.equal(y, expect) and torch.equal(y2, expect)
    assert sum(str(m.message).startswith("bitfold.torch.wan_rmsnorm_silu: verify mismatch")
               for m in w) == 1


# ---- torch.compile, CUDA graphs, threads ------------------------------------------

class EveryOp(torch.nn.Module):
    def forward(self, x, proj, q, k, c, bias, r, w):
        d = x.shape[-1]
        scale, shift, gate = proj[:, :d], proj[:, d:2 * d], proj[:, 2 * d:3 * d]
        y = torch.ops.bitfold.ln_modulate(x, scale, shift, 1e-5)
        qo, ko = torch.ops.bitfold.qk_layernorm(q, k, 1e-5)
        z = torch.ops.bitfold.conv_bias(c, bias, c)
        g = torch.ops.bitfold.residual_gate(r, y, gate.unsqueeze(1))
        m = torch.ops.bitfold.rmsnorm_modulate(x, w, scale, shift, 1e-6)
        return y * 2, qo, ko, z, g, m


def every_op_inputs(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    d = 2048
    x = randn((2, 64, d), BF, 1.0, gen)
    proj = randn((2, 3 * d), BF, 0.1, gen)
    q, k = randn((2, 64, 8, 128), BF, 1.0, gen), randn((2, 64, 8, 128), BF, 1.0, gen)
    c = randn((1, 96, 2, 8, 8), BF, 1.0, gen).contiguous(memory_format=torch.channels_last_3d)
    bias = randn((96,), BF, 1.0, gen)
    r, w = randn((2, 64, d), BF, 1.0, gen), randn((d,), BF, 1.0, gen)
    return x, proj, q, k, c, bias, r, w


def every_op_reference(x, proj, q, k, c, bias, r, w):
    d = x.shape[-1]
    scale, shift, gate = proj[:, :d], proj[:, d:2 * d], proj[:, 2 * d:3 * d]
    y = ref.ln_modulate(x, scale, shift, 1e-5)
    qo, ko = ref.qk_layernorm(q, k, 1e-5)
    return (y * 2, qo, ko, ref.conv_bias(c, bias, c), ref.residual_gate(r, y, gate.unsqueeze(1)),
            ref.rmsnorm_modulate(x, w, scale, shift, 1e-6))


def test_compile_fullgraph_every_op_equals_eager():
    torch._dynamo.reset()
    compiled = torch.compile(EveryOp(), fullgraph=True)  # raises on any graph break
    for seed in SEEDS:
        args = every_op_inputs(seed)
        for o, e in zip(compiled(*args), every_op_reference(*args)):
            check("compile", o, e, f"seed {seed}")
    for op in ("ln_modulate", "qk_layernorm", "conv_bias", "residual_gate", "rmsnorm_modulate"):
        no_fallback(op)


def _graph_case(seed, warm):
    args = every_op_inputs(seed)
    static = [a.clone() for a in args]
    m = EveryOp()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    if warm:
        with torch.cuda.stream(stream):
            m(*static)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = m(*static)
    for s in SEEDS:
        fresh = every_op_inputs(s + 10)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        for o, e in zip(outs, every_op_reference(*fresh)):
            check("cuda_graph", o, e, f"replay seed {s + 10} warm {warm}")


def test_cuda_graph_capture_and_replay_of_warm_shapes():
    _graph_case(0, warm=True)


def test_cuda_graph_capture_of_a_cold_shape_class():
    """The first launch of a shape class inside capture: the runtime relaxes
    the thread's capture mode around the module load (cuda/README.md)."""
    gen = torch.Generator(device="cuda").manual_seed(9)
    x = randn((1, 17, 1996), BF, 1.0, gen)  # a column count no other test uses
    sc, sh = randn((1, 1996), BF, 0.1, gen), randn((1, 1996), BF, 0.1, gen)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = bt.ln_modulate(x, sc, sh, 1e-6)
    graph.replay()
    torch.cuda.synchronize()
    check("cuda_graph", y, ref.ln_modulate(x, sc, sh, 1e-6), "cold shape captured")


def test_a_first_launch_while_another_thread_captures_keeps_the_capture():
    """torch.cuda.graph captures in global mode: a module load on any thread
    that is not relaxed is refused then and invalidates the capture. A
    synchronous first launch on another thread (compile, module load) while
    this thread captures must leave the capture valid and run the kernel."""
    gen = torch.Generator(device="cuda").manual_seed(31)
    x = randn((1, 9, 1868), BF, 1.0, gen)  # a column count no other test uses
    sc, sh = randn((1, 1868), BF, 0.1, gen), randn((1, 1868), BF, 0.1, gen)
    out = torch.empty_like(x)  # nothing allocated on the other thread
    a = randn((4096,), BF, 1.0, gen)
    side = torch.cuda.Stream()  # not the legacy stream, which a capture forbids
    was_async = bt.configure()["async_compile"]
    bt.configure(async_compile=False)
    bt.reset_stats()
    go, done, errors = threading.Event(), threading.Event(), []

    def other():
        try:
            go.wait()
            with torch.cuda.stream(side):
                bt.ln_modulate(x, sc, sh, 1e-6, out=out)
        except Exception as e:  # reported below
            errors.append(repr(e))
        finally:
            done.set()

    t = threading.Thread(target=other)
    t.start()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # raises at its end if invalidated
            go.set()
            done.wait(120)
            b = a * 2
    finally:
        go.set()
        t.join()
        bt.configure(async_compile=was_async)
    torch.cuda.synchronize()
    assert errors == []
    s = bt.stats()["ln_modulate"]
    assert s["fallbacks"] == {} and s["launches"] == 1, s
    check("cuda_graph", out, ref.ln_modulate(x, sc, sh, 1e-6), "first launch during a capture")
    graph.replay()
    torch.cuda.synchronize()
    check("cuda_graph", b, a * 2, "the capture around it")


def test_two_threads_on_two_streams():
    errors = []

    def worker(seed):
        try:
            stream = torch.cuda.Stream()
            gen = torch.Generator(device="cuda").manual_seed(seed)
            with torch.cuda.stream(stream):
                x = randn((2, 256, 1024), BF, 1.0, gen)
                sc, sh = randn((2, 1024), BF, 0.1, gen), randn((2, 1024), BF, 0.1, gen)
                for _ in range(50):
                    y = bt.ln_modulate(x, sc, sh, 1e-6)
                    g = bt.residual_gate(x, y, sc.unsqueeze(1))
                expect = ref.residual_gate(x, ref.ln_modulate(x, sc, sh, 1e-6), sc.unsqueeze(1))
            stream.synchronize()
            ok, detail = same_bits(g, expect)
            if not ok:
                errors.append(f"seed {seed}: {detail}")
        except Exception as e:  # reported below
            errors.append(f"seed {seed}: {e!r}")
    threads = [threading.Thread(target=worker, args=(s,)) for s in (21, 22)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
