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

_lock = threading.Lock()


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
_structs = {}


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
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _fallback(op, reason, detail, mode):
    """Counts and warns (once per op and reason); raises in strict mode."""
    if (mode or config.mode) == "strict":
        raise BitfoldFallback(f"bitfold.torch.{op}: {reason}: {detail}")
    s = _op_stats(op)
    with _lock:
        s["fallbacks"][reason] = s["fallbacks"].get(reason, 0) + 1
    _warn_once((op, reason), f"bitfold.torch.{op}: eager fallback ({reason}): {detail}")


def _guard(op, tensors, dtype_table):
    """(None, dtype) when the fast path may run, else (reason, detail)."""
    x = tensors[0]
    dt = x.dtype
    if dt not in dtype_table:
        return "dtype", f"{dt} (bitfold has {sorted(_DT_NAME[d] for d in dtype_table)})"
    dev = x.device
    for t in tensors:
        if t.device != dev:
            return "device", f"tensors on {dev} and {t.device}"
    if not x.is_cuda and not _ALLOW_HOST:
        return "device", f"{dev} tensor (bitfold runs on CUDA)"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "requires_grad", "bitfold ops have no autograd; eager keeps the graph"
    for t in tensors:
        if t.numel() == 0:
            return "empty", f"an empty tensor of shape {tuple(t.shape)}"
    return None, dt


def _pack(tensors, device):
    words = []
    dev = device << 32
    for t in tensors:
        words += (t.data_ptr(), _DT_WORD.get(t.dtype, 0) | dev, t.dim())
        words += t.shape
        words += t.stride()
    n = len(words)
    st = _structs.get(n)
    if st is None:
        st = _structs[n] = struct.Struct(f"{n}q")
    return st.pack(*words), n


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


def _launch(kernel, tensors, scalars, device):
    """Launches on the current stream; raises bitfold.BitfoldError."""
    words, n = _pack(tensors, device)
    stream = _raw_stream(device) if tensors[0].is_cuda else 0
    if _capturing is not None and tensors[0].is_cuda and _capturing():
        # A first launch of a shape class loads a module, which CUDA forbids
        # inside a global-mode capture: relax this thread's mode around it.
        old = _exchange_capture_mode(2)  # CU_STREAM_CAPTURE_MODE_RELAXED
        try:
            kernel.launch_raw(words, n, len(tensors), scalars, stream)
        finally:
            _exchange_capture_mode(old)
        return
    kernel.launch_raw(words, n, len(tensors), scalars, stream)


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


def _run(op, kernel, tensors, outs, scalars, device, eager, verify, mode, class_key):
    """Launch, or fall back; then verify once per class. Returns outs."""
    try:
        _launch(kernel, tensors, scalars, device)
    except bitfold.BitfoldError as e:
        _fallback(op, e.status.replace("BITFOLD_ERROR_", "").lower(), e.message, mode)
        return None
    _op_stats(op)["launches"] += 1
    if (verify or config.verify) == "once":
        key = (op,) + class_key
        if key not in _verified and not (_capturing and outs[0].is_cuda and _capturing()):
            refs = eager()
            refs = refs if isinstance(refs, tuple) else (refs,)
            if not _verify(op, key, outs, refs):
                return refs
    return outs


def _disabled_or_guard(op, tensors, dtypes, mode):
    """None if the fast path may run; else the reason was counted/raised."""
    if op in _disabled:
        _fallback(op, "disabled", _disabled[op], mode)
        return True
    reason, detail = _guard(op, tensors, dtypes)
    if reason is not None:
        _fallback(op, reason, detail, mode)
        return True
    return False


_STD = (_BF16, _F16, _F32)
_ln_k = _kernels("ln_modulate", lambda dt: f"dtype={_DT_NAME[dt]}")
_qk_k = _kernels("qk_layernorm", lambda dt: f"dtype={_DT_NAME[dt]}")
_conv_k = _kernels("conv_bias", lambda k: f"dtype={_DT_NAME[k[0]]},bias_dtype="
                   f"{_DT_NAME[k[1]]},residual={int(k[2])}")
_gate_k = _kernels("residual_gate", lambda k: f"dtype={_DT_NAME[k[0]]},gate={k[1]}")
_rms_k = _kernels("rmsnorm_modulate", lambda dt: f"dtype={_DT_NAME[dt]}")
_wan_k = _kernels("wan_rmsnorm_silu", lambda dt: f"dtype={_DT_NAME[dt]}")


def ln_modulate(x, scale, shift, eps=1e-6, *, verify=None, mode=None):
    """F.layer_norm(x, (D,), eps) * (1 + scale[:, None]) + shift[:, None];
    x (B, S, D), scale and shift (B, D) (chunks of a projection are fine)."""
    ts = (x, scale, shift)
    if _disabled_or_guard("ln_modulate", ts, _STD, mode):
        return _eager.ln_modulate(x, scale, shift, eps)
    y = torch.empty_like(x)
    out = _run("ln_modulate", _ln_k(x.dtype), (x, scale, shift, y), (y,), _f32.pack(eps),
               x.get_device() if x.is_cuda else 0,
               lambda: _eager.ln_modulate(x, scale, shift, eps), verify, mode,
               (x.dtype, x.shape[-1], x.device))
    return _eager.ln_modulate(x, scale, shift, eps) if out is None else out[0]


def _rows_mergeable(t):
    """Whether t's leading dims merge into one row stride (the C API's rule)."""
    shape, st = t.shape, t.stride()
    if st[-1] != 1 and shape[-1] != 1:
        return False
    for i in range(t.dim() - 2):
        if shape[i] != 1 and st[i] != st[i + 1] * shape[i + 1]:
            return False
    return True


