"""bitfold.torch.op_from_source: a user's program (kernel text, or a
bitfold.dsl.Program) as a torch op, made by the same op table mechanism as
the stock ops (_ops.Op): a direct function, a torch.library custom op under
the user's namespace, and a fake impl from the program's shape rule.

Shape rule: every output has the rows and columns of the program's first
per-element input (its shape; row_major outputs contiguous, channels_last
outputs in the input's channels-last layout) and its declared dtype; a
per_row output holds one value per row: that input's shape without its
column dim (row_major: shape[:-1]; channels-last/first: (N, *spatial)); a
per_row(k) output holds k per row: that shape plus a last dim of k. The
C API names the operands and says which are outputs; their dtypes and
layouts come from the program's declarations.
"""
import re
import struct

import torch

import bitfold
from bitfold import dsl
from . import _custom, _ops, _table

_TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
          "i8": torch.int8, "i32": torch.int32, "f8e4m3fn": getattr(torch, "float8_e4m3fn", None),
          "f8e5m2": getattr(torch, "float8_e5m2", None)}
_PER_ROW = re.compile(r"per_row(?:\((\d+)\))?")
_PER_ROW_SPACED = re.compile(r"per_row\s*\(\s*(\d+)\s*\)")
_NAME = re.compile(r"^([A-Za-z_]\w*)::([A-Za-z_]\w*)$")
_registered = {}


def _declarations(text):
    """inputs [(name, dtype, layout, index)], scalars [(name, default)],
    outputs [(name, dtype, layout, index, k, alias)] of a program text (after the library
    accepted it: only the declaration lines are read here)."""
    inputs, scalars, outputs = [], [], []
    for line in text.splitlines():
        # per_row(K) as one word, however the text spaces it.
        words = _PER_ROW_SPACED.sub(r"per_row(\1)", line.split("#", 1)[0]).split()
        if len(words) >= 6 and words[0] == "input":
            inputs.append((words[1], words[3], words[4], words[5]))
        elif len(words) >= 4 and words[0] == "scalar":
            scalars.append((words[1], _number(words[5]) if len(words) >= 6 else None))
        elif len(words) >= 5 and words[0] == "output":
            row = _PER_ROW.fullmatch(words[5]) if len(words) >= 6 else None
            alias = words[words.index("aliases") + 1] if "aliases" in words else None
            outputs.append((words[1], words[3], words[4],
                            "per_row" if row else "per_element",
                            int(row.group(1) or 1) if row else 1, alias))
    return inputs, scalars, outputs


def _number(word):
    if word.startswith("0x"):
        return struct.unpack("<f", struct.pack("<I", int(word, 16)))[0]
    return struct.unpack("<f", struct.pack("<f", float(word)))[0]


def _args_text(inputs, scalars):
    """The op's parameters: the inputs, then the scalars (defaults kept
    where every later scalar has one too)."""
    parts = [f"Tensor {n}" for n, *_ in inputs]
    tail_has_defaults = True
    for n, d in reversed(scalars):
        tail_has_defaults = tail_has_defaults and d is not None
        parts.insert(len(inputs), f"float {n}={d!r}" if tail_has_defaults else f"float {n}")
    return ", ".join(parts)


def _reference(inputs):
    """Index of the input whose shape the outputs take."""
    for i, (_, _, _, index) in enumerate(inputs):
        if index == "per_element":
            return i
    return 0


def _diagnose(qual, inputs):
    """Raises the clear error for a call the kernel path refuses (an op
    without a fallback)."""
    def diagnose(a, refusal):
        for t, (n, dt, _, _) in zip(a, inputs):
            if t.dtype != _TORCH.get(dt):
                raise TypeError(f"{qual}: argument '{n}' is {t.dtype}, the program declares "
                                f"{dt}")
            if not t.is_cuda and not _ops._ALLOW_HOST:
                raise ValueError(f"{qual}: argument '{n}' is a {t.device} tensor (bitfold "
                                 "runs on CUDA)")
            if t.device != a[0].device:
                raise ValueError(f"{qual}: argument '{n}' is on {t.device}, "
                                 f"'{inputs[0][0]}' on {a[0].device}")
        raise ValueError(f"{qual}: the kernel does not take these inputs ({refusal[0]}): "
                         f"{refusal[1]}")
    return diagnose


def _type_check(qual, inputs):
    n = len(inputs)

    def check(a):
        for i in range(n):
            if not isinstance(a[i], torch.Tensor):
                raise TypeError(f"{qual}: argument '{inputs[i][0]}' must be a tensor, not "
                                f"{type(a[i]).__name__}")
    return check


def _row_shape(x, layout):
    """One value per row of x: its shape without the column dim."""
    if layout == "row_major":
        return x.shape[:-1]
    return (x.shape[0],) + tuple(x.shape[2:])


def _alloc(inputs, outputs):
    n, ref = len(inputs), _reference(inputs)
    ref_layout = inputs[ref][2] if inputs else "row_major"
    names = [i[0] for i in inputs]
    kinds = [(_TORCH[dt], torch.contiguous_format if layout == "row_major"
              else torch.preserve_format, (index, k, names.index(alias) if alias else None))
             for _, dt, layout, index, k, alias in outputs]

    def one(a, dt, fmt, how):
        index, k, alias = how
        if alias is not None:  # in place: the input is the output
            return a[alias]
        x = a[ref]
        if index == "per_row":  # per_row(k), k > 1: a row's k values last
            shape = tuple(_row_shape(x, ref_layout)) + ((k,) if k > 1 else ())
            return torch.empty(shape, dtype=dt, device=x.device)
        return torch.empty_like(x, dtype=dt, memory_format=fmt)

    if len(kinds) == 1:
        (dt, fmt, how), = kinds

        def alloc_one(a, o, aux):
            y = one(a, dt, fmt, how)
            return (y,), a[:n] + (y,)
        return alloc_one

    def alloc(a, o, aux):
        outs = tuple(one(a, dt, fmt, how) for dt, fmt, how in kinds)
        return outs, a[:n] + outs
    return alloc


