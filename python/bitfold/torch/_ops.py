"""The host path every op shares (`call`): guards, launch through
bitfold_launch_raw, fallback to the eager chain, verify="once", counters.
The ops themselves are entries of _table.py (`Op`).

Host cost is the point of this file. The first call of an op at a layout
(dtypes, shapes, strides and devices of every operand, and the scalars)
takes the checked path: guards, kernel lookup, metadata packed, launch,
verification. It leaves a prepared launcher in the op's site table, and
later calls at that layout are one key build, one dict lookup, one
torch.empty_like, the addresses packed and one ctypes call. Everything the
C API validates per launch (shapes, strides, alignment of each address,
dtypes, column guards) stays with it, every call: its rejection sends the
call back to the checked path, which falls back to the eager chain with the
C message as the reason. A refusal that the layout alone decides is
remembered in the site table too, so the next call at that layout runs the
eager chain at once (counted in stats(), warned once).
"""
import ctypes
import struct
import threading
import time
import warnings

import torch

import bitfold
from . import _eager, _fast

_BF16, _F16, _F32 = torch.bfloat16, torch.float16, torch.float32
_DT_NAME = {_BF16: "bf16", _F16: "f16", _F32: "f32"}
_DT_WORD = {dt: bitfold.DTYPE_WORDS[n] for dt, n in _DT_NAME.items()}
# Every dtype a program may declare (user kernels: i32 per-row indices,
# int8/uint8 and float8 storage): the launch metadata's words. Whether a
# kernel takes a tensor's dtype is the library's check.
_WORD = dict(_DT_WORD)
for _t, _n in (("int32", "i32"), ("int8", "i8"), ("uint8", "u8"),
               ("float8_e4m3fn", "f8e4m3fn"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _t):
        _WORD[getattr(torch, _t)] = bitfold.DTYPE_WORDS[_n]

# Test hook: the fake libcuda of the CPU tests treats host memory as device
# memory, so CPU tensors may be launched there. Never set it with a real
# driver (a kernel would read host addresses).
_ALLOW_HOST = False

_lock = threading.RLock()


class _Config:
    mode = "auto"      # "auto": fall back to eager; "strict": raise
    verify = "off"     # "off" | "once"


config = _Config()


class BitfoldFallback(RuntimeError):
    """Raised in strict mode where the auto mode would have used eager."""


_stats = {}
_warned = set()
_disabled = {}     # op -> message of the mismatch that disabled it
_verified = set()  # (op, class key) compared equal
# op -> {layout key: (launcher, verified)}: the prepared fast path (see
# _prepare). Cleared with the stats and when verify disables the op.
_sites = {}
_MAX_SITES = 1024  # per op; a full table starts over


def _op_stats(op):
    s = _stats.get(op)
    if s is None:
        with _lock:
            s = _stats.setdefault(op, {"launches": 0, "fallbacks": {}, "verified": 0,
                                       "mismatches": 0, "compiling": 0})
    return s


def stats():
    """Per op used since reset_stats: launches, fallbacks by reason, calls
    served by the eager chain while their kernel compiled in the background
    (compiling), verified classes, mismatches, and whether verify disabled
    it."""
    with _lock:
        out = {}
        for op, s in _stats.items():
            if not (s["launches"] or s["fallbacks"] or s["verified"] or s["compiling"]
                    or op in _disabled):
                continue  # unused since reset_stats
            out[op] = {"launches": s["launches"], "fallbacks": dict(s["fallbacks"]),
                       "compiling": s["compiling"],
                       "verified": s["verified"], "mismatches": s["mismatches"],
                       "disabled": _disabled.get(op)}
        return out


def reset_stats():
    """Clears counters, warn-once memory, verified classes, disabled ops and
    the prepared launchers."""
    with _lock:
        for s in _stats.values():  # in place: prepared launchers count into them
            s.update(launches=0, fallbacks={}, verified=0, mismatches=0, compiling=0)
        _warned.clear()
        _disabled.clear()
        _verified.clear()
        for table in _sites.values():
            table.clear()


def set_async_compile(on):
    """The default runtime's compile mode from now on (configure's
    async_compile): also switches a default runtime made already."""
    bitfold._async_choice = on
    rt = bitfold._default
    if rt is not None and hasattr(rt, "set_async_compile"):
        rt.set_async_compile(on)
        rt.set_quick_first(bitfold.default_quick_first(on))


def wait_for_compiles():
    """Returns once the default runtime has no background compile pending
    (before timing, or before a CUDA graph capture of new shapes): its
    {pending, done, failed} counts, or None after a failed compile (the op
    reports that at its next call at the shape, as a "compile" fallback)."""
    return _wait(bitfold._default)


def _wait(rt):
    wait = getattr(rt, "prewarm_status", None)
    if wait is None:
        return None
    try:
        return wait(wait=True)
    except bitfold.BitfoldError:
        return None


def _when_ready(rt, launch):
    """launch() once its shape class has compiled: polled, so the caller
    waits for its own class's compile only, not for every compile the
    runtime has queued (other ops' classes, the upgrade from a quick
    config to the chosen one). Where the runtime cannot say what is
    pending (none, or a compile failed somewhere), after _wait."""
    delay = 2e-4
    while True:
        try:
            return launch()
        except bitfold.NotReady:
            pass
        try:
            status = rt.prewarm_status() if rt is not None else None
        except bitfold.BitfoldError:
            status = None
        if status is None or status.get("pending", 0) == 0:
            _wait(rt)
            return launch()
        time.sleep(delay)
        delay = min(2 * delay, 5e-3)


def _site_table(op):
    t = _sites.get(op)
    if t is None:
        with _lock:
            t = _sites.setdefault(op, {})
    return t


def _warn_once(key, message):
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=6)  # the op's caller


