"""The direct (eager) ops: guards, launch through bitfold_launch_raw,
fallback to the eager chain, verify="once", counters.

Host cost is the point of this file. The first call of an op at a layout
(dtypes, shapes, strides and devices of every operand, and the scalars)
takes the checked path: guards, kernel lookup, metadata packed, launch,
verification. It leaves a prepared launcher in the op's site table, and
later calls at that layout are one key build, one dict lookup, one
torch.empty_like, the addresses packed and one ctypes call. Everything the
C API validates per launch (shapes, strides, alignment of each address,
dtypes, column guards) stays with it, every call: its rejection sends the
call back to the checked path, which falls back to the eager chain with the
C message as the reason.
"""
import ctypes
import struct
import threading
import warnings

import torch

import bitfold
from . import _eager

_BF16, _F16, _F32 = torch.bfloat16, torch.float16, torch.float32
_DT_NAME = {_BF16: "bf16", _F16: "f16", _F32: "f32"}
_DT_WORD = {dt: bitfold.DTYPE_WORDS[n] for dt, n in _DT_NAME.items()}

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
                                       "mismatches": 0})
    return s


def stats():
    """Per op used since reset_stats: launches, fallbacks by reason,
    verified classes, mismatches, and whether verify disabled it."""
    with _lock:
        out = {}
        for op, s in _stats.items():
            if not (s["launches"] or s["fallbacks"] or s["verified"] or op in _disabled):
                continue  # unused since reset_stats
            out[op] = {"launches": s["launches"], "fallbacks": dict(s["fallbacks"]),
                       "verified": s["verified"], "mismatches": s["mismatches"],
                       "disabled": _disabled.get(op)}
        return out


def reset_stats():
    """Clears counters, warn-once memory, verified classes, disabled ops and
    the prepared launchers."""
    with _lock:
        for s in _stats.values():  # in place: prepared launchers count into them
            s.update(launches=0, fallbacks={}, verified=0, mismatches=0)
        _warned.clear()
        _disabled.clear()
        _verified.clear()
        for table in _sites.values():
            table.clear()


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
    warnings.warn(message, RuntimeWarning, stacklevel=5)  # the op's caller


def _fallback(op, reason, detail, mode):
    """Counts and warns (once per op and reason); raises in strict mode."""
    if (mode or config.mode) == "strict":
        raise BitfoldFallback(f"bitfold.torch.{op}: {reason}: {detail}")
    s = _op_stats(op)
    with _lock:
        s["fallbacks"][reason] = s["fallbacks"].get(reason, 0) + 1
    _warn_once((op, reason), f"bitfold.torch.{op}: eager fallback ({reason}): {detail}")


def _guard(tensors):
    """(reason, detail) for inputs the kernel path does not take."""
    x = tensors[0]
    if x.dtype not in _DT_WORD:
        return "dtype", f"{x.dtype} (bitfold has bf16, f16, f32)"
    for t in tensors:
        if t.device != x.device:
            return "device", f"tensors on {x.device} and {t.device}"
    if not x.is_cuda and not _ALLOW_HOST:
        return "device", f"{x.device} tensor (bitfold runs on CUDA)"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "requires_grad", "bitfold ops have no autograd; eager keeps the graph"
    if x.numel() == 0:
        return "empty", f"an empty tensor of shape {tuple(x.shape)}"
    return "unknown", "no guard matched"


_grad_enabled = torch.is_grad_enabled


def _ready(op, tensors, mode):
    """The CUDA ordinal when the kernel path may run (checks kept to what
    the C API cannot see); else the fallback is recorded and None returned."""
    if op in _disabled:
        _fallback(op, "disabled", _disabled[op], mode)
        return None
    x = tensors[0]
    dev = x.get_device()
    if x.dtype in _DT_WORD and (dev >= 0 or _ALLOW_HOST) and x.numel():
        for t in tensors:
            if t.get_device() != dev:
                break
        else:
            if not _grad_enabled() or not _needs_grad(tensors):
                return dev if dev > 0 else 0
    reason, detail = _guard(tensors)
    _fallback(op, reason, detail, mode)
    return None


def _needs_grad(tensors):
    for t in tensors:
        if t.requires_grad:
            return True
    return False


