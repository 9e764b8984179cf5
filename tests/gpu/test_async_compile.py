"""bitfold.torch's async compile mode on a GPU: a first call at a new
shape class is served by the eager chain without waiting for the compile,
the first call after the compile finished launches the kernel, and both
results are torch.equal to the eager chain. A runtime of its own
(disk_cache=False), so each shape really compiles.
"""
import time

import pytest

from conftest import HAVE_CUDA, torch

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU async compile tests skipped",
                allow_module_level=True)

import bitfold  # noqa: E402
import bitfold.torch as bt  # noqa: E402
from bitfold.torch import _eager, _table  # noqa: E402


def _default_runtime(**options):
    """A runtime of its own as bitfold.torch's default while the test runs."""
    saved = bitfold._default
    rt = bitfold.Runtime(disk_cache=False, async_compile=True, **options)
    bitfold._default = rt
    for op in _table.OPS:
        op.new_kernels()
    bt.reset_stats()
    bt.configure(mode="auto", verify="off")
    yield rt
    bitfold._default = saved
    for op in _table.OPS:
        op.new_kernels()
    rt.close()


@pytest.fixture
def async_rt():
    yield from _default_runtime()


def _inputs(cols, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(3, 40, cols, generator=g, device="cuda").to(torch.bfloat16)
    proj = torch.randn(3, 2 * cols, generator=g, device="cuda").to(torch.bfloat16)
    return x, proj[:, :cols], proj[:, cols:]


@pytest.mark.parametrize("cols", [1000, 3072])
def test_first_call_is_eager_without_waiting_and_later_calls_run_the_kernel(async_rt, cols):
    x, sc, sh = _inputs(cols, cols)
    want = _eager.ln_modulate(x, sc, sh, 1e-6)  # also warms the eager chain
    # The runtime's first launch sets up its driver state: not timed.
    bt.ln_modulate(*_inputs(cols + 8, 0), 1e-6)
    bt.reset_stats()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    first = bt.ln_modulate(x, sc, sh, 1e-6)
    first_ms = (time.perf_counter() - t0) * 1e3
    assert torch.equal(first, want)
    s = bt.stats()["ln_modulate"]
    assert (s["compiling"], s["launches"]) == (1, 0), s
    # A compile takes ~100 ms; a call that waited for one would show it.
    assert first_ms < 50, f"the first call took {first_ms:.1f} ms: it waited for the compile"
    async_rt.prewarm_status(wait=True)
    later = bt.ln_modulate(x, sc, sh, 1e-6)
    assert torch.equal(later, want)
    s = bt.stats()["ln_modulate"]
    assert (s["compiling"], s["launches"], s["fallbacks"]) == (1, 1, {}), s
    print(f"cols {cols}: first call {first_ms:.2f} ms (eager, kernel compiling)")


def test_hf_rmsnorm_served_eagerly_then_by_the_kernel(async_rt):
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(2, 24, 4096, generator=g, device="cuda").to(torch.bfloat16)
    w = torch.randn(4096, generator=g, device="cuda").to(torch.bfloat16)
    want = _eager.hf_rmsnorm(x, w, 1e-6)
    assert torch.equal(bt.hf_rmsnorm(x, w, 1e-6), want)
    async_rt.prewarm_status(wait=True)
    assert torch.equal(bt.hf_rmsnorm(x, w, 1e-6), want)
    s = bt.stats()["hf_rmsnorm"]
    assert s["launches"] == 1 and s["compiling"] == 1 and not s["fallbacks"], s


@pytest.fixture
def quick_rt():
    yield from _default_runtime(quick_first=True)


@pytest.mark.parametrize("shape", [(2, 24, 4096), (8, 128, 5120), (3, 17, 2048)])
def test_quick_first_serves_the_quick_kernel_then_the_chosen_one(quick_rt, shape):
    """hf_rmsnorm's chosen configs keep a row in registers (one pass); its
    quick config runs two passes on 256 threads. Eager while the quick one
    compiles, then the quick kernel, then the chosen one: all equal to
    eager, and two compiles per class (the quick one and the upgrade)."""
    g = torch.Generator(device="cuda").manual_seed(shape[-1])
    x = torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)
    w = torch.randn(shape[-1], generator=g, device="cuda").to(torch.bfloat16)
    want = _eager.hf_rmsnorm(x, w, 1e-6)
    assert torch.equal(bt.hf_rmsnorm(x, w, 1e-6), want)
    deadline = time.monotonic() + 60
    while bt.stats()["hf_rmsnorm"]["launches"] == 0 and time.monotonic() < deadline:
        assert torch.equal(bt.hf_rmsnorm(x, w, 1e-6), want)
        time.sleep(0.002)
    assert bt.stats()["hf_rmsnorm"]["launches"] >= 1, "no kernel served in 60 s"
    st = quick_rt.prewarm_status(wait=True)
    assert (st["done"], st["failed"]) == (2, 0), st  # quick compile + upgrade
    assert torch.equal(bt.hf_rmsnorm(x, w, 1e-6), want)
    s = bt.stats()["hf_rmsnorm"]
    assert not s["fallbacks"], s


_FIRST_COMPILE = r"""
import json, sys, time
import torch
import bitfold.torch
warm = sys.argv[1] == "warm"
torch.zeros(1, device="cuda")  # the CUDA context, outside the timings
rt = bitfold.torch.Runtime(disk_cache=False, async_compile=warm)
if warm:
    time.sleep(3)  # the background set-up runs meanwhile (~0.2-0.6 s)
    rt.set_async_compile(False)
k = rt.kernel("ln_modulate", "dtype=bf16")
times = []
for cols in (1024, 2048, 3072, 4096):
    x = torch.randn(1, 8, cols, device="cuda").to(torch.bfloat16)
    v = torch.randn(1, cols, device="cuda").to(torch.bfloat16)
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    k.launch([x, v, v, y], [1e-6])
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps(times))
"""


def _compile_times(mode):
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    out = subprocess.run([sys.executable, "-c", _FIRST_COMPILE, mode], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_background_set_up_takes_the_first_compile_s_extra_cost():
    """Fresh processes, compute cache off: synchronous compiles of four
    shapes, with the runtime made 3 s earlier in async mode (its set-up
    ran in the background) or not. With the set-up done, the first compile
    costs about what the later ones do."""
    cold, warm = _compile_times("cold"), _compile_times("warm")
    later = sorted(warm[1:])[1]
    print(f"first compile in a process: {cold[0]:.1f} ms without the background set-up, "
          f"{warm[0]:.1f} ms with it; later compiles {', '.join(f'{t:.1f}' for t in warm[1:])} ms")
    assert warm[0] <= 1.5 * later + 30, (cold, warm)
