"""bitfold.dsl: row programs built in Python, printed in the kernel text
format (docs/kernel-format.md). Pure Python: the library parses, verifies
and canonicalises the text (Runtime.kernel_from_source), so a program built
here, the same program written as text and the same program built with the
C++ DSL (dsl/IR.h) have one canonical text and one hash.

    from bitfold import dsl
    p = dsl.Program("silu_and_mul")
    g, u = p.input("gate", "bf16"), p.input("up", "bf16")
    gf = g.load()                                   # bf16; ops widen it
    silu = gf / (1.0 + dsl.exp_libdevice(-gf))      # div_rn, add, neg: IEEE
    p.output("y", "bf16", dsl.round(dsl.round(silu, "bf16") * u.load(), "bf16"))
    text = p.text()

As in the C++ builders, bf16/f16 operands of arithmetic are widened with an
`extend` node each time they are used, Python numbers become `const` nodes,
and `+ - * /` are add, sub, mul, div_rn (never contracted; write fma_rn).
Rounding is always explicit (dsl.round). The op tables (OPS, INT_OPS)
mirror dsl/Ops.def (a CPU test checks them): a new op is one entry there
and here.

Index values (i32, docs/kernel-format.md "Index ops") come from
Program.row_index(), Program.col_index(), Program.iconst(n) and per_row
i32 inputs; the integer ops have the text format's names (iadd, isub,
imul, idiv, irem, icmp_lt ... icmp_ne, iselect, itof) and take Python ints
as iconst nodes (one node per value); dsl.gather(input, col) reads an input at a computed
column (NaN outside the row).
"""
import os
import re
import struct
import sys

__all__ = ["Program", "Value", "Input", "FoldOrder", "Combiner", "OPS", "INT_OPS", "DTYPES",
           "LAYOUTS", "round", "extend", "const", "rsqrt_cuda", "rcp_nvcc", "per_element",
           "per_column", "per_batch", "per_row", "vector", "gather"]

# Dtypes the format knows (i1: predicates, never stored; i32: index values,
# stored only by per_row inputs).
DTYPES = ("f32", "bf16", "f16", "i1", "f8e4m3fn", "f8e5m2", "i8", "i32")
LAYOUTS = ("row_major", "channels_last")
# Storage dtypes that `extend` widens and `round` narrows to.
_NARROW = ("bf16", "f16", "f8e4m3fn", "f8e5m2", "i8")

# op spelling -> (arity, type rule); the rules are dsl/Ops.h's TypeRule:
# arith: numbers (bf16/f16 widened) -> f32; compare: numbers -> i1;
# logic: i1 -> i1; select: (i1, number, number) -> f32.
OPS = {
    "neg": (1, "arith"), "abs": (1, "arith"), "sqrt_rn": (1, "arith"),
    "rcp_approx_ftz": (1, "arith"), "rsqrt_approx_ftz": (1, "arith"),
    "ex2_approx_ftz": (1, "arith"), "exp_libdevice": (1, "arith"),
    "log_libdevice": (1, "arith"), "tanh_libdevice": (1, "arith"),
    "erf_libdevice": (1, "arith"), "saturate": (1, "arith"),
    "add": (2, "arith"), "sub": (2, "arith"), "mul": (2, "arith"), "sub_ftz": (2, "arith"),
    "div_rn": (2, "arith"), "min_num": (2, "arith"), "max_num": (2, "arith"),
    "min_nan": (2, "arith"), "max_nan": (2, "arith"),
    "cmp_lt": (2, "compare"), "cmp_le": (2, "compare"), "cmp_gt": (2, "compare"),
    "cmp_ge": (2, "compare"), "cmp_eq": (2, "compare"), "cmp_ne": (2, "compare"),
    "and": (2, "logic"), "or": (2, "logic"), "not": (1, "logic"),
    "fma_rn": (3, "arith"), "select": (3, "select"),
}
_RESULT = {"arith": "f32", "compare": "i1", "logic": "i1", "select": "f32"}