def _key(ts, scalar):
    """The site key of operands ts and a scalar: what the launch metadata
    and the kernel choice are a function of (unrolled: this is most of a
    warm call's Python time)."""
    if len(ts) == 3:
        a, b, c = ts
        return (scalar, a.dtype, a.shape, a.stride(), a.get_device(),
                b.dtype, b.shape, b.stride(), b.get_device(),
                c.dtype, c.shape, c.stride(), c.get_device())
    if len(ts) == 2:
        a, b = ts
        return (scalar, a.dtype, a.shape, a.stride(), a.get_device(),
                b.dtype, b.shape, b.stride(), b.get_device())
    key = (scalar,)
    for t in ts:
        key += (t.dtype, t.shape, t.stride(), t.get_device())
    return key


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
        words += (_DT_WORD.get(t.dtype, 0) | dev << 32, t.dim())
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
_libcuda = None


def _exchange_capture_mode(mode):
    """cuThreadExchangeStreamCaptureMode on this thread; returns the old mode."""
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
        _libcuda.cuThreadExchangeStreamCaptureMode.argtypes = [ctypes.POINTER(ctypes.c_int)]
    m = ctypes.c_int(mode)
    _libcuda.cuThreadExchangeStreamCaptureMode(ctypes.byref(m))
    return m.value


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
    launched nothing (grad needed, a CUDA graph capture, or the C API
    rejected the launch): the caller takes the checked path. None where the
    library has no prepared launches (each call takes the checked path)."""
    lib, n = kernel.lib, len(tensors)
    if getattr(lib, "bitfold_prepare_raw", None) is None:
        return None
    prepared = _Prepared(kernel, n, meta[0], meta[1], scalars)
    # Untyped: ctypes converts bytes and c_void_p arguments fastest so.
    c, handle = lib["bitfold_launch_prepared"], prepared.handle
    addresses = _packers[n]
    grad, capturing, raw_stream, stream_arg = _grad_enabled, _capturing, _raw_stream, _streams
    cuda = tensors[0].is_cuda
    counts = _op_stats(op)  # reset in place by reset_stats

    def launch(ts):
        if grad() and _needs_grad(ts):
            return False
        if not cuda:
            sarg = None
        elif capturing is not None and capturing():
            return False  # a first launch may load a module: _launch relaxes the capture
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
    return launch


def _launch(op, kernel, tensors, scalars, dev):
    """Launches on the current stream (raises bitfold.BitfoldError); returns
    the prepared launcher for later calls at this layout."""
    meta, nmeta = _meta_words(tensors, dev)
    launch = _prepare(op, kernel, tensors, (meta, nmeta), scalars, dev)
    data = _packers[len(tensors)](tensors)
    stream = _raw_stream(dev) if tensors[0].is_cuda else 0
    if tensors[0].is_cuda and _capturing is not None and _capturing():
        # A first launch of a shape class loads a module, which CUDA
        # forbids inside a global-mode capture: relax this thread's mode.
        old = _exchange_capture_mode(2)  # CU_STREAM_CAPTURE_MODE_RELAXED
        try:
            kernel.launch_raw(data, meta, nmeta, len(tensors), scalars, stream)
        finally:
            _exchange_capture_mode(old)
    else:
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


class _Call:
    """One checked call: the op, its site key and what to do on fallback."""
    __slots__ = ("op", "key", "aux", "width", "eager", "verify", "mode")

    def __init__(self, op, key, eager, verify, mode, width, aux=None):
        self.op, self.key, self.eager = op, key, eager
        self.verify, self.mode, self.width, self.aux = verify, mode, width, aux


def _run(call, kernels, variant, tensors, outs, scalars, dev):
    """Launch kernels(variant), or fall back (None); then verify once per
    (op, variant, width, device), and prepare the site for later calls.
    Returns outs, or the eager results after a mismatch."""
    op = call.op
    try:
        kernel = kernels(variant)
        launch = _launch(op, kernel, tensors, scalars, dev)
    except bitfold.BitfoldError as e:
        _fallback(op, e.status.replace("BITFOLD_ERROR_", "").lower(), e.message, call.mode)
        return None
    except OSError as e:  # libbitfold.so cannot be loaded
        _fallback(op, "no library", str(e), call.mode)
        return None
    _op_stats(op)["launches"] += 1
    x = tensors[0]
    vkey = (op, kernel.params, call.width, x.device)
    verified = vkey in _verified
    if not verified and (call.verify or config.verify) == "once" \
            and not (x.is_cuda and _capturing and _capturing()):
        refs = call.eager()
        refs = refs if isinstance(refs, tuple) else (refs,)
        if not _verify(op, vkey, outs, refs):
            return refs
        verified = True
    with _lock:
        if launch is not None and op not in _disabled:
            table = _site_table(op)
            if len(table) >= _MAX_SITES:
                table.clear()
            table[call.key] = (launch, verified, call.aux)
    return outs


def _into(out, result):
    """result, or result copied into the caller's `out`."""
    return result if out is None else out.copy_(result)


