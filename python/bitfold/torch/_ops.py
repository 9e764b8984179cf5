"""The direct (eager) ops: guards, launch through bitfold_launch_raw,
fallback to the eager chain, verify="once", counters.

Host cost is the point of this file: a warm call is a few attribute reads,
one torch.empty_like, one struct.pack and one ctypes call. Everything the C
API validates (shapes, strides, alignment, dtypes of the other operands,
column guards) is left to it: its rejection is the guard, and the op falls
back to the eager chain with the C message as the reason.
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


def _op_stats(op):
    s = _stats.get(op)
    if s is None:
        with _lock:
            s = _stats.setdefault(op, {"launches": 0, "fallbacks": {}, "verified": 0,
                                       "mismatches": 0})
    return s


def stats():
    """Per op: launches, fallbacks by reason, verified classes, mismatches,
    and whether verify disabled it."""
    with _lock:
        out = {}
        for op, s in _stats.items():
            out[op] = {"launches": s["launches"], "fallbacks": dict(s["fallbacks"]),
                       "verified": s["verified"], "mismatches": s["mismatches"],
                       "disabled": _disabled.get(op)}
        return out


def reset_stats():
    """Clears counters, warn-once memory, verified classes and disabled ops."""
    with _lock:
        _stats.clear()
        _warned.clear()
        _disabled.clear()
        _verified.clear()


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
            if not _grad_enabled():
                return dev if dev > 0 else 0
            for t in tensors:
                if t.requires_grad:
                    break
            else:
                return dev if dev > 0 else 0
    reason, detail = _guard(tensors)
    _fallback(op, reason, detail, mode)
    return None


_meta = {}
_ptr_structs = {n: struct.Struct(f"{n}Q") for n in range(1, 17)}


def _build_meta(key, tensors, dev):
    words = []
    for t in tensors:
        words += (_DT_WORD.get(t.dtype, 0) | dev << 32, t.dim())
        words += t.shape
        words += t.stride()
    if len(_meta) >= 4096:
        _meta.clear()
    m = _meta[key] = (struct.pack(f"{len(words)}q", *words), len(words))
    return m


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


def _layout(ts):
    """Hashable dtypes, shapes and strides of ts (unrolled: this is most of
    a warm call's Python time)."""
    if len(ts) == 3:
        a, b, c = ts
        return (a.dtype, a.shape, a.stride(), b.dtype, b.shape, b.stride(),
                c.dtype, c.shape, c.stride())
    if len(ts) == 2:
        a, b = ts
        return (a.dtype, a.shape, a.stride(), b.dtype, b.shape, b.stride())
    key = ()
    for t in ts:
        key += (t.dtype, t.shape, t.stride())
    return key


_P4 = struct.Struct("4Q").pack


def _addresses(ts):
    if len(ts) == 4:
        a, b, c, d = ts
        return _P4(a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr())
    return _ptr_structs[len(ts)].pack(*[t.data_ptr() for t in ts])


_streams = {}


def _stream_arg(stream):
    """The stream as an untyped ctypes argument (cached per handle)."""
    if len(_streams) > 1024:
        _streams.clear()
    arg = _streams[stream] = ctypes.c_void_p(stream) if stream else None
    return arg


def _launch(kernel, key_tensors, tensors, scalars, dev):
    """Launches on the current stream; raises bitfold.BitfoldError.

    The metadata (dtypes, shapes, strides) of every tensor is a function of
    the layouts of key_tensors (the inputs; outputs come from empty_like),
    so it is packed once per layout and only the addresses per call."""
    key = (kernel.address, dev, _layout(key_tensors))
    meta = _meta.get(key) or _build_meta(key, tensors, dev)
    data = _addresses(tensors)
    if tensors[0].is_cuda:
        stream = _raw_stream(dev)
        if _capturing is not None and _capturing():
            # A first launch of a shape class loads a module, which CUDA
            # forbids inside a global-mode capture: relax this thread's mode.
            old = _exchange_capture_mode(2)  # CU_STREAM_CAPTURE_MODE_RELAXED
            try:
                kernel.launch_raw(data, meta[0], meta[1], len(tensors), scalars, stream)
            finally:
                _exchange_capture_mode(old)
            return
    else:
        stream = 0
    raw = kernel._raw_untyped
    if raw is None or raw(kernel.handle, len(tensors), data, meta[0], meta[1], scalars,
                          len(scalars) >> 2, _streams.get(stream) or _stream_arg(stream)):
        kernel.launch_raw(data, meta[0], meta[1], len(tensors), scalars, stream)  # raises


def _kernels(name, param_fn):
    """A per-(dtype, variant) kernel lookup bound to the default runtime."""
    cache = {}

    def get(key):
        k = cache.get(key)
        if k is None:
            k = cache[key] = bitfold.default_runtime().kernel(name, param_fn(key))
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
            _warn_once((op, "mismatch"), f"bitfold.torch.{op}: {msg}")
            return False
    with _lock:
        _verified.add(key)
        _op_stats(op)["verified"] += 1
    return True


def _run(op, kernels, variant, inputs, tensors, outs, scalars, dev, eager, verify, mode):
    """Launch kernels(variant), or fall back (None); then verify once per
    (op, variant, width, device). Returns outs, or the eager results after a
    mismatch."""
    try:
        kernel = kernels(variant)
        _launch(kernel, inputs, tensors, scalars, dev)
    except bitfold.BitfoldError as e:
        _fallback(op, e.status.replace("BITFOLD_ERROR_", "").lower(), e.message, mode)
        return None
    except OSError as e:  # libbitfold.so cannot be loaded
        _fallback(op, "no library", str(e), mode)
        return None
    s = _stats.get(op) or _op_stats(op)
    s["launches"] += 1
    if (verify or config.verify) == "once":
        x = inputs[0]
        key = (op, kernel.params, x.shape[-1], x.device)
        if key not in _verified and not (x.is_cuda and _capturing and _capturing()):
            refs = eager()
            refs = refs if isinstance(refs, tuple) else (refs,)
            if not _verify(op, key, outs, refs):
                return refs
    return outs


_STD = (_BF16, _F16, _F32)
_ln_k = _kernels("ln_modulate", lambda dt: f"dtype={_DT_NAME[dt]}")
_qk_k = _kernels("qk_layernorm", lambda dt: f"dtype={_DT_NAME[dt]}")
_conv_k = _kernels("conv_bias", lambda k: f"dtype={_DT_NAME[k[0]]},bias_dtype="
                   f"{_DT_NAME[k[1]]},residual={int(k[2])}")
_gate_k = _kernels("residual_gate", lambda k: f"dtype={_DT_NAME[k[0]]},gate={k[1]}")
_rms_k = _kernels("rmsnorm_modulate", lambda dt: f"dtype={_DT_NAME[dt]}")
_wan_k = _kernels("wan_rmsnorm_silu", lambda dt: f"dtype={_DT_NAME[dt]}")


def _into(out, result):
    """result, or result copied into the caller's `out`."""
    return result if out is None else out.copy_(result)


def ln_modulate(x, scale, shift, eps=1e-6, *, out=None, verify=None, mode=None):
    """F.layer_norm(x, (D,), eps) * (1 + scale[:, None]) + shift[:, None];
    x (B, S, D), scale and shift (B, D) (chunks of a projection are fine).
    out: a preallocated result (saves the allocation, ~a third of a call)."""
    ins = (x, scale, shift)
    dev = _ready("ln_modulate", ins, mode)
    if dev is not None:
        y = torch.empty_like(x) if out is None else out
        res = _run("ln_modulate", _ln_k, x.dtype, ins if out is None else ins + (out,),
                   (x, scale, shift, y), (y,), _f32.pack(eps), dev,
                   lambda: _eager.ln_modulate(x, scale, shift, eps), verify, mode)
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


def _rows_view(t):
    """t if the kernel can address it, else a contiguous copy (what aten's
    layer_norm makes of it too)."""
    return t if t.is_contiguous() or _rows_mergeable(t) else t.contiguous()


def qk_layernorm(q, k, eps=1e-6, *, verify=None, mode=None):
    """(F.layer_norm(q, (D,), eps), F.layer_norm(k, (D,), eps)) in one launch.
    Strided q/k views (a fused QKV projection's) are copied to contiguous
    first, as aten's layer_norm does itself."""
    ins = (q, k)
    dev = _ready("qk_layernorm", ins, mode)
    if dev is not None:
        qi, ki = _rows_view(q), _rows_view(k)
        qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        ko = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        out = _run("qk_layernorm", _qk_k, q.dtype, ins, (qi, qo, ki, ko), (qo, ko),
                   _f32.pack(eps), dev, lambda: _eager.qk_layernorm(q, k, eps), verify, mode)
        if out is not None:
            return out
    return _eager.qk_layernorm(q, k, eps)


def conv_bias(x, bias, residual=None, *, out=None, verify=None, mode=None):
    """x.clone().add_(bias.view(1, C, 1, ...)) [+ residual]; x channels-last
    (4-D or 5-D, dense), bias (C,) in x's dtype or f32; out as ln_modulate's."""
    ins = (x, bias) if residual is None else (x, bias, residual)
    dev = _ready("conv_bias", ins, mode)
    if dev is not None and bias.dtype not in _DT_WORD:
        _fallback("conv_bias", "dtype", f"bias {bias.dtype}", mode)
        dev = None
    if dev is not None:
        y = torch.empty_like(x) if out is None else out
        has_res = residual is not None
        res = _run("conv_bias", _conv_k, (x.dtype, bias.dtype, has_res),
                   ins if out is None else ins + (out,), ins + (y,), (y,), _no_scalars, dev,
                   lambda: _eager.conv_bias(x, bias, residual), verify, mode)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.conv_bias(x, bias, residual))