# The index ops on i32 values (dsl/Ops.h's IntArith, IntCompare, IntSelect,
# IntToFloat): spelling -> (arity, rule); iselect takes (i1, i32, i32).
INT_OPS = {
    "iadd": (2, "int_arith"), "isub": (2, "int_arith"), "imul": (2, "int_arith"),
    "idiv": (2, "int_arith"), "irem": (2, "int_arith"),
    "icmp_lt": (2, "int_compare"), "icmp_le": (2, "int_compare"),
    "icmp_gt": (2, "int_compare"), "icmp_ge": (2, "int_compare"),
    "icmp_eq": (2, "int_compare"), "icmp_ne": (2, "int_compare"),
    "iselect": (3, "int_select"), "itof": (1, "int_to_float"),
}
_INT_RESULT = {"int_arith": "i32", "int_compare": "i1", "int_select": "i32",
               "int_to_float": "f32"}


def _f32_bits(x):
    """The bits of x rounded to f32 (ties to even), as the format prints them."""
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def _where():
    """file:line of the user code that called into this module."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f else "?"


def _check(cond, message):
    if not cond:
        raise ValueError(message)


class Value:
    """One node of a program (or of a combiner function)."""

    def __init__(self, graph, op, dtype, args=(), attr=None):
        self.graph, self.op, self.dtype, self.args, self.attr = graph, op, dtype, args, attr
        self.name, self.where = graph._add(self), _where()

    def line(self):
        ops = ", ".join(a.ref() for a in self.args)
        if self.op == "gather":
            return f"{self.ref()} = gather {self.attr}, {ops} : {self.dtype}"
        if self.op == "round":
            return f"{self.ref()} = round to {self.attr} {ops} : {self.dtype}"
        head = f"{self.op} {self.attr}" if self.attr is not None else self.op
        return f"{self.ref()} = {head}{' ' + ops if ops else ''} : {self.dtype}"

    def ref(self):
        return f"%{self.name}"

    # Python operators: IEEE f32 ops, as the C++ builders' operators.
    def __add__(self, o): return _apply("add", self, o)  # noqa: E704
    def __radd__(self, o): return _apply("add", o, self)  # noqa: E704
    def __sub__(self, o): return _apply("sub", self, o)  # noqa: E704
    def __rsub__(self, o): return _apply("sub", o, self)  # noqa: E704
    def __mul__(self, o): return _apply("mul", self, o)  # noqa: E704
    def __rmul__(self, o): return _apply("mul", o, self)  # noqa: E704
    def __truediv__(self, o): return _apply("div_rn", self, o)  # noqa: E704
    def __rtruediv__(self, o): return _apply("div_rn", o, self)  # noqa: E704
    def __neg__(self): return _apply("neg", self)  # noqa: E704


class _Graph:
    """Node names in creation order (the library renumbers them)."""

    def __init__(self):
        self.nodes = []
        self.iconsts = {}  # int -> its iconst node (_index)

    def _add(self, v):
        self.nodes.append(v)
        return f"v{len(self.nodes) - 1}"


def const(graph_of, x):
    """A `const` node (x rounded to f32) in the graph of value graph_of."""
    g = graph_of.graph if isinstance(graph_of, Value) else graph_of
    return Value(g, "const", "f32", attr=_f32_bits(x))


def _graph_of(operands):
    for o in operands:
        if isinstance(o, Value):
            return o.graph
    raise ValueError("an op needs at least one program value (not only Python numbers)")


def _number(g, o):
    """o as an f32 operand: numbers become consts, bf16/f16 are extended."""
    if not isinstance(o, Value):
        _check(isinstance(o, (int, float)), f"operand {o!r} is neither a value nor a number")
        return const(g, o)
    _check(o.graph is g, "operands from two different programs or functions")
    _check(o.dtype != "i1", f"{o.ref()} is a predicate (i1), not a number")
    _check(o.dtype != "i32", f"{o.ref()} is an index value (i32), not a number: convert it "
           "with itof")
    return extend(o) if o.dtype in _NARROW else o


def _index(g, o):
    """o as an i32 operand: a Python int becomes the graph's one iconst
    node of that value (as a text names one `%one` and reuses it; the
    canonical text counts nodes, not spellings)."""
    if not isinstance(o, Value):
        _check(isinstance(o, int) and not isinstance(o, bool) and -2**31 <= o < 2**31,
               f"index operand {o!r} is neither an i32 value nor an int in i32's range")
        if o not in g.iconsts:
            g.iconsts[o] = Value(g, "iconst", "i32", attr=o)
        return g.iconsts[o]
    _check(o.graph is g, "operands from two different programs or functions")
    _check(o.dtype == "i32", f"{o.ref()} is {o.dtype}, not an index value (i32): index ops "
           "take row_index, col_index, iconst, per_row i32 inputs and their arithmetic")
    return o


def _predicate(g, o):
    _check(isinstance(o, Value) and o.dtype == "i1",
           f"{getattr(o, 'ref', lambda: repr(o))()} must be a predicate (a cmp_* result)")
    _check(o.graph is g, "operands from two different programs or functions")
    return o


def _apply(op, *operands):
    arity, rule = OPS[op]
    _check(len(operands) == arity, f"{op} takes {arity} operands, not {len(operands)}")
    g = _graph_of(operands)
    if rule == "logic":
        args = tuple(_predicate(g, o) for o in operands)
    elif rule == "select":
        args = (_predicate(g, operands[0]),) + tuple(_number(g, o) for o in operands[1:])
    else:
        args = tuple(_number(g, o) for o in operands)
    return Value(g, op, _RESULT[rule], args)


def _op_function(op):
    name = op + "_" if op in ("and", "or", "not") else op  # Python keywords
    def fn(*operands):
        return _apply(op, *operands)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"The `{op}` op ({OPS[op][0]} operands; see docs/kernel-format.md)."
    return fn


for _op in OPS:  # dsl.add, dsl.exp_libdevice, ..., dsl.and_, dsl.or_, dsl.not_
    _fn = _op_function(_op)
    globals()[_fn.__name__] = _fn
    __all__.append(_fn.__name__)


def _apply_int(op, *operands):
    arity, rule = INT_OPS[op]
    _check(len(operands) == arity, f"{op} takes {arity} operands, not {len(operands)}")
    g = _graph_of(operands)
    if rule == "int_select":
        args = (_predicate(g, operands[0]),) + tuple(_index(g, o) for o in operands[1:])
    else:
        args = tuple(_index(g, o) for o in operands)
    return Value(g, op, _INT_RESULT[rule], args)


def _int_op_function(op):
    def fn(*operands):
        return _apply_int(op, *operands)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = (f"The `{op}` index op ({INT_OPS[op][0]} operands; docs/kernel-format.md "
                  "\"Index ops\"); Python ints become iconst nodes.")
    return fn


for _op in INT_OPS:  # dsl.iadd, ..., dsl.icmp_eq, dsl.iselect, dsl.itof
    globals()[_op] = _int_op_function(_op)
    __all__.append(_op)


def gather(input, col):  # noqa: A002 (the format's word)
    """Input `input` (a declared, row_major, not per_row Input) at column
    `col` (an i32 value or int) of the row its index map gives, widened to
    f32; NaN outside [0, cols)."""
    _check(isinstance(input, Input), f"gather reads a declared input, not {input!r}")
    _check(input.index != per_row, f"gather from {input.name}: a per_row input has one value "
           "per row (load it)")
    g = input.program._graph
    return Value(g, "gather", "f32", (_index(g, col),), attr=input.name)


def rsqrt_cuda(t):
    """CUDA's rsqrtf as nvcc compiles it: rsqrt.approx.ftz with the
    subnormal input rescaled by 2^24 (and the result by 2^12); the C++
    DSL's rsqrt_cuda."""
    small = _apply("cmp_lt", _apply("abs", t), float.fromhex("0x1p-126"))
    scaled = _apply("rsqrt_approx_ftz", t * 16777216.0) * 4096.0
    return _apply("select", small, scaled, _apply("rsqrt_approx_ftz", t))