def _dt(t):
    return _DT_NAME.get(t.dtype, "?")


# ---- the ops ---------------------------------------------------------------------
# Each op: the prepared fast path (a site hit: its launcher, where verified or
# verification is not asked for), else the checked path, which guards,
# launches, verifies and prepares the site; eager on any rejection.

_ln_k = _kernels("ln_modulate", lambda dt: f"dtype={_DT_NAME[dt]}")
_qk_k = _kernels("qk_layernorm", lambda dt: f"dtype={_DT_NAME[dt]}")
_conv_k = _kernels("conv_bias", lambda k: f"dtype={_DT_NAME[k[0]]},bias_dtype="
                   f"{_DT_NAME[k[1]]},residual={int(k[2])}{k[3]}")
_gate_k = _kernels("residual_gate", lambda k: f"dtype={_DT_NAME[k[0]]},gate={k[1]}")
_rms_k = _kernels("rmsnorm_modulate", lambda dt: f"dtype={_DT_NAME[dt]}")
_ln_sites, _qk_sites, _conv_sites, _gate_sites, _rms_sites = (
    _site_table(op) for op in ("ln_modulate", "qk_layernorm", "conv_bias", "residual_gate",
                               "rmsnorm_modulate"))
_empty_like = torch.empty_like


def ln_modulate(x, scale, shift, eps=1e-6, *, out=None, verify=None, mode=None):
    """F.layer_norm(x, (D,), eps) * (1 + scale[:, None]) + shift[:, None];
    x (B, S, D), scale and shift (B, D) (chunks of a projection are fine).
    out: a preallocated result (saves the allocation, ~a fifth of a call)."""
    ins = (x, scale, shift) if out is None else (x, scale, shift, out)
    key = _key(ins, eps)
    ent = _ln_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        y = _empty_like(x) if out is None else out
        if ent[0]((x, scale, shift, y)):
            return y
    call = _Call("ln_modulate", key, lambda: _eager.ln_modulate(x, scale, shift, eps),
                 verify, mode, x.shape[-1])
    dev = _ready(call.op, ins, mode)
    if dev is not None:
        y = _empty_like(x) if out is None else out
        res = _run(call, _ln_k, x.dtype, (x, scale, shift, y), (y,), _f32.pack(eps), dev)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.ln_modulate(x, scale, shift, eps))


def _rows_mergeable(t):
    """Whether t's leading dims merge into one row stride (the C API's rule)."""
    shape, st = t.shape, t.stride()
    if st[-1] != 1 and shape[-1] != 1:
        return False
    for i in range(t.dim() - 2):
        if shape[i] != 1 and st[i] != st[i + 1] * shape[i + 1]:
            return False
    return True


def _rows_view(t, copy):
    """t, or the contiguous copy the kernel takes where t's rows do not
    merge into one stride (what aten's layer_norm makes of it too)."""
    return t.contiguous() if copy else t


def qk_layernorm(q, k, eps=1e-6, *, verify=None, mode=None):
    """(F.layer_norm(q, (D,), eps), F.layer_norm(k, (D,), eps)) in one launch.
    Strided q/k views (a fused QKV projection's) are copied to contiguous
    first, as aten's layer_norm does itself (see bench/host_cost.py's copy
    measurement)."""
    key = _key((q, k), eps)
    ent = _qk_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        cq, ck = ent[2]
        qo, ko = _empty_like(q, memory_format=_CONTIG), _empty_like(k, memory_format=_CONTIG)
        if ent[0]((_rows_view(q, cq), qo, _rows_view(k, ck), ko)):
            return qo, ko
    copies = (not (q.is_contiguous() or _rows_mergeable(q)),
              not (k.is_contiguous() or _rows_mergeable(k)))
    call = _Call("qk_layernorm", key, lambda: _eager.qk_layernorm(q, k, eps), verify, mode,
                 q.shape[-1], copies)
    dev = _ready(call.op, (q, k), mode)
    if dev is not None:
        qo, ko = _empty_like(q, memory_format=_CONTIG), _empty_like(k, memory_format=_CONTIG)
        out = _run(call, _qk_k, q.dtype, (_rows_view(q, copies[0]), qo,
                                          _rows_view(k, copies[1]), ko),
                   (qo, ko), _f32.pack(eps), dev)
        if out is not None:
            return out
    return _eager.qk_layernorm(q, k, eps)


