"""The eager PyTorch chains each bitfold op replaces: the fallback, and the
reference verify="once" compares against.

ln_modulate, qk_layernorm, conv_bias, residual_gate, wan_rmsnorm_silu
(both forms) and hf_rmsnorm are the kernels' contracts, bit for bit
(docs/numerics.md; the last two in aten's reduction order, docs/aten-reduce.md).
rmsnorm_modulate's contract is flashinfer's RMSNorm order, which no torch
chain reproduces: its chain here is a close fallback, not a reference
(verify="once" would disable that op).
"""
import torch
import torch.nn.functional as F


def _per_batch(t, x):
    """(B, D) -> broadcastable against x (B, ..., D). unsqueeze where t is
    (B, D) and x (B, S, D), the common case: a fallback's chain runs it
    twice, and it costs half a microsecond less than reshape (a refused
    call's host time is the chain's)."""
    if t.dim() == 2 and x.dim() == 3:
        return t.unsqueeze(1)
    return t.reshape(t.shape[0], *([1] * (x.dim() - 2)), t.shape[-1])


def ln_modulate(x, scale, shift, eps):
    y = F.layer_norm(x, (x.shape[-1],), eps=eps)
    return y * (1 + _per_batch(scale, x)) + _per_batch(shift, x)


def qk_layernorm(q, k, eps):
    return (F.layer_norm(q, (q.shape[-1],), eps=eps),
            F.layer_norm(k, (k.shape[-1],), eps=eps))


def conv_bias(x, bias, residual=None):
    view = [1, x.shape[1]] + [1] * (x.dim() - 2)
    y = x.clone().add_(bias.to(x.dtype).view(*view))
    return y if residual is None else y + residual


def residual_gate(residual, update, gate):
    return residual + update * gate


def rmsnorm_modulate(x, weight, scale, shift, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = ((xf * rstd) * (weight.float() + 0.0)).to(x.dtype)
    return y * (1 + _per_batch(scale, x)) + _per_batch(shift, x)


def _channel_view(t, x):
    """A per-channel tensor (C values, any shape) as (1, C, 1, ...) for x."""
    return t.reshape(1, x.shape[1], *([1] * (x.dim() - 2)))


def wan_rmsnorm_silu(x, gamma, bias=None, conv_bias=None, form="x", eps=1e-12):
    """form "x": SGLang's Wan VAE RMS_norm + SiLU, F.normalize on x itself;
    form "f32": diffusers 0.42 WanRMS_norm (F.normalize(x.float()) rounded
    to x's dtype) + nn.SiLU. bias None is diffusers' `+ 0.` (a float);
    conv_bias is a conv's bias epilogue, added to x in place first."""
    if conv_bias is not None:
        x = x.clone().add_(_channel_view(conv_bias, x))
    n = F.normalize(x.float() if form == "f32" else x, dim=1, eps=eps).to(x.dtype)
    v = n * (x.shape[1] ** 0.5) * _channel_view(gamma, x)
    v = v + (0.0 if bias is None else _channel_view(bias, x))
    return F.silu(v)


def hf_rmsnorm(x, weight, eps, residual=None, scale=None, shift=None):
    """HF LlamaRMSNorm (transformers), with an optional residual add first
    (returns (y, x + residual)) and modulation after."""
    s = None
    if residual is not None:
        x = s = x + residual
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    y = weight * h.to(x.dtype)
    if scale is not None:
        y = y * (1 + _per_batch(scale, x)) + _per_batch(shift, x)
    return y if s is None else (y, s)