def rcp_nvcc(d):
    """nvcc's 1.0f / d under its default flags in aten's Welford: the
    approximate reciprocal and one Newton step with fmas; the C++ DSL's
    rcp_nvcc."""
    r = _apply("rcp_approx_ftz", d)
    e = _apply("sub_ftz", -0.0, _apply("fma_rn", d, r, -1.0))
    return _apply("fma_rn", r, e, r)


def extend(v):
    """bf16/f16/f8e4m3fn/f8e5m2/i8 -> f32 (exact); an f32 value is returned
    as it is."""
    _check(isinstance(v, Value), f"extend takes a value, not {v!r}")
    _check(v.dtype in _NARROW + ("f32",), f"extend {v.ref()}: a {v.dtype} value is not a "
           "stored number" + (" (itof converts an index value)" if v.dtype == "i32" else ""))
    return v if v.dtype == "f32" else Value(v.graph, "extend", "f32", (v,))


def round(v, dtype):  # noqa: A001 (the DSL's name)
    """f32 -> bf16/f16/f8e4m3fn/f8e5m2/i8 as torch's .to() (round to
    nearest even; i8 toward zero, docs/kernel-format.md)."""
    _check(dtype in _NARROW, f"round to {dtype!r}: one of {_NARROW}")
    return Value(v.graph, "round", dtype, (_number(v.graph, v),), attr=dtype)