_CONTIG = torch.contiguous_format


def _channels_first_params(x, max_c=128):
    """The kernel parameters that serve x in its own layout: for a dense
    NC[D]HW x with more than one pixel per image, the channels-first variant
    (the fold runs along the strided C axis in aten's outer-reduction order,
    whose output_vec_size S = D*H*W decides: docs/aten-reduce.md section 9);
    "" otherwise (channels-last x; any other layout, which the channels-last
    kernel refuses and the op then serves eagerly, with eager's bits)."""
    if x.dim() not in (4, 5) or not 2 <= x.shape[1] <= max_c or not x.is_contiguous():
        return ""  # wider: no one-pass config (docs/aten-reduce.md section 9)
    s = x[0, 0].numel()
    if s < 2:  # one pixel per image: aten reduces C innermost (channels-last)
        return ""
    return f",layout=channels_first,outvec={4 if s % 4 == 0 else 2 if s % 2 == 0 else 1}"


def conv_bias(x, bias, residual=None, *, out=None, verify=None, mode=None):
    """x.clone().add_(bias.view(1, C, 1, ...)) [+ residual]; x channels-last
    or contiguous NC[D]HW (4-D or 5-D, dense), bias (C,) in x's dtype or f32; out as ln_modulate's."""
    ins = (x, bias) if residual is None else (x, bias, residual)
    if out is not None:
        ins += (out,)
    key = _key(ins, residual is None)
    ent = _conv_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        y = _empty_like(x) if out is None else out
        if ent[0]((x, bias, y) if residual is None else (x, bias, residual, y)):
            return y
    call = _Call("conv_bias", key, lambda: _eager.conv_bias(x, bias, residual), verify, mode,
                 x.shape[1] if x.dim() > 1 else 0)
    dev = _ready(call.op, ins, mode)
    if dev is not None and bias.dtype not in _DT_WORD:
        _fallback("conv_bias", "dtype", f"bias {bias.dtype}", mode)
        dev = None
    if dev is not None:
        y = _empty_like(x) if out is None else out
        ts = (x, bias, y) if residual is None else (x, bias, residual, y)
        res = _run(call, _conv_k,
                   (x.dtype, bias.dtype, residual is not None, _channels_first_params(x)),
                   ts, (y,), _no_scalars, dev)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.conv_bias(x, bias, residual))


def _gate_kind(residual, gate):
    """"full" | "per_batch" | "global" (the kernel variant; the C API takes
    the gate as it is: size-1 dims merge) or None."""
    if gate.shape == residual.shape:
        return "full"
    d = residual.shape[-1]
    if gate.shape[-1] != d or gate.dim() > residual.dim():
        return None
    lead = gate.shape[:-1]
    if all(s == 1 for s in lead):
        return "global"
    if residual.dim() == 3 and gate.dim() == 3 and lead == (residual.shape[0], 1):
        return "per_batch"
    return None  # e.g. (B, D) against (B, S, D) broadcasts as rows, not batches


def residual_gate(residual, update, gate, *, out=None, verify=None, mode=None):
    """residual + update * gate, gate full-shape, (B, 1, D) or (1, 1, D)/(D,);
    out as ln_modulate's (out=residual updates it in place)."""
    ins = (residual, update, gate) if out is None else (residual, update, gate, out)
    key = _key(ins, None)
    ent = _gate_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        y = _empty_like(residual) if out is None else out
        if ent[0]((residual, update, gate, y)):
            return y
    kind = _gate_kind(residual, gate) if update.shape == residual.shape else None
    call = _Call("residual_gate", key, lambda: _eager.residual_gate(residual, update, gate),
                 verify, mode, residual.shape[-1] if residual.dim() else 0, kind)
    dev = _ready(call.op, ins, mode)
    if dev is not None and kind is None:
        _fallback(call.op, "shape", f"residual {tuple(residual.shape)}, update "
                  f"{tuple(update.shape)}, gate {tuple(gate.shape)}", mode)
        dev = None
    if dev is not None:
        y = _empty_like(residual) if out is None else out
        res = _run(call, _gate_k, (residual.dtype, kind), (residual, update, gate, y), (y,),
                   _no_scalars, dev)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.residual_gate(residual, update, gate))


