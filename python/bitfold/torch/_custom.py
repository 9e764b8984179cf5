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

Registered with torch.library.Library (define, impl, register_fake) rather
than torch.library.custom_op, whose Python autograd layer (a second Python
kernel and a redispatch per call) cost a warm call more than the rest of
its host path. The body is the Autograd kernel itself, so a call with
plain tensors and no input needing grad is one Python kernel, the direct
op's host path. With an input needing grad the op runs with grad off and
its outputs get a backward that raises (what custom_op did without a
registered formula); tensor subclasses (fake or functional tensors while
torch.compile traces) go below autograd, to the same body registered as
CompositeExplicitAutograd or to the fake impl.
"""
import textwrap

import torch

from . import _eager, _fast, _table
from ._ops import call, chain_source, config, hit, hit_source, key_source

NAMESPACE = "bitfold"


def _verify_arg(v):
    return None if v == "default" else v


_libs = {}
_PLAIN = _fast.PLAIN


def _library(namespace):
    lib = _libs.get(namespace)
    if lib is None:
        lib = _libs[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return lib


def _plain_test(params):
    """Source text: True when every tensor argument is a plain tensor (not
    a fake or functional one)."""
    tests = []
    for typ, name, _ in params:
        if typ == "Tensor":
            tests.append(f"_T({name}) in _plain")
        elif typ == "Tensor?":
            tests.append(f"({name} is None or _T({name}) in _plain)")
    return " and ".join(tests) or "True"


def _grad_test(params):
    """Source text: True when grad is on and a tensor argument needs it."""
    names = [n for t, n, _ in params if t in ("Tensor", "Tensor?")]
    needs = " or ".join(f"({n} is not None and {n}.requires_grad)" for n in names)
    return f"_grad() and ({needs or 'False'})"


class _NoBackward(torch.autograd.Function):
    """The op run with grad off (the kernel, as for any call), its outputs
    tied to a backward that raises: these ops have no autograd formula."""

    @staticmethod
    def forward(ctx, op, verify, *a):
        ctx.name = op._name
        r = op(*a, verify=verify)
        return tuple(r) if isinstance(r, list) else r  # a Function returns tensors

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(f"Trying to backward through {ctx.name}, but bitfold ops have no "
                           "autograd formula (the direct bitfold.torch op runs the eager "
                           "chain when an input needs grad)")


def register(op, namespace=NAMESPACE):
    """torch.ops.<namespace>.<op.name> from an op entry, with its fake impl
    (op.fake where set: a user op's shape rule; else the eager chain)."""
    params = _table.parameters(op)
    lib = _library(namespace)
    # op.args marks the inputs an `aliases` output writes over (Tensor(a0!) x).
    lib.define(f"{op.name}({op.args}, str verify='default') -> {op.returns}")
    handle = getattr(getattr(torch.ops, namespace), op.name)
    scope = {"_call": call, "_hit": hit, "_op": op, "_sites": op.sites, "_config": config,
             "_E": _eager,
             "_check": op.check or op.explain, "_post": op.custom_result, "_v": _verify_arg,
             "_eager": op.fake or op.eager,
             "_nb": _NoBackward.apply, "_tag": op.tag, "_T": type, "_plain": _PLAIN,
             "_grad": torch.is_grad_enabled,
             "_below": torch._C._AutoDispatchBelowAutograd, "_default": handle.default}
    scope["_fast"] = _fast.run
    check = "    _check(a)\n" if scope["_check"] is not None else ""
    fast = _table.fast_source("verify == 'default'", "_post(r)")
    # The site key inline where it is one expression.
    key = key_source(op.ins, op.tag_arg, None, [n for _, n, _ in params])
    if key is None:
        run = fast + check + "    return _post(_call(_op, a, None, _v(verify), None))\n"
    else:
        run = (fast + check + hit_source(key, None, None, chain_source(op), lambda r: f"_post({r})") +
               "    return _post(_hit(_op, a, None, _v(verify), None, k, ent))\n")
    body = _table.define(op.name, params, "verify='default'", run, scope)
    autograd = _table.define(
        op.name, params, "verify='default'",
        f"    if {_grad_test(params)}:\n"
        f"        return {'list' if op.returns.startswith('Tensor[]') else ''}"
        "(_nb(_default, verify, *a))\n"
        f"    if {_plain_test(params)}:\n" + textwrap.indent(run, "    ") +
        "    with _below():\n        return _default(*a, verify=verify)\n", scope)
    fake = _table.define("fake", params, "verify='default'", "    return _post(_eager(*a))\n",
                         scope)
    lib.impl(op.name, body, "CompositeExplicitAutograd")
    lib.impl(op.name, autograd, "Autograd")
    torch.library.register_fake(f"{namespace}::{op.name}", fake, lib=lib)
    return handle


CUSTOM = {op.name: register(op) for op in _table.OPS}
