"""The op table: one entry per bitfold.torch op. From each entry come the
direct function (bitfold.torch.<op>, made by `direct` below), the
torch.library custom op and its fake impl (_custom.py); the host path
itself is _ops.call, shared by all.

An entry says, as functions of the call's arguments `a` (the op's
parameters in order; `o` the caller's out=, `aux` what the site keeps):
  args, returns  the signature, in torch's schema syntax (also the direct
                 function's, plus out=/verify=/mode= keywords)
  ins(a, o)      the operands the site key and the guards look at
  tag(a)         the key's non-tensor part (scalars, flags), or the index of
                 the argument that is
  refuse(a)      (reason, detail) for inputs the kernel does not take, or None
  variant(a)     the kernel variant; params(variant) its template parameters,
                 operands(variant) the operand names it must have
  alloc(a, o, aux) -> (outputs, launch operands in the template's order)
  scalars(a)     the f32 scalars as bytes; width(a) the verify-once class
  eager          the chain in _eager.py of the same name (fallback, verify)
  custom_result  how the custom op returns the result (contiguous, a list)
A new stock op is one entry here and its chain in _eager.py.
"""
import textwrap

import torch

from . import _eager, _fast
from ._ops import (_DT_NAME, _DT_WORD, _F32, Op, _f32, call, chain_source, config, hit,
                   hit_source, key_source)

_empty_like = torch.empty_like
_CONTIG = torch.contiguous_format


def _dtype_param(dt):
    return f"dtype={_DT_NAME[dt]}"


def _row_alloc(n):
    """alloc of a row op: one output like the first operand (or out=),
    launched after the first n operands."""
    def alloc(a, o, aux):
        y = _empty_like(a[0]) if o is None else o
        return (y,), a[:n] + (y,)
    return alloc


def _ins(n):
    """ins of an op whose first n arguments are its (required) operands
    (`count`: the op's site key is then one generated expression)."""
    def ins(a, o):
        return a[:n] if o is None else a[:n] + (o,)
    ins.count = n
    return ins


def _last_dim(a):
    return a[0].shape[-1] if a[0].dim() else 0


def _channels(a):
    return a[0].shape[1] if a[0].dim() > 1 else 0


def _identity(r):
    return r


# ---- ln_modulate, rmsnorm_modulate: row ops with eps ----------------------------

LN_MODULATE = Op(
    "ln_modulate", "Tensor x, Tensor scale, Tensor shift, float eps=1e-06",
    ins=_ins(3), tag=3, variant=lambda a: a[0].dtype, params=_dtype_param,
    alloc=_row_alloc(3), scalars=lambda a: _f32.pack(a[3]), width=_last_dim,
    doc="""F.layer_norm(x, (D,), eps) * (1 + scale[:, None]) + shift[:, None];
    x (B, S, D), scale and shift (B, D) (chunks of a projection are fine).
    out: a preallocated result (saves the allocation, ~a fifth of a call).""")

RMSNORM_MODULATE = Op(
    "rmsnorm_modulate", "Tensor x, Tensor weight, Tensor scale, Tensor shift, float eps=1e-06",
    ins=_ins(4), tag=4, variant=lambda a: a[0].dtype, params=_dtype_param,
    alloc=_row_alloc(4), scalars=lambda a: _f32.pack(a[4]), width=_last_dim,
    doc="""flashinfer-order RMSNorm(x) * weight, then * (1 + scale) + shift
    (docs/numerics.md 5; D = 2048 or 4096). The fallback is a torch fp32 chain,
    close but not flashinfer's bits.""")


# ---- qk_layernorm: q and k in one launch -----------------------------------------

def _row_levels(t):
    """How the C API binds t's rows as qk_layernorm's input (the binding's
    rule, runtime/TensorBinding.cpp): () one row stride, (inner, outer) two
    levels (inner rows one stride apart in groups `outer` elements apart: a
    fused QKV projection's q/k views), None where it would refuse (a third
    stride, negative or overlapping rows, columns not packed)."""
    shape, st = t.shape, t.stride()
    cols = shape[-1]
    if st[-1] != 1 and cols != 1:
        return None
    rows, stride, expect, levels = 1, None, 0, ()
    for i in range(t.dim() - 2, -1, -1):
        if shape[i] == 1:
            continue
        if stride is None:
            stride, rows = st[i], shape[i]
        else:
            if st[i] != expect:
                if levels:
                    return None
                levels = (rows, st[i])
            rows *= shape[i]
        expect = st[i] * shape[i]
    if stride is None:
        return ()
    if stride < 0 or (rows > 1 and stride < cols):
        return None
    if levels and levels[1] < (levels[0] - 1) * stride + cols:
        return None
    return levels