# ---- index maps, inputs -----------------------------------------------------------

per_element, per_column = "per_element", "per_column"
# One value per row: an output (fold results and expressions of them), or
# an input read once per row (an i32 target index).
per_row = "per_row"


def per_batch(dim):
    """Row r reads row r / S of the operand (dim: a Program.dim name)."""
    return f"per_batch({dim})"


def vector(dim):
    """An input of D values (dim: a Program.dim name, set by the tensor's
    length), read only by dsl.gather at an index in [0, D): a per-channel
    parameter such as GroupNorm's gamma."""
    return f"vector({dim})"


class Input:
    """A declared input; load() is its value at the current (row, column)."""

    def __init__(self, program, name, dtype, layout, index, align):
        self.program, self.name, self.dtype = program, name, dtype
        self.layout, self.index, self.align = layout, index, align

    def load(self):
        _check(not self.index.startswith("vector("), f"input {self.name} is a vector: read it "
               "with dsl.gather at an index")
        return Value(self.program._graph, "load", self.dtype, attr=self.name)

    def decl(self):
        align = f" align {self.align}" if self.align else ""
        return f"input {self.name} : {self.dtype} {self.layout} {self.index}{align}"


# ---- folds -------------------------------------------------------------------------

class FoldOrder:
    """Lane assignment and merge tree: `threads` lanes push `vector`
    elements each (lane t owns vectors t, t+T, ...); stages are
    ("shfl_down" | "bfly_xor" | "cross_warp", offset) pairs."""

    def __init__(self, name, threads, vector, stages, extension=None):
        """extension: aten's generic-reduction fields (docs/aten-reduce.md),
        a dict of accumulators, map ("by-element" | "round-robin"),
        aligned, ctas, final (stages), rows ((min, max))."""
        self.name, self.threads, self.vector, self.stages = name, threads, vector, list(stages)
        self.extension = extension

    def text(self):
        stages = ", ".join(f"{k} {o}" for k, o in self.stages)
        text = f"order {self.name} threads {self.threads} vector {self.vector} stages [{stages}]"
        e = self.extension
        if e:
            final = ", ".join(f"{k} {o}" for k, o in e.get("final", ()))
            lo, hi = e.get("rows", (1, 2147483647))
            text += (f" accumulators {e.get('accumulators', 1)} {e.get('map', 'round-robin')}"
                     f"{' aligned' if e.get('aligned') else ''} ctas {e.get('ctas', 1)} "
                     f"final [{final}] rows {lo}..{hi}")
        return text

    @staticmethod
    def serial():
        return FoldOrder("serial", 1, 1, [])

    @staticmethod
    def warp_butterfly(vector):
        return FoldOrder("warp_butterfly", 32, vector, [("bfly_xor", 1 << i) for i in range(5)])