def _in_place(inputs, outputs, args_text):
    """For outputs declared `aliases`: the torch schema's parameter text
    with those inputs marked mutable (Tensor(a0!) x), their names, and the
    custom op's result (the outputs that are not inputs; torch ops may not
    return their inputs). The direct function returns every output."""
    aliased = [alias for *_, alias in outputs if alias]
    if not aliased:
        return args_text, (), None, None
    for k, name in enumerate(aliased):
        args_text = re.sub(rf"\bTensor {name}\b", f"Tensor(a{k}!) {name}", args_text, count=1)
    keep = [i for i, (*_, alias) in enumerate(outputs) if not alias]

    def result(r):
        r = r if isinstance(r, tuple) else (r,)
        kept = tuple(r[i].contiguous() for i in keep)
        return None if not kept else kept[0] if len(kept) == 1 else kept
    returns = ("()" if not keep else "Tensor" if len(keep) == 1
               else "(" + ", ".join(["Tensor"] * len(keep)) + ")")
    return args_text, tuple(aliased), result, returns


def _make_op(qual, op_name, kernel, text, fallback):
    inputs, scalars, outputs = _declarations(text)
    names = [n for n, *_ in inputs] + [n for n, *_ in outputs]
    if names != list(kernel.tensor_names):
        raise ValueError(f"{qual}: the program's operands {kernel.tensor_names} do not read "
                         f"as declared ({names})")
    n, ns = len(inputs), len(scalars)
    alloc = _alloc(inputs, outputs)
    ref = _reference(inputs)
    pack = struct.Struct(f"{ns}f").pack
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join(["Tensor"] * len(outputs)) + ")"
    args_text, mutates, in_place_result, in_place_returns = _in_place(
        inputs, outputs, _args_text(inputs, scalars))
    op = _ops.Op(
        op_name, args_text, in_place_returns or returns, out=False, kernel=kernel.name,
        ins=lambda a, o: a[:n], tag=lambda a: a[n:], variant=lambda a: None,
        params=lambda v: "", alloc=alloc, scalars=lambda a: pack(*a[n:]),
        width=lambda a: a[ref].shape[-1] if a[ref].dim() else 0,
        explain=_type_check(qual, inputs), eager=fallback,
        custom_result=in_place_result or (lambda r: r),
        lookup=lambda variant: kernel, label=qual, dtypes=_ops._WORD,
        diagnose=None if fallback is not None else _diagnose(qual, inputs),
        doc=f"{qual}: the bitfold program {kernel.name} (bitfold.torch.op_from_source).")
    op.fake = lambda *a: (lambda outs: outs[0] if len(outs) == 1 else outs)(alloc(a, None,
                                                                                  None)[0])
    op.mutates = mutates
    if ns and not all(isinstance(d, float) or d is None for _, d in scalars):
        raise ValueError(f"{qual}: unreadable scalar defaults {scalars}")
    return op


def op_from_source(source, name, fallback=None, runtime=None):
    """A torch op from a bitfold program: `source` is kernel text (str or
    bytes, docs/kernel-format.md) or a bitfold.dsl.Program; `name`
    "namespace::op" (torch.ops.namespace.op). Returns the direct function
    f(*inputs, *scalars, verify=None, mode=None) -> output(s); its
    `.custom_op` is the registered torch op (torch.compile, CUDA graphs).

    A program that does not parse or verify raises bitfold.BitfoldError
    here, with LINE:COLUMN. Without `fallback`, inputs the kernel refuses
    raise TypeError/ValueError naming the argument; with fallback (a
    function of the same arguments computing the same bits), they run it
    instead, as the stock ops run their eager chains (stats(), strict
    mode and verify="once" apply)."""
    m = _NAME.match(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"op_from_source: name must be 'namespace::op', not {name!r}")
    if name in _registered:
        raise ValueError(f"op_from_source: {name} is already registered")
    if fallback is not None and not callable(fallback):
        raise TypeError(f"op_from_source: fallback must be callable, not {fallback!r}")
    text = source.text() if isinstance(source, dsl.Program) else source
    if isinstance(text, bytes):
        text = text.decode()
    if not isinstance(text, str):
        raise TypeError("op_from_source: source must be kernel text or a bitfold.dsl.Program, "
                        f"not {type(source).__name__}")
    try:
        kernel = (runtime or bitfold.default_runtime()).kernel_from_source(text)
    except bitfold.BitfoldError as e:
        if not isinstance(source, dsl.Program):
            raise
        raise bitfold.BitfoldError(e.status, source.explain(e.message)) from None
    op = _make_op(name, m.group(2), kernel, text, fallback)
    try:
        custom = _custom.register(op, m.group(1))
    except RuntimeError as e:
        raise ValueError(f"op_from_source: {name} cannot be registered: {e}") from None
    fn = _table.direct(op)
    fn.custom_op, fn.op = custom, op
    _registered[name] = fn
    return fn


def kernel(name, fallback=None):
    """Decorator form of op_from_source: the decorated function builds and
    returns the program (a bitfold.dsl.Program or text), once.

        @bitfold.torch.kernel("mylib::silu_and_mul")
        def silu_and_mul():
            p = dsl.Program("silu_and_mul") ...
            return p
    """
    def wrap(build):
        return op_from_source(build(), name, fallback)
    return wrap
