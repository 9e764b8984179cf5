"""The eager PyTorch chains each bitfold op replaces: the fallback, and the
reference verify="once" compares against.

ln_modulate, qk_layernorm, conv_bias and residual_gate are the kernels'
contracts (NUMERICS.md sections 1-4: bit for bit). rmsnorm_modulate's
contract is flashinfer's RMSNorm order, which no torch chain reproduces, and
wan_rmsnorm_silu is not bit-exact yet (NUMERICS.md 6): their chains here are
close fallbacks, not references (verify="once" would disable those ops).
"""
import torch
import torch.nn.functional as F


def _per_batch(t, x):
    """(B, D) -> broadcastable against x (B, ..., D)."""
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


def wan_rmsnorm_silu(x, gamma, bias, eps=1e-12):
    c = x.shape[1]
    view = [1, c] + [1] * (x.dim() - 2)
    v = F.normalize(x, dim=1, eps=eps) * (c ** 0.5) * gamma.view(*view) + bias.view(*view)
    return F.silu(v)