def _fallback(op, reason, detail, mode):
    """Counts and warns (once per op and reason); raises in strict mode."""
    if (mode or config.mode) == "strict":
        raise BitfoldFallback(f"bitfold.torch.{op}: {reason}: {detail}")
    s = _op_stats(op)
    with _lock:
        s["fallbacks"][reason] = s["fallbacks"].get(reason, 0) + 1
    _warn_once((op, reason), f"bitfold.torch.{op}: eager fallback ({reason}): {detail}")


def _guard(tensors, words=_DT_WORD):
    """(reason, detail) for inputs the kernel path does not take (words: the
    dtypes x may have, the stock ops' floats by default)."""
    x = tensors[0]
    if x.dtype not in words:
        names = ", ".join(str(t).replace("torch.", "") for t in words)
        return "dtype", f"{x.dtype} (this op's kernels take {names})"
    for t in tensors:
        if t.device != x.device:
            return "device", f"tensors on {x.device} and {t.device}"
    if not x.is_cuda and not _ALLOW_HOST:
        return "device", f"{x.device} tensor (bitfold runs on CUDA)"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "requires_grad", "bitfold ops have no autograd; eager keeps the graph"
    if x.numel() == 0:
        return "empty", f"an empty tensor of shape {tuple(x.shape)}"
    if any(t.is_neg() for t in tensors):
        return "unsupported", ("a negative-bit view (lazy negation, such as z.conj().imag): "
                               "its memory holds the values negated")
    return "unknown", "no guard matched"


_grad_enabled = torch.is_grad_enabled


def _ready(tensors, words=_DT_WORD):
    """(CUDA ordinal, None) when the kernel path may run (checks kept to
    what the C API cannot see), else (None, (reason, detail))."""
    x = tensors[0]
    dev = x.get_device()
    if x.dtype in words and (dev >= 0 or _ALLOW_HOST) and x.numel():
        for t in tensors:
            if t.get_device() != dev or t.is_neg():
                break
        else:
            if not _grad_enabled() or not _needs_grad(tensors):
                return (dev if dev > 0 else 0), None
    return None, _guard(tensors, words)


def _needs_grad(tensors):
    for t in tensors:
        if t.requires_grad:
            return True
    return False


