"""The ops registered with torch.library (namespace `bitfold`), for
torch.compile(fullgraph=True) and CUDA graphs: torch.ops.bitfold.<op>.

Each body is the direct op; each fake impl runs the op's eager chain on the
fake tensors, so shapes, dtypes and strides are the eager ones. The row-major
ops return contiguous results on both sides (hf_rmsnorm a list: [y], or
[y, x + residual]); conv_bias and wan_rmsnorm_silu
write into empty_like(x), which is the eager chain's layout wherever the
kernel accepts the operands (dense channels-last), and fall back otherwise.
"""
from typing import Optional

import torch

from . import _eager, _ops

_NS = "bitfold"


def _verify_arg(v):
    return None if v == "default" else v


@torch.library.custom_op(f"{_NS}::ln_modulate", mutates_args=())
def ln_modulate(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float,
                verify: str = "default") -> torch.Tensor:
    out = _ops.ln_modulate(x, scale, shift, eps, verify=_verify_arg(verify))
    return out if out.is_contiguous() else out.contiguous()


@ln_modulate.register_fake
def _(x, scale, shift, eps, verify="default"):
    return _eager.ln_modulate(x, scale, shift, eps).contiguous()


@torch.library.custom_op(f"{_NS}::qk_layernorm", mutates_args=())
def qk_layernorm(q: torch.Tensor, k: torch.Tensor, eps: float,
                 verify: str = "default") -> tuple[torch.Tensor, torch.Tensor]:
    qo, ko = _ops.qk_layernorm(q, k, eps, verify=_verify_arg(verify))
    return qo.contiguous(), ko.contiguous()


@qk_layernorm.register_fake
def _(q, k, eps, verify="default"):
    qo, ko = _eager.qk_layernorm(q, k, eps)
    return qo.contiguous(), ko.contiguous()


@torch.library.custom_op(f"{_NS}::conv_bias", mutates_args=())
def conv_bias(x: torch.Tensor, bias: torch.Tensor, residual: Optional[torch.Tensor] = None,
              verify: str = "default") -> torch.Tensor:
    return _ops.conv_bias(x, bias, residual, verify=_verify_arg(verify))


@conv_bias.register_fake
def _(x, bias, residual=None, verify="default"):
    return _eager.conv_bias(x, bias, residual)


@torch.library.custom_op(f"{_NS}::residual_gate", mutates_args=())
def residual_gate(residual: torch.Tensor, update: torch.Tensor, gate: torch.Tensor,
                  verify: str = "default") -> torch.Tensor:
    out = _ops.residual_gate(residual, update, gate, verify=_verify_arg(verify))
    return out if out.is_contiguous() else out.contiguous()


@residual_gate.register_fake
def _(residual, update, gate, verify="default"):
    return _eager.residual_gate(residual, update, gate).contiguous()


@torch.library.custom_op(f"{_NS}::rmsnorm_modulate", mutates_args=())
def rmsnorm_modulate(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                     shift: torch.Tensor, eps: float, verify: str = "default") -> torch.Tensor:
    out = _ops.rmsnorm_modulate(x, weight, scale, shift, eps, verify=_verify_arg(verify))
    return out if out.is_contiguous() else out.contiguous()


@rmsnorm_modulate.register_fake
def _(x, weight, scale, shift, eps, verify="default"):
    return _eager.rmsnorm_modulate(x, weight, scale, shift, eps).contiguous()


@torch.library.custom_op(f"{_NS}::wan_rmsnorm_silu", mutates_args=())
def wan_rmsnorm_silu(x: torch.Tensor, gamma: torch.Tensor, bias: Optional[torch.Tensor] = None,
                     conv_bias: Optional[torch.Tensor] = None, form: str = "x",
                     verify: str = "default") -> torch.Tensor:
    return _ops.wan_rmsnorm_silu(x, gamma, bias, conv_bias, form, verify=_verify_arg(verify))


@wan_rmsnorm_silu.register_fake
def _(x, gamma, bias=None, conv_bias=None, form="x", verify="default"):
    return _eager.wan_rmsnorm_silu(x, gamma, bias, conv_bias, form)


# One return type for both variants: [y], or [y, x + residual] with a residual.
@torch.library.custom_op(f"{_NS}::hf_rmsnorm", mutates_args=())
def hf_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float,
               residual: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None,
               shift: Optional[torch.Tensor] = None,
               verify: str = "default") -> list[torch.Tensor]:
    out = _ops.hf_rmsnorm(x, weight, eps, residual, scale, shift, verify=_verify_arg(verify))
    return [t.contiguous() for t in (out if residual is not None else (out,))]


@hf_rmsnorm.register_fake
def _(x, weight, eps, residual=None, scale=None, shift=None, verify="default"):
    out = _eager.hf_rmsnorm(x, weight, eps, residual, scale, shift)
    return [t.contiguous() for t in (out if residual is not None else (out,))]