def _qk_copies(a):
    """Which of q, k is copied to contiguous first: views the binding
    refuses (more than two row levels; rows that overlap; a base off aten's
    4-element vector alignment, where the copy is what aten's layer_norm
    reads), and two-level views whose levels q and k do not share (one
    kernel serves both)."""
    q, k = a[0], a[1]
    levels = [_row_levels(t) for t in (q, k)]
    copies = [lv is None or (t.numel() > 0 and t.data_ptr() % (4 * t.element_size()) != 0)
              for t, lv in zip((q, k), levels)]
    kept = [() if c else lv for c, lv in zip(copies, levels)]
    if kept[0] != kept[1]:
        copies = [c or bool(lv) for c, lv in zip(copies, kept)]
    return tuple(copies)


def _qk_alloc(a, o, copies):
    q, k = a[0], a[1]
    qo, ko = _empty_like(q, memory_format=_CONTIG), _empty_like(k, memory_format=_CONTIG)
    return (qo, ko), (q.contiguous() if copies[0] else q, qo,
                      k.contiguous() if copies[1] else k, ko)


QK_LAYERNORM = Op(
    "qk_layernorm", "Tensor q, Tensor k, float eps=1e-06", "(Tensor, Tensor)", out=False,
    ins=_ins(2), tag=2, aux=_qk_copies, variant=lambda a: a[0].dtype,
    params=_dtype_param, alloc=_qk_alloc, scalars=lambda a: _f32.pack(a[2]), width=_last_dim,
    custom_result=lambda r: (r[0].contiguous(), r[1].contiguous()),
    doc="""(F.layer_norm(q, (D,), eps), F.layer_norm(k, (D,), eps)) in one launch;
    the results are contiguous, as eager's. Strided q/k views whose rows
    nest in at most two strides (a fused QKV projection's: qkv[..., :H*D]
    viewed as (B, S, H, D), or chunk/unbind of (B, S, 3, H, D)) are read in
    place when q and k share the strides. Views of more than two row levels,
    with overlapping rows, off aten's 4-element alignment, or whose two
    levels differ between q and k are copied to contiguous first, as aten's
    layer_norm does itself (bench/host_cost.py measures both).""")


# ---- conv_bias, residual_gate: elementwise epilogues ----------------------------

def _channels_first_params(x, max_c=None, outvec=True):
    """The kernel parameters that serve x in its own layout: for x dense
    images of C x S with S > 1 (contiguous NC[D]HW, or frames-major: a
    contiguous (N, T, C, H, W) seen as (N, C, T, H, W), S = H*W), the
    channels-first variant (the fold runs along the strided C axis in aten's
    outer-reduction order, whose output_vec_size S decides: docs/aten-reduce.md
    section 9); "" otherwise (channels-last x; any other layout, which the
    channels-last kernel refuses and the op then serves eagerly, with eager's
    bits). Every C up to max_c (the template's limit) has a config: wide rows
    run rolled (a loop over C)."""
    if x.dim() not in (4, 5) or x.shape[1] < 2:
        return ""
    if max_c is not None and x.shape[1] > max_c:
        return ""  # the template's own limit (wan_rmsnorm_silu: C <= 1024)
    s = _image_pixels(x)
    if s < 2:  # one pixel per image: aten reduces C innermost (channels-last)
        return ""
    if not outvec:  # an elementwise kernel: no reduction order to match
        return ",layout=channels_first"
    return f",layout=channels_first,outvec={4 if s % 4 == 0 else 2 if s % 2 == 0 else 1}"


def _image_pixels(x):
    """S where x is dense images of C x S, memory order (slowest first) N,
    dims 2..k-1, C, dims k.. (the library's binding takes the same); else 0.
    aten coalesces the dims outside C into one image axis, so its fold order
    is that of the contiguous images."""
    n = x.dim()
    for k in range(2, n):
        if x.permute([0] + list(range(2, k)) + [1] + list(range(k, n))).is_contiguous():
            s = 1
            for d in x.shape[k:]:
                s *= d
            return s
    return 0


