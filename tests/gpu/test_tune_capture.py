"""Tune-on-miss while the caller captures a CUDA graph.

torch.cuda.graph captures in global mode: a synchronisation, a synchronous
copy or a module load on any thread that is not relaxed is refused then and
invalidates the capture, and work on the legacy stream conflicts with it.
A tune times configs on its own stream with its thread relaxed, so a first
launch that tunes (on the capturing thread, "now"; or on the tuner's thread,
"background") leaves the capture valid, and the captured launch replays the
eager chain's bits.
"""
import time

import pytest

import references as ref
from conftest import HAVE_CUDA, record, torch

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU tune-capture tests skipped",
                allow_module_level=True)

from test_kernels import randn, same_bits  # noqa: E402

import bitfold.torch as bt  # noqa: E402

BF = torch.bfloat16


@pytest.mark.parametrize("mode,cols", [("now", 1880), ("background", 1896)])
def test_a_tune_on_miss_during_a_capture_keeps_it(tmp_path, mode, cols):
    db = tmp_path / "tune-db.json"
    rt = bt.Runtime(tune_db=str(db), tune_on_miss=mode, disk_cache=False,
                    tune_budget_seconds=20)
    k = rt.kernel("ln_modulate")
    gen = torch.Generator(device="cuda").manual_seed(cols)
    x = randn((1, 64, cols), BF, 1.0, gen)
    sc, sh = randn((1, cols), BF, 0.1, gen), randn((1, cols), BF, 0.1, gen)
    y = torch.empty_like(x)
    a = randn((4096,), BF, 1.0, gen)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # raises at its end if invalidated
        k.launch([x, sc, sh, y], [1e-6])  # "now": the whole tune runs here
        t0 = time.monotonic()
        while mode == "background" and not db.exists() and time.monotonic() - t0 < 30:
            time.sleep(0.05)  # the tune runs on its thread during the capture
        b = a * 2
    assert db.exists(), "the tune recorded no winner during the capture"
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ok, detail = same_bits(y, ref.ln_modulate(x, sc, sh, 1e-6))
    record("tune_capture", ok, f"{mode}: {detail}")
    assert ok, f"{mode}: {detail}"
    assert torch.equal(b, a * 2)