def rmsnorm_modulate(x, weight, scale, shift, eps=1e-6, *, out=None, verify=None, mode=None):
    """flashinfer-order RMSNorm(x) * weight, then * (1 + scale) + shift
    (NUMERICS.md 5; D = 2048 or 4096). The fallback is a torch fp32 chain,
    close but not flashinfer's bits."""
    ins = (x, weight, scale, shift) if out is None else (x, weight, scale, shift, out)
    key = _key(ins, eps)
    ent = _rms_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        y = _empty_like(x) if out is None else out
        if ent[0]((x, weight, scale, shift, y)):
            return y
    call = _Call("rmsnorm_modulate", key,
                 lambda: _eager.rmsnorm_modulate(x, weight, scale, shift, eps), verify, mode,
                 x.shape[-1])
    dev = _ready(call.op, ins, mode)
    if dev is not None:
        y = _empty_like(x) if out is None else out
        res = _run(call, _rms_k, x.dtype, (x, weight, scale, shift, y), (y,), _f32.pack(eps),
                   dev)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.rmsnorm_modulate(x, weight, scale, shift, eps))


def _wan_operands(k):
    """wan_rmsnorm_silu's operand names for (dtype, form, gamma dtype, bias, conv_bias)."""
    return ["x", "gamma"] + ["bias"] * k[3] + ["conv_bias"] * k[4] + ["y"]


def _wan_params(k):
    return (f"dtype={_DT_NAME[k[0]]},form={k[1]},gamma={_DT_NAME[k[2]]},bias={int(k[3])},"
            f"conv_bias={int(k[4])}{k[5]}")


_wan_k = _kernels("wan_rmsnorm_silu", _wan_params, _wan_operands)
_wan_sites = _site_table("wan_rmsnorm_silu")


def _wan_tensors(x, gamma, bias, conv_bias, y):
    ts = [x, gamma.reshape(-1)]
    if bias is not None:
        ts.append(bias.reshape(-1))
    if conv_bias is not None:
        ts.append(conv_bias.reshape(-1))
    ts.append(y)
    return tuple(ts)


def _wan_dtype_problem(x, gamma, bias, conv_bias):
    if gamma.dtype not in (x.dtype, _F32):
        return f"gamma {gamma.dtype} with x {x.dtype} (gamma must be x's dtype or f32)"
    if bias is not None and bias.dtype != gamma.dtype:
        return f"bias {bias.dtype} with gamma {gamma.dtype} (the kernel takes gamma's)"
    if conv_bias is not None and conv_bias.dtype != x.dtype:
        return f"conv_bias {conv_bias.dtype} with x {x.dtype} (the kernel takes x's)"
    return None