def _conv_params(x, residual):
    """conv_bias's layout parameters: x's own (_channels_first_params), and
    for a channels-last x with a residual that is dense images of C x S in
    another layout (a contiguous NC[D]HW shortcut under channels-last conv
    outputs), the kernel that reads the residual S apart."""
    own = _channels_first_params(x, outvec=False)
    if own or residual is None or residual.stride() == x.stride():
        return own
    return ",residual_layout=channels_first" if _image_pixels(residual) > 1 else ""


def _conv_ins(a, o):
    ins = a[:2] if a[2] is None else a
    return ins if o is None else ins + (o,)


def _conv_alloc(a, o, aux):
    y = _empty_like(a[0]) if o is None else o
    return (y,), (a[:2] if a[2] is None else a) + (y,)


CONV_BIAS = Op(
    "conv_bias", "Tensor x, Tensor bias, Tensor? residual=None",
    ins=_conv_ins, tag=lambda a: a[2] is None,
    refuse=lambda a: None if a[1].dtype in _DT_WORD else ("dtype", f"bias {a[1].dtype}"),
    variant=lambda a: (a[0].dtype, a[1].dtype, a[2] is not None, _conv_params(a[0], a[2])),
    params=lambda k: (f"dtype={_DT_NAME[k[0]]},bias_dtype={_DT_NAME[k[1]]},"
                      f"residual={int(k[2])}{k[3]}"),
    alloc=_conv_alloc, width=_channels, custom_result=_identity,
    doc="""x.clone().add_(bias.view(1, C, 1, ...)) [+ residual]; x channels-last
    or images of C x S (contiguous NC[D]HW, 4-D or 5-D, or frames-major), the
    residual in x's layout, or any images of C x S (also under a channels-
    last x); bias (C,) in x's dtype or f32; out as ln_modulate's.""")


def _gate_kind(residual, update, gate):
    """"full" | "per_batch" | "global" (the kernel variant; the C API takes
    the gate as it is: size-1 dims merge) or None."""
    if update.shape != residual.shape:
        return None
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


def _gate_refuse(a):
    if _gate_kind(*a) is not None:
        return None
    return "shape", (f"residual {tuple(a[0].shape)}, update {tuple(a[1].shape)}, gate "
                     f"{tuple(a[2].shape)}")


RESIDUAL_GATE = Op(
    "residual_gate", "Tensor residual, Tensor update, Tensor gate",
    ins=_ins(3), tag=lambda a: None, refuse=_gate_refuse,
    variant=lambda a: (a[0].dtype, _gate_kind(*a)),
    params=lambda k: f"dtype={_DT_NAME[k[0]]},gate={k[1]}",
    alloc=_row_alloc(3), width=_last_dim,
    doc="""residual + update * gate, gate full-shape, (B, 1, D) or (1, 1, D)/(D,);
    out as ln_modulate's (out=residual updates it in place).""")


# ---- wan_rmsnorm_silu: the Wan VAE norm + SiLU ----------------------------------

def _wan_operands(k):
    """wan_rmsnorm_silu's operand names for (dtype, form, gamma dtype, bias, conv_bias)."""
    return ["x", "gamma"] + ["bias"] * k[3] + ["conv_bias"] * k[4] + ["y"]


def _wan_ins(a, o):
    x, gamma, bias, conv_bias = a[:4]
    if bias is None:
        return (x, gamma) if conv_bias is None else (x, gamma, conv_bias)
    return (x, gamma, bias) if conv_bias is None else (x, gamma, bias, conv_bias)


def _wan_alloc(a, o, aux):
    """The per-channel operands flattened to (C,), as the template takes them."""
    x, gamma, bias, conv_bias = a[:4]
    y = _empty_like(x, dtype=gamma.dtype)
    ts = (x, gamma.reshape(-1))
    if bias is not None:
        ts += (bias.reshape(-1),)
    if conv_bias is not None:
        ts += (conv_bias.reshape(-1),)
    return (y,), ts + (y,)


def _wan_refuse(a):
    x, gamma, bias, conv_bias = a[:4]
    if gamma.dtype not in (x.dtype, _F32):
        return "dtype", f"gamma {gamma.dtype} with x {x.dtype} (gamma must be x's dtype or f32)"
    if bias is not None and bias.dtype != gamma.dtype:
        return "dtype", f"bias {bias.dtype} with gamma {gamma.dtype} (the kernel takes gamma's)"
    if conv_bias is not None and conv_bias.dtype != x.dtype:
        return "dtype", f"conv_bias {conv_bias.dtype} with x {x.dtype} (the kernel takes x's)"
    return None