def _key(ts, scalar):
    """The site key of operands ts and a scalar: what the launch metadata
    and the kernel choice are a function of, and each tensor's negative bit
    (a lazily negated view is refused, not launched on its raw memory);
    unrolled: this is most of a warm call's Python time."""
    if len(ts) == 4:  # a 3-operand op with out=
        a, b, c, d = ts
        return (scalar, a.dtype, a.shape, a.stride(), a.get_device(), a.is_neg(),
                b.dtype, b.shape, b.stride(), b.get_device(), b.is_neg(),
                c.dtype, c.shape, c.stride(), c.get_device(), c.is_neg(),
                d.dtype, d.shape, d.stride(), d.get_device(), d.is_neg())
    if len(ts) == 3:
        a, b, c = ts
        return (scalar, a.dtype, a.shape, a.stride(), a.get_device(), a.is_neg(),
                b.dtype, b.shape, b.stride(), b.get_device(), b.is_neg(),
                c.dtype, c.shape, c.stride(), c.get_device(), c.is_neg())
    if len(ts) == 2:
        a, b = ts
        return (scalar, a.dtype, a.shape, a.stride(), a.get_device(), a.is_neg(),
                b.dtype, b.shape, b.stride(), b.get_device(), b.is_neg())
    key = (scalar,)
    for t in ts:
        key += (t.dtype, t.shape, t.stride(), t.get_device(), t.is_neg())
    return key


def _key_source(names, tag, out):
    """Source of an expression: the site key (what _key(ts, scalar) gives)
    of a call whose operands are the expressions `names`, plus the variable
    `out` where it is not None (out None: no out= operand); tag is the
    key's scalar part as source text."""
    def key(names):
        fields = "".join(f" {t}.dtype, {t}.shape, {t}.stride(), {t}.get_device(), "
                         f"{t}.is_neg()," for t in names)
        return f"({tag},{fields})"
    if out is None:
        return key(names)
    return f"({key(names)} if {out} is None else {key(names + [out])})"


def _key_function(ins, tag, tag_of):
    """key(a, o): the site key of a call. Where ins is _ins(n) (its first n
    arguments, `count`), one generated expression (no calls into ins and
    _key: a warm call's host time); else _key(ins(a, o), tag_of(a)). tag:
    an argument's index or a function; tag_of: the function either way."""
    src = key_source(ins, tag)
    if src is None:
        return lambda a, o: _key(ins(a, o), tag_of(a))
    scope = {"_tag": tag_of}
    exec(compile(f"def key(a, o):\n    return {src}\n", "<bitfold.torch key>", "exec"),
         scope)
    return scope["key"]


def chain_source(op):
    """How a generated body calls op's eager chain: the stock chain of the
    moment, looked up inline (`_E` is _eager in the body's scope), else
    op.eager."""
    return getattr(op.eager, "source", "_op.eager")


def key_source(ins, tag, out="o", args=None):
    """The site key as one expression over the arguments (`args`, their
    names; else a[i]) and the variable `out` (None: no out=), calling `_tag`
    where tag is a function; None where ins is not _ins(n)."""
    n = getattr(ins, "count", None)
    if n is None:
        return None
    def arg(i):
        return args[i] if args else f"a[{i}]"
    return _key_source([arg(i) for i in range(n)],
                       arg(tag) if isinstance(tag, int) else "_tag(a)", out)


def _packer(n):
    """addresses(ts) -> the n data pointers as bytes (unrolled for 2-5)."""
    pack = struct.Struct(f"{n}Q").pack
    if n == 2:
        return lambda ts: pack(ts[0].data_ptr(), ts[1].data_ptr())
    if n == 3:
        def p3(ts):
            a, b, c = ts
            return pack(a.data_ptr(), b.data_ptr(), c.data_ptr())
        return p3
    if n == 4:
        def p4(ts):
            a, b, c, d = ts
            return pack(a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr())
        return p4
    if n == 5:
        def p5(ts):
            a, b, c, d, e = ts
            return pack(a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr(), e.data_ptr())
        return p5
    return lambda ts: pack(*[t.data_ptr() for t in ts])


_packers = {n: _packer(n) for n in range(1, 17)}


def _meta_words(tensors, dev):
    words = []
    for t in tensors:
        words += (_WORD.get(t.dtype, 0) | dev << 32, t.dim())
        words += t.shape
        words += t.stride()
    return struct.pack(f"{len(words)}q", *words), len(words)


_f32 = struct.Struct("f")
_no_scalars = b""

if hasattr(torch._C, "_cuda_getCurrentRawStream"):
    _raw_stream = torch._C._cuda_getCurrentRawStream
else:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


_streams = {0: None}


def _stream_arg(stream):
    """The stream as an untyped ctypes argument: c_void_p (a bare int would
    be passed as a C int), cached per handle; the legacy stream 0 is None."""
    arg = _streams.get(stream)
    if arg is None and stream:
        if len(_streams) > 1024:
            _streams.clear()
            _streams[0] = None
        arg = _streams[stream] = ctypes.c_void_p(stream)
    return arg


class _Prepared:
    """A bitfold_prepare_raw handle, destroyed with this object."""
    __slots__ = ("handle", "_destroy")

    def __init__(self, kernel, n, meta, nmeta, scalars):
        lib, h = kernel.lib, ctypes.c_void_p()
        self._destroy = None
        bitfold._check(lib, lib.bitfold_prepare_raw(kernel.handle, n, meta, nmeta, scalars,
                                                    len(scalars) >> 2, ctypes.byref(h)))
        self.handle, self._destroy = h, lib.bitfold_prepared_destroy

    def __del__(self):
        if self._destroy is not None:
            self._destroy(self.handle)


def _prepare(op, kernel, tensors, meta, scalars, dev):
    """A launcher for operands laid out as `tensors` are now (dtypes,
    shapes, strides, devices): launch(ts) queues the kernel on the current
    stream with ts's addresses and returns True, or returns False having
    launched nothing (grad needed, or the C API rejected the launch): the
    caller takes the checked path. Inside a CUDA graph capture it is
    captured like any other launch (the runtime relaxes the capture mode
    around what a first launch loads). None where the library has no
    prepared launches (each call takes the checked path)."""
    lib, n = kernel.lib, len(tensors)
    if getattr(lib, "bitfold_prepare_raw", None) is None:
        return None
    prepared = _Prepared(kernel, n, meta[0], meta[1], scalars)
    # Untyped: ctypes converts bytes and c_void_p arguments fastest so.
    c, handle = lib["bitfold_launch_prepared"], prepared.handle
    addresses = _packers[n]
    grad, raw_stream, stream_arg = _grad_enabled, _raw_stream, _streams
    cuda = tensors[0].is_cuda
    counts = _op_stats(op)  # reset in place by reset_stats

    def launch(ts):
        if grad() and _needs_grad(ts):
            return False
        if not cuda:
            sarg = None
        else:
            s = raw_stream(dev)
            try:
                sarg = stream_arg[s]
            except KeyError:
                sarg = _stream_arg(s)
        if c(handle, addresses(ts), sarg):
            return False
        counts["launches"] += 1
        return True
    launch.prepared = prepared  # lives as long as the launcher
    launch.address = _fast.function_address(c)  # the C path calls it directly
    return launch


def _launch(op, kernel, tensors, scalars, dev):
    """Launches on the current stream (raises bitfold.BitfoldError); returns
    the prepared launcher for later calls at this layout."""
    meta, nmeta = _meta_words(tensors, dev)
    launch = _prepare(op, kernel, tensors, (meta, nmeta), scalars, dev)
    data = _packers[len(tensors)](tensors)
    stream = _raw_stream(dev) if tensors[0].is_cuda else 0
    kernel.launch_raw(data, meta, nmeta, len(tensors), scalars, stream or None)
    return launch


def _kernels(name, param_fn, operands=None):
    """A per-variant kernel lookup bound to the default runtime. operands
    (variant -> tensor names) checks the template's operand order once per
    kernel: a template that differs is refused (BitfoldError), not
    launched with its operands mixed up."""
    cache = {}

    def get(key):
        k = cache.get(key)
        if k is None:
            k = bitfold.default_runtime().kernel(name, param_fn(key))
            want = operands(key) if operands else None
            if want is not None and list(k.tensor_names) != list(want):
                raise bitfold.BitfoldError(
                    "BITFOLD_ERROR_UNSUPPORTED",
                    f"{name} ({k.params}) has operands {k.tensor_names}, bitfold.torch "
                    f"passes {list(want)}")
            cache[key] = k
        return k
    return get