class Combiner:
    """A fold's state machine as DSL code: fields, their empty values, and
    push(fields..., x), combine(self..., other...), finish(fields...)
    written as Python functions of Values, each returning a tuple."""

    def __init__(self, name, fields, empty, results, push, combine, finish):
        self.name, self.fields, self.empty, self.results = name, list(fields), list(empty), \
            list(results)
        self.push, self.combine, self.finish = push, combine, finish

    def text(self):
        n = len(self.fields)
        empty = ", ".join(_f32_bits(e) for e in self.empty)
        lines = [f"  combiner {self.name} ({', '.join(self.fields)}) empty ({empty}) "
                 f"results ({', '.join(self.results)})"]
        for fn_name, fn, nargs in (("push", self.push, n + 1), ("combine", self.combine, 2 * n),
                                   ("finish", self.finish, n)):
            g = _Graph()
            args = [Value(g, "arg", "f32", attr=i) for i in range(nargs)]
            outs = fn(*args)
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            lines.append(f"    {fn_name}:")
            lines += [f"      {v.line()}" for v in g.nodes]
            lines.append("      return " + ", ".join(_number(g, o).ref() for o in outs))
        return "\n".join(lines)


class _Fold:
    def __init__(self, index, value, order, combiner):
        self.index, self.value, self.order, self.combiner = index, value, order, combiner
        self.where = _where()

    def line(self):
        return (f"fold {self.index} of {self.value.ref()} {self.order.text()}\n"
                f"{self.combiner.text()}")


# ---- the program -------------------------------------------------------------------