def _wan_check(a):
    if a[4] not in ("x", "f32"):
        raise ValueError(f"wan_rmsnorm_silu: form must be 'x' or 'f32', not {a[4]!r}")


WAN_RMSNORM_SILU = Op(
    "wan_rmsnorm_silu",
    "Tensor x, Tensor gamma, Tensor? bias=None, Tensor? conv_bias=None, str form='x'",
    out=False, check=_wan_check, ins=_wan_ins,
    tag=lambda a: (a[4], a[2] is None, a[3] is None), refuse=_wan_refuse,
    variant=lambda a: (a[0].dtype, a[4], a[1].dtype, a[2] is not None, a[3] is not None,
                       _channels_first_params(a[0], 1024)),
    params=lambda k: (f"dtype={_DT_NAME[k[0]]},form={k[1]},gamma={_DT_NAME[k[2]]},"
                      f"bias={int(k[3])},conv_bias={int(k[4])}{k[5]}"),
    operands=_wan_operands, alloc=_wan_alloc,
    scalars=lambda a: _f32.pack(float(a[0].shape[1]) ** 0.5), width=_channels,
    custom_result=_identity,
    doc="""The Wan VAE RMSNorm + SiLU on x (N, C, [T,] H, W), channels-last,
    contiguous (NC[D]HW) or frames-major (a contiguous (N, T, C, H, W)
    transposed to (N, C, T, H, W), as the VAE's frame reshapes give):
    form "x" (SGLang): silu(F.normalize(x, dim=1) * C**0.5 * gamma + bias);
    form "f32" (diffusers 0.42 WanRMS_norm + SiLU): the norm on x.float(),
    rounded to x's dtype. gamma (C values, any shape such as (C, 1, 1, 1)),
    bias (gamma's dtype; None: the float 0. diffusers adds), conv_bias (x's
    dtype; x + conv_bias first, as a conv's bias epilogue). The result is
    f32 when gamma is f32 (type promotion), else x's dtype.""")


# ---- hf_rmsnorm: HF LlamaRMSNorm, optional residual and modulation -------------

def _hf_operands(k):
    """hf_rmsnorm's operand names for (dtype, weight dtype, residual, modulate)."""
    return (["x"] + ["residual"] * k[2] + ["weight"] + ["scale", "shift"] * k[3]
            + ["sum"] * k[2] + ["y"])


def _hf_ins(a, o):
    x, weight, _, residual, scale, shift = a
    ts = (x, weight) if residual is None else (x, residual, weight)
    return ts if scale is None else ts + (scale, shift)


def _hf_alloc(a, o, aux):
    x = a[0]
    y = _empty_like(x, dtype=a[1].dtype, memory_format=_CONTIG)
    if a[3] is None:
        return (y,), _hf_ins(a, o) + (y,)
    s = _empty_like(x, memory_format=_CONTIG)
    return (y, s), _hf_ins(a, o) + (s, y)


def _hf_check(a):
    if (a[4] is None) != (a[5] is None):
        raise ValueError("hf_rmsnorm: scale and shift go together")


HF_RMSNORM = Op(
    "hf_rmsnorm",
    "Tensor x, Tensor weight, float eps, Tensor? residual=None, Tensor? scale=None, "
    "Tensor? shift=None", "Tensor[]", out=False, check=_hf_check,
    ins=_hf_ins, tag=lambda a: (a[2], a[3] is None, a[4] is None),
    refuse=lambda a: None if a[1].dtype in (a[0].dtype, _F32) else (
        "dtype", f"weight {a[1].dtype} with x {a[0].dtype} (x's dtype or f32)"),
    variant=lambda a: (a[0].dtype, a[1].dtype, a[3] is not None, a[4] is not None),
    params=lambda k: (f"dtype={_DT_NAME[k[0]]},weight={_DT_NAME[k[1]]},residual={int(k[2])},"
                      f"modulate={int(k[3])}"),
    operands=_hf_operands, alloc=_hf_alloc, scalars=lambda a: _f32.pack(a[2]),
    width=_last_dim,
    # One return type for both variants: [y], or [y, x + residual].
    custom_result=lambda r: [t.contiguous() for t in (r if isinstance(r, tuple) else (r,))],
    doc="""HF LlamaRMSNorm: h = x.float(); y = weight * (h * rsqrt(mean(h*h, -1)
    + eps)).to(x.dtype), in aten's reduction order. residual: x = x +
    residual first, and the op returns (y, that sum). scale and shift (B, D)
    with x (B, S, D): then y * (1 + scale) + shift per batch. weight is x's
    dtype or f32 (then y is f32).""")

