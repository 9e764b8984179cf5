"""bitfold.torch's warm call in C (python/native/fast.c) on the GPU: warm
calls of every op are served there and equal eager bit for bit, on the
caller's current stream, also inside a CUDA graph capture (captured there,
and the graph's replays equal eager). Skipped, with the reason, where the
C path is off (no DLPack C exchange API in this torch, module not built).
"""
import pytest

from conftest import HAVE_CUDA, torch

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU tests skipped", allow_module_level=True)

from test_kernels import randn  # noqa: E402
from test_torch_ops import EveryOp, check, every_op_inputs, every_op_reference  # noqa: E402

import bitfold.torch as bt  # noqa: E402
from bitfold.torch import _fast  # noqa: E402

if _fast.module is None:
    pytest.skip(f"the C warm call is off: {_fast.why_not}", allow_module_level=True)

BF = torch.bfloat16
OPS = ("ln_modulate", "qk_layernorm", "conv_bias", "residual_gate", "rmsnorm_modulate")


@pytest.fixture(autouse=True)
def fresh():
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    yield


def served_during(fn):
    before = _fast.module.served()
    r = fn()
    return r, _fast.module.served() - before


def test_warm_calls_of_every_op_are_served_in_c_and_equal_eager():
    m = EveryOp()
    m(*every_op_inputs(0))  # the Python path registers each site
    for seed in (1, 2, 3):
        args = every_op_inputs(seed)
        outs, n = served_during(lambda: m(*args))
        assert n == 5, f"{n} of the 5 custom-op calls served in C"
        for o, e in zip(outs, every_op_reference(*args)):
            check("fast", o, e, f"seed {seed}")
    for op in OPS:
        s = bt.stats()[op]
        assert s["fallbacks"] == {} and s["launches"] == 4, (op, s)


@pytest.mark.parametrize("rows", [1, 3, 16, 4096])
def test_hf_rmsnorm_decode_and_prefill_rows_served_in_c(rows):
    gen = torch.Generator(device="cuda").manual_seed(rows)
    w = randn((4096,), BF, 1.0, gen)
    res = randn((1, rows, 4096), BF, 1.0, gen)
    for i in range(3):
        x = randn((1, rows, 4096), BF, 1.0, gen)
        (y, s), n = served_during(lambda: bt.hf_rmsnorm(x, w, 1e-6, res))
        assert n == (1 if i else 0)
        ey, es = bt._eager.hf_rmsnorm(x, w, 1e-6, res)
        check("fast", y, ey, f"rows {rows} y")
        check("fast", s, es, f"rows {rows} sum")


def test_a_warm_call_runs_on_the_callers_stream():
    """Inputs written on a side stream and the op called there: launched on
    another stream, the kernel would race the writes."""
    m = EveryOp()
    m(*every_op_inputs(0))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for seed in (4, 5):
            args = every_op_inputs(seed)
            big = torch.empty(1 << 26, device="cuda").normal_()  # keeps the stream busy
            x = args[0].clone()
            x.mul_(1.0).add_(big[:1].sum() * 0)  # x is ready only after big
            args = (x,) + args[1:]
            outs, n = served_during(lambda: m(*args))
            assert n == 5
            ref = every_op_reference(*args)
    torch.cuda.synchronize()
    for o, e in zip(outs, ref):
        check("fast", o, e, "side stream")


def test_warm_call_outputs_are_caching_allocator_blocks():
    """A warm call's outputs come from torch's caching allocator, as the
    Python path's do: record_stream then keeps a block alive for a side
    stream (it silently skips a foreign blob, e.g. one made through DLPack,
    whose storage is not resizable)."""
    m = EveryOp()
    m(*every_op_inputs(0))
    args = every_op_inputs(1)
    outs, n = served_during(lambda: m(*args))
    assert n == 5
    side = torch.cuda.Stream()
    for i, t in enumerate(outs):
        assert t.untyped_storage().resizable(), f"output {i}: a foreign blob, not torch's"
        t.record_stream(side)


def test_warm_calls_inside_a_capture_are_served_in_c_and_replay_equal():
    args = every_op_inputs(0)
    static = [a.clone() for a in args]
    m = EveryOp()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        m(*static)
        m(*static)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs, n = served_during(lambda: m(*static))
    assert n == 5, f"{n} of the 5 custom-op calls served in C inside the capture"
    for seed in (6, 7):
        for dst, src in zip(static, every_op_inputs(seed)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        for o, e in zip(outs, every_op_reference(*static)):
            check("fast", o, e, f"graph replay {seed}")