def _gate_kind(residual, gate):
    """("full"|"per_batch"|"global", the gate as the kernel takes it) or None."""
    if gate.shape == residual.shape:
        return "full", gate
    d = residual.shape[-1]
    if gate.shape[-1] != d or gate.dim() > residual.dim():
        return None
    lead = gate.shape[:-1]
    if all(s == 1 for s in lead):
        return "global", gate.reshape(d)
    if residual.dim() == 3 and gate.dim() == 3 and lead == (residual.shape[0], 1):
        return "per_batch", gate.reshape(residual.shape[0], d)
    return None  # e.g. (B, D) against (B, S, D) broadcasts as rows, not batches


def residual_gate(residual, update, gate, *, out=None, verify=None, mode=None):
    """residual + update * gate, gate full-shape, (B, 1, D) or (1, 1, D)/(D,);
    out as ln_modulate's (out=residual updates it in place)."""
    ins = (residual, update, gate)
    dev = _ready("residual_gate", ins, mode)
    kind = None
    if dev is not None:
        kind = _gate_kind(residual, gate) if update.shape == residual.shape else None
        if kind is None:
            _fallback("residual_gate", "shape", f"residual {tuple(residual.shape)}, update "
                      f"{tuple(update.shape)}, gate {tuple(gate.shape)}", mode)
    if kind is not None:
        y = torch.empty_like(residual) if out is None else out
        res = _run("residual_gate", _gate_k, (residual.dtype, kind[0]),
                   ins if out is None else ins + (out,), (residual, update, kind[1], y), (y,),
                   _no_scalars, dev, lambda: _eager.residual_gate(residual, update, gate),
                   verify, mode)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.residual_gate(residual, update, gate))


