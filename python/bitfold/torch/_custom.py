"""The ops registered with torch.library, for torch.compile(fullgraph=True)
and CUDA graphs: torch.ops.bitfold.<op>, made from the op table (_table.py).

Each body is the direct op's host path (_ops.call) with the entry's
custom_result (contiguous results; hf_rmsnorm a list: [y] or [y, x +
residual]); each fake impl runs the op's eager chain on the fake tensors
with the same custom_result, so shapes, dtypes and strides are the eager
ones. conv_bias and wan_rmsnorm_silu write into empty_like(x), which is the
eager chain's layout wherever the kernel accepts the operands (dense
channels-last), and fall back otherwise. Every op takes a last `verify`
string ("default": the process setting, "off", "once").
"""
import torch

from . import _table
from ._ops import call

NAMESPACE = "bitfold"


def _verify_arg(v):
    return None if v == "default" else v


def register(op, namespace=NAMESPACE):
    """torch.ops.<namespace>.<op.name> from an op entry, with its fake impl
    (op.fake where set: a user op's shape rule; else the eager chain)."""
    params = _table.parameters(op)
    scope = {"_call": call, "_op": op, "_check": op.check or op.explain,
             "_post": op.custom_result,
             "_v": _verify_arg, "_eager": op.fake or op.eager}
    check = "    _check(a)\n" if scope["_check"] is not None else ""
    body = _table.define(op.name, params, "verify='default'",
                         check + "    return _post(_call(_op, a, None, _v(verify), None))\n",
                         scope)
    fake = _table.define("fake", params, "verify='default'", "    return _post(_eager(*a))\n",
                         scope)
    schema = f"({op.args}, str verify='default') -> {op.returns}"
    # User ops with `aliases` outputs write over those inputs (in place).
    custom = torch.library.custom_op(f"{namespace}::{op.name}", body,
                                     mutates_args=getattr(op, "mutates", ()), schema=schema)
    custom.register_fake(fake)
    return custom


CUSTOM = {op.name: register(op) for op in _table.OPS}