def _first_difference(out, ref):
    a, b = out.reshape(-1), ref.reshape(-1)
    if a.dtype != b.dtype or a.shape != b.shape:
        return -1
    ia = a.view(torch.int16 if a.element_size() == 2 else torch.int32)
    ib = b.view(torch.int16 if b.element_size() == 2 else torch.int32)
    diff = (ia != ib) & ~(torch.isnan(a) & torch.isnan(b))
    idx = diff.nonzero()
    return int(idx[0]) if idx.numel() else None


def _verify(op, key, outs, refs):
    """True if outs equal refs bit for bit (NaN where NaN); else disables op."""
    for o, r in zip(outs, refs):
        if o.shape != r.shape or o.dtype != r.dtype:
            idx, where = -1, f"shape/dtype {tuple(o.shape)}/{o.dtype} vs {tuple(r.shape)}/{r.dtype}"
        else:
            idx = _first_difference(o, r)
            where = None if idx is None else (
                f"first differing flat index {idx}: bitfold {o.reshape(-1)[idx].item()!r} "
                f"vs eager {r.reshape(-1)[idx].item()!r}")
        if idx is not None:
            msg = f"verify mismatch at {key}: {where}; {op} disabled for this process"
            with _lock:
                _disabled[op] = msg
                _op_stats(op)["mismatches"] += 1
                _site_table(op).clear()
            _warn_once((op, "mismatch"), f"bitfold.torch.{op}: {msg}")
            return False
    with _lock:
        _verified.add(key)
        _op_stats(op)["verified"] += 1
    return True


# ---- one call of any op ---------------------------------------------------------
# An op is one Op entry (_table.py): what its operands, key, outputs, kernel
# and eager chain are. call() is the whole host path, for every op.

class Op:
    """One op as data: the pieces call() needs. Each is a function of the
    call's arguments `a` (the op's parameters, in order) and, where named,
    the caller's `out` or the site's `aux`."""

    def __init__(self, name, args, returns="Tensor", *, ins, tag, variant, params, alloc,
                 width, scalars=None, operands=None, refuse=None, aux=None, check=None,
                 out=True, custom_result=None, eager=None, kernel=None, doc="", label=None,
                 lookup=None, diagnose=None, explain=None, dtypes=_DT_WORD):
        self.name, self.args, self.returns, self.doc = name, args, returns, doc
        self.label = label or name  # stats, sites and messages: "ns::op" for user ops
        self.ins, self.variant, self.alloc, self.width = ins, variant, alloc, width
        # tag: the key's scalar part, a function of a or an argument's index.
        self.tag_arg = tag
        self.tag = (lambda a: a[tag]) if isinstance(tag, int) else tag
        self.key = _key_function(ins, tag, self.tag)
        self.scalars = scalars or (lambda a: _no_scalars)
        self.refuse = refuse or (lambda a: None)
        self.aux = aux or (lambda a: None)
        self.check, self.explain, self.out = check, explain, out
        self.dtypes = dtypes  # what x may be (the library checks the rest)
        self.custom_result = custom_result or (lambda r: r.contiguous())
        # eager: the chain of the same name in _eager.py (stock ops), the
        # user's fallback, or None (user ops without one: diagnose raises).
        self.eager = eager if eager is not None or lookup else _eager_chain(name)
        self.kernel, self.params, self.operands = kernel or name, params, operands
        self.sites = _site_table(self.label)
        self.fake, self.diagnose, self._lookup = None, diagnose, lookup
        self.new_kernels()

    def remembered(self, a, out=None, mode=None):
        """Whether a call on arguments a is a remembered refusal (then it is
        counted as the call's fallback, or raised in strict mode): for
        callers with a cheaper eager form of their own (an in-place epilogue)."""
        ent = self.sites.get(self.key(a, out))
        if ent is None or ent[0] is not None:
            return False
        _count_refusal(self, ent, mode)
        return True

    def new_kernels(self):
        """A fresh kernel lookup on the default runtime (tests swap runtimes)."""
        self.kernels = self._lookup or _kernels(self.kernel, self.params, self.operands)


def _eager_chain(name):
    """_eager.<name>, looked up per call (off the warm path), so a test may
    replace the chain verify compares against."""
    def eager(*a):
        return getattr(_eager, name)(*a)
    eager.__name__ = name
    eager.source = f"_E.{name}"  # the same, inline in generated bodies (_E: _eager)
    return eager