OPS = (LN_MODULATE, QK_LAYERNORM, CONV_BIAS, RESIDUAL_GATE, RMSNORM_MODULATE,
       WAN_RMSNORM_SILU, HF_RMSNORM)


# ---- the direct functions ---------------------------------------------------------

def parameters(op):
    """[(torch type, name, default text or None)] of op.args."""
    out = []
    for part in op.args.split(", "):
        decl, _, default = part.partition("=")
        typ, name = decl.split()
        out.append((typ, name, default or None))
    return out


def define(name, params, extra, body, scope):
    """A function `name` with op parameters `params` (parameters(op)) then
    the keyword text `extra`, and `body` (its lines, over `a`, the
    parameters as a tuple): a real signature, so no *args cost per call
    and defaults filled as torch.library needs them."""
    sig = ", ".join(n if d is None else f"{n}={d}" for _, n, d in params)
    src = (f"def {name}({sig}{', ' + extra if extra else ''}):\n"
           f"    a = ({', '.join(n for _, n, _ in params)},)\n" + body)
    exec(compile(src, f"<bitfold.torch.{name}>", "exec"), scope)
    return scope[name]


def fast_source(plain, result, args="a"):
    """Source lines (indented 4) that serve a warm call in C where `plain`
    (source text) holds, keyed on the expression `args` (the arguments,
    plus out= where the op has it): its result (the expression `result`
    over r), or on to the lines after them (no C module: nothing)."""
    if _fast.run is None:
        return ""
    test = "_config.verify != 'once', _config.mode == 'auto'"
    return (f"    if {plain}:\n        r = _fast(_sites, {args}, {test})\n"
            f"        if r is not None:\n            return {result}\n")


def direct(op):
    """The direct function of an op entry: its own parameters, then out=
    (where the op has it), verify= and mode=; the site lookup inline
    (_ops.hit_source), then one call into _ops.hit (or _ops.call)."""
    # A warm call in C first (_fast.py): plain calls only.
    body = fast_source("verify is None and mode is None", "r",
                       "a if out is None else a + (out,)" if op.out else "a")
    body += "    _check(a)\n" if op.check is not None else ""
    # The site key and a remembered refusal inline where the key is one
    # expression (a warm call's and a refused call's host time).
    o = "out" if op.out else "None"
    key = key_source(op.ins, op.tag_arg, "out" if op.out else None,
                     [n for _, n, _ in parameters(op)])
    if key is None:
        run = f"    return _call(_op, a, {o}, verify, mode)\n"
    else:
        run = (hit_source(key, "out" if op.out else None, "mode", chain_source(op)) +
               f"    return _hit(_op, a, {o}, verify, mode, k, ent)\n")
    if op.explain is None:
        body += run
    else:  # arguments checked only when a call fails (free while none does)
        body += ("    try:\n" + textwrap.indent(run, "    ") +
                 "    except (AttributeError, TypeError):\n        _explain(a)\n        raise\n")
    fn = define(op.name, parameters(op),
                ("*, out=None, " if op.out else "*, ") + "verify=None, mode=None", body,
                {"_call": call, "_hit": hit, "_op": op, "_sites": op.sites, "_fast": _fast.run,
                 "_config": config, "_E": _eager, "_check": op.check,
                 "_explain": op.explain,
                 "_tag": op.tag})
    fn.__doc__, fn.__module__ = op.doc, "bitfold.torch"
    return fn


_directs = {op.name: direct(op) for op in OPS}
ln_modulate = _directs["ln_modulate"]
qk_layernorm = _directs["qk_layernorm"]
conv_bias = _directs["conv_bias"]
residual_gate = _directs["residual_gate"]
rmsnorm_modulate = _directs["rmsnorm_modulate"]
wan_rmsnorm_silu = _directs["wan_rmsnorm_silu"]
hf_rmsnorm = _directs["hf_rmsnorm"]