def qk_layernorm(q, k, eps=1e-6, *, verify=None, mode=None):
    """(F.layer_norm(q, (D,), eps), F.layer_norm(k, (D,), eps)) in one launch.
    Strided q/k views (a fused QKV projection's) are copied to contiguous
    first, as aten's layer_norm does itself."""
    if _disabled_or_guard("qk_layernorm", (q, k), _STD, mode):
        return _eager.qk_layernorm(q, k, eps)
    qi = q if q.is_contiguous() or _rows_mergeable(q) else q.contiguous()
    ki = k if k.is_contiguous() or _rows_mergeable(k) else k.contiguous()
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    if not _rows_mergeable(qo) or not _rows_mergeable(ko):
        qo, ko = torch.empty(q.shape, dtype=q.dtype, device=q.device), \
            torch.empty(k.shape, dtype=k.dtype, device=k.device)
    out = _run("qk_layernorm", _qk_k(q.dtype), (qi, qo, ki, ko), (qo, ko), _f32.pack(eps),
               q.get_device() if q.is_cuda else 0,
               lambda: _eager.qk_layernorm(q, k, eps), verify, mode,
               (q.dtype, q.shape[-1], q.device))
    return _eager.qk_layernorm(q, k, eps) if out is None else out


def conv_bias(x, bias, residual=None, *, verify=None, mode=None):
    """x.clone().add_(bias.view(1, C, 1, ...)) [+ residual]; x channels-last
    (4-D or 5-D, dense), bias (C,) in x's dtype or f32."""
    ts = (x, bias) if residual is None else (x, bias, residual)
    if _disabled_or_guard("conv_bias", ts, _STD, mode):
        return _eager.conv_bias(x, bias, residual)
    if bias.dtype not in _DT_WORD:
        _fallback("conv_bias", "dtype", f"bias {bias.dtype}", mode)
        return _eager.conv_bias(x, bias, residual)
    y = torch.empty_like(x)
    has_res = residual is not None
    out = _run("conv_bias", _conv_k((x.dtype, bias.dtype, has_res)), ts + (y,), (y,),
               _no_scalars, x.get_device() if x.is_cuda else 0,
               lambda: _eager.conv_bias(x, bias, residual), verify, mode,
               (x.dtype, bias.dtype, has_res, x.shape[1], x.device))
    return _eager.conv_bias(x, bias, residual) if out is None else out[0]


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
    if residual.dim() == 3 and gate.dim() == 2 and gate.shape[0] == residual.shape[0] \
            and residual.shape[0] != 1:
        return None  # (B, D) broadcasts against (B, S, D) as rows, not batches
    return None


def residual_gate(residual, update, gate, *, verify=None, mode=None):
    """residual + update * gate, gate full-shape, (B, 1, D) or (1, 1, D)/(D,)."""
    ts = (residual, update, gate)
    if _disabled_or_guard("residual_gate", ts, _STD, mode):
        return _eager.residual_gate(residual, update, gate)
    kind = _gate_kind(residual, gate) if update.shape == residual.shape else None
    if kind is None:
        _fallback("residual_gate", "shape", f"residual {tuple(residual.shape)}, update "
                  f"{tuple(update.shape)}, gate {tuple(gate.shape)}", mode)
        return _eager.residual_gate(residual, update, gate)
    y = torch.empty_like(residual)
    out = _run("residual_gate", _gate_k((residual.dtype, kind[0])),
               (residual, update, kind[1], y), (y,), _no_scalars,
               residual.get_device() if residual.is_cuda else 0,
               lambda: _eager.residual_gate(residual, update, gate), verify, mode,
               (residual.dtype, kind[0], residual.shape[-1], residual.device))
    return _eager.residual_gate(residual, update, gate) if out is None else out[0]


def rmsnorm_modulate(x, weight, scale, shift, eps=1e-6, *, verify=None, mode=None):
    """flashinfer-order RMSNorm(x) * weight, then * (1 + scale) + shift
    (NUMERICS.md 5; D = 2048 or 4096). The fallback is a torch fp32 chain,
    close but not flashinfer's bits."""
    ts = (x, weight, scale, shift)
    if _disabled_or_guard("rmsnorm_modulate", ts, _STD, mode):
        return _eager.rmsnorm_modulate(x, weight, scale, shift, eps)
    y = torch.empty_like(x)
    out = _run("rmsnorm_modulate", _rms_k(x.dtype), ts + (y,), (y,), _f32.pack(eps),
               x.get_device() if x.is_cuda else 0,
               lambda: _eager.rmsnorm_modulate(x, weight, scale, shift, eps), verify, mode,
               (x.dtype, x.shape[-1], x.device))
    return _eager.rmsnorm_modulate(x, weight, scale, shift, eps) if out is None else out[0]


def wan_rmsnorm_silu(x, gamma, bias, *, verify=None, mode=None):
    """silu(F.normalize(x, dim=1) * C**0.5 * gamma + bias), x channels-last.
    NOT bit-exact with eager (NUMERICS.md 6): verify="once" disables it."""
    c = x.shape[1] if x.dim() >= 2 else 0
    gamma1, bias1 = gamma.reshape(-1), bias.reshape(-1)
    ts = (x, gamma1, bias1)
    if _disabled_or_guard("wan_rmsnorm_silu", ts, _STD, mode):
        return _eager.wan_rmsnorm_silu(x, gamma, bias)
    y = torch.empty_like(x)
    out = _run("wan_rmsnorm_silu", _wan_k(x.dtype), ts + (y,), (y,),
               _f32.pack(float(c) ** 0.5), x.get_device() if x.is_cuda else 0,
               lambda: _eager.wan_rmsnorm_silu(x, gamma, bias), verify, mode,
               (x.dtype, c, x.device))
    return _eager.wan_rmsnorm_silu(x, gamma, bias) if out is None else out[0]