# Refusals decided by what the site key holds (dtypes, shapes, strides,
# devices, scalars): remembered per site, so the next call at that layout
# goes straight to eager. Not remembered: requires_grad (grad mode changes),
# alignment (the addresses are not in the key), driver errors, "disabled".
_REMEMBERED = frozenset(("dtype", "device", "empty", "shape", "stride", "unsupported",
                         "unknown_template", "compile", "no_driver", "no library",
                         "invalid_argument"))


def call(op, a, out, verify, mode, key=None):
    """The op on arguments a: a site hit launches its prepared launcher (or,
    for a remembered refusal, runs eager at once); else the checked path.
    key: op.key(a, out), where the caller computed it inline."""
    if key is None:
        key = op.key(a, out)
    return hit(op, a, out, verify, mode, key, op.sites.get(key))


def hit(op, a, out, verify, mode, key, ent):
    """call() once the site entry ent of key is known (None: no site yet)."""
    if ent is not None:
        launch = ent[0]
        if launch is None:
            fallbacks = ent[3]
            if fallbacks is None or mode is not None or config.mode != "auto":
                return _into(out, _refused_again(op, ent, a, mode))
            # Counted, already warned, auto mode: straight to the chain (a
            # refused call should cost eager plus the lookup, no more).
            fallbacks[ent[1]] = fallbacks.get(ent[1], 0) + 1
            r = op.eager(*a)
            return r if out is None else out.copy_(r)
        if ent[1] or (verify or config.verify) != "once":
            outs, ts = op.alloc(a, out, ent[2])
            if launch(ts):
                return outs[0] if len(outs) == 1 else outs
    return _checked(op, a, key, out, verify, mode)


def hit_source(key, out, mode, chain, result=lambda r: r):
    """Source lines (indented 4) that start a generated op body whose site
    key is the expression `key` (key_source): the key `k`, the site entry
    `ent`, and hit()'s first case inline, a remembered refusal in auto mode
    served by the chain at once (counted into the entry's counts), so that a
    refused call costs its chain, the key and a few tests. The body goes on
    with `_hit(_op, a, ..., k, ent)`. out / mode: the variables of out= and
    mode= (None: the body has none); chain: the source calling the op's
    eager chain (op.eager, or its `source` where set); result(r): the
    returned expression."""
    r = "r" if out is None else f"(r if {out} is None else {out}.copy_(r))"
    test = "ent[3] is not None" + ("" if mode is None else f" and {mode} is None")
    return (f"    k = {key}\n    ent = _sites.get(k)\n"
            f"    if ent is not None and ent[0] is None and {test} "
            "and _config.mode == 'auto':\n"
            "        c = ent[3]\n        c[ent[1]] = c.get(ent[1], 0) + 1\n"
            f"        r = {chain}(*a)\n        return {result(r)}\n")


def _count_refusal(op, ent, mode):
    """A remembered refusal: counted (warned at the first), or raised in
    strict mode."""
    if (mode or config.mode) == "strict":
        raise BitfoldFallback(f"bitfold.torch.{op.label}: {ent[1]}: {ent[2]}")
    counts = _op_stats(op.label)["fallbacks"]
    counts[ent[1]] = counts.get(ent[1], 0) + 1
    if (op.label, ent[1]) not in _warned:  # first refused in strict mode, say
        _warn_once((op.label, ent[1]), f"bitfold.torch.{op.label}: eager fallback "
                   f"({ent[1]}): {ent[2]}")


def _refused_again(op, ent, a, mode):
    """The eager result of a remembered refusal (counted or raised)."""
    if op.diagnose is not None:
        op.diagnose(a, ent[1:3])  # an op without an eager chain: raises
    _count_refusal(op, ent, mode)
    return op.eager(*a)


_NOT_READY = "not ready"