def rmsnorm_modulate(x, weight, scale, shift, eps=1e-6, *, out=None, verify=None, mode=None):
    """flashinfer-order RMSNorm(x) * weight, then * (1 + scale) + shift
    (NUMERICS.md 5; D = 2048 or 4096). The fallback is a torch fp32 chain,
    close but not flashinfer's bits."""
    ins = (x, weight, scale, shift)
    dev = _ready("rmsnorm_modulate", ins, mode)
    if dev is not None:
        y = torch.empty_like(x) if out is None else out
        res = _run("rmsnorm_modulate", _rms_k, x.dtype, ins if out is None else ins + (out,),
                   ins + (y,), (y,), _f32.pack(eps), dev,
                   lambda: _eager.rmsnorm_modulate(x, weight, scale, shift, eps), verify, mode)
        if res is not None:
            return _into(out, res[0]) if res[0] is not y else y
    return _into(out, _eager.rmsnorm_modulate(x, weight, scale, shift, eps))


def wan_rmsnorm_silu(x, gamma, bias, *, verify=None, mode=None):
    """silu(F.normalize(x, dim=1) * C**0.5 * gamma + bias), x channels-last.
    NOT bit-exact with eager (NUMERICS.md 6): verify="once" disables it."""
    ins = (x, gamma, bias)
    dev = _ready("wan_rmsnorm_silu", ins, mode)
    if dev is not None:
        c = x.shape[1]
        y = torch.empty_like(x)
        out = _run("wan_rmsnorm_silu", _wan_k, x.dtype, ins,
                   (x, gamma.reshape(-1), bias.reshape(-1), y), (y,), _f32.pack(float(c) ** 0.5),
                   dev, lambda: _eager.wan_rmsnorm_silu(x, gamma, bias), verify, mode)
        if out is not None:
            return out[0]
    return _eager.wan_rmsnorm_silu(x, gamma, bias)