class Program:
    """A row program: declarations, then body values, folds and outputs.
    guard: (cols multiple of, min cols, max cols) the program copies the
    reference for."""

    def __init__(self, name, guard=(1, 1, 16777216), groups=1):
        self.name, self.guard, self.groups = name, tuple(guard), groups
        self.dims, self.inputs, self.scalars, self.outputs = [], [], [], []
        self._graph, self._folds, self._items = _Graph(), [], []
        self._output_where = {}

    def dim(self, name):
        self.dims.append(name)
        return name

    def input(self, name, dtype, layout="row_major", index=per_element, align=None):
        """index=per_row: one value per row (dtype i32 for an index such as
        a target class); i32 inputs are per_row."""
        _check(dtype in DTYPES and dtype != "i1", f"input {name}: dtype {dtype!r}")
        _check(dtype != "i32" or index == per_row, f"input {name}: an i32 input is per_row")
        _check(layout in LAYOUTS, f"input {name}: layout {layout!r} (one of {LAYOUTS})")
        i = Input(self, name, dtype, layout, index, align)
        self.inputs.append(i)
        return i

    def scalar(self, name, default=None):
        """An f32 given per launch (default: the value used when none is)."""
        self.scalars.append((name, default))
        return Value(self._graph, "scalar", "f32", attr=name)

    def row_index(self):
        """The row within its group (i32)."""
        return Value(self._graph, "row_index", "i32")

    def col_index(self):
        """The element's column (i32)."""
        return Value(self._graph, "col_index", "i32")

    def iconst(self, n):
        """An i32 constant."""
        return _index(self._graph, n)

    def dim_index(self, name):
        """`dim cols`, `dim rows` or a declared dim as an index value (i32)."""
        return Value(self._graph, "dim", "i32", attr=name)

    def dim_value(self, name):
        """`dim cols`, `dim rows` or a declared dim, as an f32 value."""
        return Value(self._graph, "dim", "f32", attr=name)

    def fold(self, value, order, combiner):
        """Reduces value over the row; returns {result name: per-row value}."""
        f = _Fold(len(self._folds), _number(self._graph, value), order, combiner)
        self._folds.append(f)
        self._items.append(f)
        return {r: Value(self._graph, "fold_value", "f32", attr=f"{f.index}.{r}")
                for r in combiner.results}

    def output(self, name, dtype, value, layout="row_major", align=None, index=per_element):
        """index=per_row: one value per row (a [rows] tensor), from fold
        results, scalars, dims and constants; a list of k such values is
        per_row(k), a [rows, k] tensor (e.g. [mean, rstd])."""
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        _check(len(values) == 1 or index == per_row, f"output {name}: {len(values)} values "
               "per row need index=per_row")
        _check(values, f"output {name}: per_row needs at least one value")
        for v in values:
            _check(v.dtype == dtype, f"output {name} : {dtype} = {v.ref()} of dtype "
                   f"{v.dtype}: round it (dsl.round) or extend it first")
        _check(index in (per_element, per_row), f"output {name}: index {index!r}: "
               "per_element or per_row")
        self.outputs.append((name, dtype, layout, align, values, index))
        self._output_where[name] = _where()

    def text(self):
        """The program in the kernel text format."""
        m, lo, hi = self.guard
        lines = [f"bitfold.row_program {self.name} v1", f"groups {self.groups}",
                 f"guard cols % {m} == 0, {lo} <= cols <= {hi}"]
        lines += [f"dim {d}" for d in self.dims]
        lines += [i.decl() for i in self.inputs]
        lines += [f"scalar {n} : f32" + ("" if d is None else f" default {_f32_bits(d)}")
                  for n, d in self.scalars]
        lines.append("body:")
        # Folds go before the first node that reads them (creation order
        # already has every operand before its user).
        folds = {f"{f.index}": f for f in self._folds}
        for v in self._graph.nodes:
            if v.op == "fold_value":
                f = folds.pop(v.attr.split(".")[0], None)
                if f is not None:
                    lines.append("  " + f.line())
            lines.append("  " + v.line())
        for name, dtype, layout, align, values, index in self.outputs:
            width = f"({len(values)})" if len(values) > 1 else ""
            lines.append(f"  output {name} : {dtype} {layout}" +
                         (f" per_row{width}" if index == per_row else "") +
                         (f" align {align}" if align else "") + " = " +
                         ", ".join(v.ref() for v in values))
        return "\n".join(lines) + "\n"

    def explain(self, message):
        """A library error about this program's text with the Python line
        that built the node, fold or output it names appended."""
        where = None
        m = re.match(r"<source>:(\d+):\d+", message)
        if m:
            line = int(m.group(1))
            text = self.text().splitlines()
            if 0 < line <= len(text):
                ref = re.match(r"\s*(%\w+) =", text[line - 1])
                out = re.match(r"\s*output (\w+)", text[line - 1])
                nodes = {v.ref(): v for v in self._graph.nodes}
                if ref and ref.group(1) in nodes:
                    where = nodes[ref.group(1)].where
                elif out:
                    where = self._output_where.get(out.group(1))
        m = re.search(r"fold (\d+)", message)
        if where is None and m and int(m.group(1)) < len(self._folds):
            where = self._folds[int(m.group(1))].where
        m = re.search(r"output '?(\w+)", message)
        if where is None and m:
            where = self._output_where.get(m.group(1))
        return message if where is None else f"{message} (built at {where})"

    def signature(self):
        """What a torch op needs: inputs [(name, dtype, layout)], scalars
        [(name, default)], outputs [(name, dtype, layout, index)]."""
        return ([(i.name, i.dtype, i.layout, i.index) for i in self.inputs], list(self.scalars),
                [(n, d, lay, ix) for n, d, lay, _, _, ix in self.outputs])