def _checked(op, a, key, out, verify, mode):
    """Guards, launch, verify-once, and the site prepared or the refusal
    remembered; eager wherever the kernel path refuses."""
    name = op.label
    if name in _disabled:
        _fallback(name, "disabled", _disabled[name], mode)
        return _into(out, op.eager(*a))
    ins = op.ins(a, out)
    dev, refusal = _ready(ins, op.dtypes)
    if refusal is None:
        refusal = op.refuse(a)
    if refusal is None:
        aux = op.aux(a)
        outs, ts = op.alloc(a, out, aux)
        res, refusal = _run(op, a, key, aux, ts, outs, dev, verify, mode)
        if res is not None:
            if out is not None and res[0] is not out:
                out.copy_(res[0])
            elif res is outs:
                _fast_launch_site(op, a, out, key)
            return res[0] if len(res) == 1 else tuple(res)
        if refusal[0] == _NOT_READY:
            # Async compile: eager (the same bits) serves this call while the
            # kernel compiles; not a refusal, nothing remembered.
            _op_stats(name)["compiling"] += 1
            return _into(out, op.eager(*a))
    if refusal[0] in _REMEMBERED:
        # The entry's fourth field is the fallback counts a later hit adds
        # to directly, set only where nothing else is owed on a hit: the
        # op has an eager chain and this refusal is warned (auto mode);
        # else the hit takes _refused_again.
        auto = op.diagnose is None and (mode or config.mode) == "auto"
        with _lock:  # never over a launcher: its layout was taken before
            if name not in _disabled and key not in op.sites:
                counts = _op_stats(name)["fallbacks"] if auto else None
                _store(op.sites, key, (None,) + tuple(refusal) + (counts,))
                c = counts is not None and out is None and \
                    _fast.refusal_site(a, op.eager, counts, refusal[0])
                if c:
                    _store(op.sites, *c)
    if op.diagnose is not None:
        op.diagnose(a, refusal)  # an op without an eager chain: raises
    _fallback(name, refusal[0], refusal[1], mode)
    return _into(out, op.eager(*a))


def _fast_launch_site(op, a, out, key):
    """The C part of the launcher site just stored under key (_fast.py)."""
    with _lock:
        ent = op.sites.get(key)
        if ent is None or ent[0] is None or op.label in _disabled:
            return
        c = _fast.launch_site(op, a, out, ent[2], ent[0], ent[1], _op_stats(op.label))
        if c:
            _store(op.sites, *c)


def _store(table, key, entry):
    if len(table) >= _MAX_SITES:
        table.clear()
    table[key] = entry


def _run(op, a, key, aux, tensors, outs, dev, verify, mode):
    """Launches op's kernel on tensors: (outs, None), (eager results after
    a verify mismatch, None), or (None, (reason, detail)) where the library
    refused; prepares the site for later calls."""
    name = op.label
    try:
        kernel = op.kernels(op.variant(a))
        try:
            launch = _launch(name, kernel, tensors, op.scalars(a), dev)
        except bitfold.NotReady as e:
            if op.eager is not None and not _capture_on(tensors[0]) \
                    and (mode or config.mode) != "strict":
                return None, (_NOT_READY, e.message)
            # No eager chain to serve the call, a CUDA graph capture (which
            # would keep the eager chain for good), or strict mode (never
            # eager): wait for it.
            launch = _when_ready(
                getattr(kernel, "rt", None),
                lambda: _launch(name, kernel, tensors, op.scalars(a), dev))
    except bitfold.BitfoldError as e:
        return None, (e.status.replace("BITFOLD_ERROR_", "").lower(), e.message)
    except OSError as e:  # libbitfold.so cannot be loaded
        return None, ("no library", str(e))
    _op_stats(name)["launches"] += 1
    x = tensors[0]
    vkey = (name, kernel.params, op.width(a), x.device)
    verified = vkey in _verified or op.eager is None  # nothing to compare with
    if not verified and (verify or config.verify) == "once" \
            and not (x.is_cuda and _capturing and _capturing()):
        refs = op.eager(*a)
        refs = refs if isinstance(refs, tuple) else (refs,)
        if not _verify(name, vkey, outs, refs):
            return refs, None
        verified = True
    with _lock:
        if launch is not None and name not in _disabled:
            _store(op.sites, key, (launch, verified, aux))
    return outs, None


def _capture_on(x):
    return x.is_cuda and _capturing is not None and _capturing()


def _into(out, result):
    """result, or result copied into the caller's `out`."""
    return result if out is None else out.copy_(result)