def wan_rmsnorm_silu(x, gamma, bias=None, conv_bias=None, form="x", *, verify=None, mode=None):
    """The Wan VAE RMSNorm + SiLU on x (N, C, [T,] H, W), channels-last or
    contiguous (NC[D]HW):
    form "x" (SGLang): silu(F.normalize(x, dim=1) * C**0.5 * gamma + bias);
    form "f32" (diffusers 0.42 WanRMS_norm + SiLU): the norm on x.float(),
    rounded to x's dtype. gamma (C values, any shape such as (C, 1, 1, 1)),
    bias (gamma's dtype; None: the float 0. diffusers adds), conv_bias (x's
    dtype; x + conv_bias first, as a conv's bias epilogue). The result is
    f32 when gamma is f32 (type promotion), else x's dtype."""
    if form not in ("x", "f32"):
        raise ValueError(f"wan_rmsnorm_silu: form must be 'x' or 'f32', not {form!r}")
    ins = (x, gamma) + ((bias,) if bias is not None else ()) + \
        ((conv_bias,) if conv_bias is not None else ())
    key = _key(ins, (form, bias is None, conv_bias is None))
    ent = _wan_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        y = _empty_like(x, dtype=gamma.dtype)
        if ent[0](_wan_tensors(x, gamma, bias, conv_bias, y)):
            return y

    def eager():
        return _eager.wan_rmsnorm_silu(x, gamma, bias, conv_bias, form)
    call = _Call("wan_rmsnorm_silu", key, eager, verify, mode,
                 x.shape[1] if x.dim() > 1 else 0)
    dev = _ready(call.op, ins, mode)
    problem = _wan_dtype_problem(x, gamma, bias, conv_bias) if dev is not None else None
    if problem:
        _fallback(call.op, "dtype", problem, mode)
        dev = None
    if dev is not None:
        y = _empty_like(x, dtype=gamma.dtype)
        variant = (x.dtype, form, gamma.dtype, bias is not None, conv_bias is not None,
                   _channels_first_params(x, 128 if conv_bias is None else 64))
        out = _run(call, _wan_k, variant, _wan_tensors(x, gamma, bias, conv_bias, y), (y,),
                   _f32.pack(float(x.shape[1]) ** 0.5), dev)
        if out is not None:
            return out[0]
    return eager()


def _hf_operands(k):
    """hf_rmsnorm's operand names for (dtype, weight dtype, residual, modulate)."""
    return (["x"] + ["residual"] * k[2] + ["weight"] + ["scale", "shift"] * k[3]
            + ["sum"] * k[2] + ["y"])


def _hf_params(k):
    return (f"dtype={_DT_NAME[k[0]]},weight={_DT_NAME[k[1]]},residual={int(k[2])},"
            f"modulate={int(k[3])}")


_hf_k = _kernels("hf_rmsnorm", _hf_params, _hf_operands)
_hf_sites = _site_table("hf_rmsnorm")


def _hf_tensors(x, weight, residual, scale, shift, s, y):
    ts = [x] + ([residual] if residual is not None else []) + [weight]
    if scale is not None:
        ts += [scale, shift]
    return tuple(ts + ([s] if s is not None else []) + [y])


def hf_rmsnorm(x, weight, eps, residual=None, scale=None, shift=None, *, verify=None,
               mode=None):
    """HF LlamaRMSNorm: h = x.float(); y = weight * (h * rsqrt(mean(h*h, -1)
    + eps)).to(x.dtype), in aten's reduction order. residual: x = x +
    residual first, and the op returns (y, that sum). scale and shift (B, D)
    with x (B, S, D): then y * (1 + scale) + shift per batch. weight is x's
    dtype or f32 (then y is f32)."""
    if (scale is None) != (shift is None):
        raise ValueError("hf_rmsnorm: scale and shift go together")
    ins = _hf_tensors(x, weight, residual, scale, shift, None, x)[:-1]
    key = _key(ins, (eps, residual is None, scale is None))
    ent = _hf_sites.get(key)
    if ent is not None and (ent[1] or (verify or config.verify) != "once"):
        y = _empty_like(x, dtype=weight.dtype, memory_format=_CONTIG)
        s = None if residual is None else _empty_like(x, memory_format=_CONTIG)
        if ent[0](_hf_tensors(x, weight, residual, scale, shift, s, y)):
            return y if s is None else (y, s)

    def eager():
        return _eager.hf_rmsnorm(x, weight, eps, residual, scale, shift)
    call = _Call("hf_rmsnorm", key, eager, verify, mode, x.shape[-1] if x.dim() else 0)
    dev = _ready(call.op, ins, mode)
    if dev is not None and weight.dtype not in (x.dtype, _F32):
        _fallback(call.op, "dtype", f"weight {weight.dtype} with x {x.dtype} (x's dtype or "
                  "f32)", mode)
        dev = None
    if dev is not None:
        y = _empty_like(x, dtype=weight.dtype, memory_format=_CONTIG)
        s = None if residual is None else _empty_like(x, memory_format=_CONTIG)
        variant = (x.dtype, weight.dtype, residual is not None, scale is not None)
        outs = (y,) if s is None else (y, s)
        res = _run(call, _hf_k, variant, _hf_tensors(x, weight, residual, scale, shift, s, y),
                   outs, _f32.pack(eps), dev)
        if res is not None:
            return res[0] if s is None else tuple(res)
    return eager()
