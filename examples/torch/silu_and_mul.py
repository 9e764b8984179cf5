"""The tutorial's op (docs/torch-tutorial.md): silu_and_mul written with
bitfold.dsl, registered with bitfold.torch.op_from_source, checked bit for
bit against F.silu(gate) * up, run in a torch.compile(fullgraph=True)
MLP and in a captured CUDA graph, and timed against eager.

    python3 examples/torch/silu_and_mul.py [--tokens 1024] [--hidden 2816]
"""
import argparse
import json

import torch
import torch.nn.functional as F

import bitfold.torch as bt
from bitfold import dsl

from _timing import time_ms


def silu_and_mul_program():
    p = dsl.Program("silu_and_mul")
    gate, up = p.input("gate", "bf16"), p.input("up", "bf16")
    g = dsl.extend(gate.load())
    silu = dsl.round(g / (1.0 + dsl.exp_libdevice(-g)), "bf16")
    p.output("y", "bf16", dsl.round(silu * up.load(), "bf16"))
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=2816)
    a = ap.parse_args()
    op = bt.op_from_source(silu_and_mul_program(), "example::silu_and_mul")
    gu = torch.randn(a.tokens, 2 * a.hidden, device="cuda", dtype=torch.bfloat16)
    gate, up = gu.chunk(2, dim=-1)
    eager = F.silu(gate) * up
    out = {"equal": torch.equal(op(gate, up), eager)}
    compiled = torch.compile(lambda g, u: torch.ops.example.silu_and_mul(g, u) * 2,
                             fullgraph=True)
    out["compiled_equal"] = torch.equal(compiled(gate, up), eager * 2)
    graph, y = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):
        y = op(gate, up)
    graph.replay()
    torch.cuda.synchronize()
    out["graph_equal"] = torch.equal(y, eager)
    out["bitfold_ms"] = time_ms(lambda: op(gate, up))
    out["eager_ms"] = time_ms(lambda: F.silu(gate) * up)
    out["stats"] = bt.stats()
    print(json.dumps(out, indent=1, default=str))
    return 0 if out["equal"] and out["compiled_equal"] and out["graph_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
