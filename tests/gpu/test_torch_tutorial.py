"""docs/torch-tutorial.md as written: its code blocks run in order (the
second asserts torch.equal against eager and compiles the model with
fullgraph=True, which raises on a graph break); then the tutorial's op
against eager over shapes and strided views, and the tutorial's model
captured in a CUDA graph and replayed."""
import os
import re
import sys
import types

import pytest

from conftest import HAVE_CUDA, record, torch

if not HAVE_CUDA:
    pytest.skip("no CUDA device visible to torch: GPU tutorial test skipped",
                allow_module_level=True)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


@pytest.fixture(scope="module")
def tutorial():
    try:
        import bitfold.torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"the bitfold package is not importable ({e})")
    with open(os.path.join(ROOT, "docs", "torch-tutorial.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    # A real module (torch.compile's guards import the globals' module by name).
    module = types.ModuleType("bitfold_torch_tutorial")
    sys.modules[module.__name__] = module
    scope = module.__dict__
    exec(compile(blocks[0], "torch-tutorial.md[0]", "exec"), scope)
    return scope, blocks


def test_the_tutorial_runs_as_written(tutorial):
    scope, blocks = tutorial
    exec(compile(blocks[1], "torch-tutorial.md[1]", "exec"), scope)  # asserts inside
    import bitfold.torch as bt
    s = bt.stats()["mylib::silu_and_mul"]
    assert s["launches"] > 0 and s["fallbacks"] == {}, s


@pytest.mark.parametrize("rows,hidden", [(1, 64), (7, 2816), (256, 5504), (1000, 11008)])
def test_the_tutorial_op_equals_eager(tutorial, rows, hidden):
    scope, _ = tutorial
    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(rows)
    gu = (torch.randn(rows, 2 * hidden, device="cuda", generator=g) * 4).to(torch.bfloat16)
    gu[0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])
    gate, up = gu.chunk(2, dim=-1)  # strided views, as in the model
    for a, b in ((gate, up), (gate.contiguous(), up.contiguous())):
        y = scope["silu_and_mul"](a, b)
        expect = F.silu(a) * b
        ok = torch.equal(torch.nan_to_num(y, 1.0), torch.nan_to_num(expect, 1.0)) and \
            torch.equal(y.isnan(), expect.isnan())
        record("tutorial.silu_and_mul", ok, f"rows {rows} hidden {hidden}")
        assert ok, f"rows {rows} hidden {hidden}: first difference at " \
            f"{(y != expect).nonzero()[:1].tolist()}"


def test_the_tutorial_model_in_a_cuda_graph(tutorial):
    scope, _ = tutorial
    mlp = scope["MLP"](512, 1408).cuda().bfloat16()
    x = torch.randn(2, 64, 512, device="cuda", dtype=torch.bfloat16)
    expect = mlp(x)  # warm: the kernel is compiled before capture
    graph = torch.cuda.CUDAGraph()
    static_x = x.clone()
    with torch.cuda.graph(graph):
        y = mlp(static_x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, expect)
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    assert torch.equal(y, mlp(static_x))
