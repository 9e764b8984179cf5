"""bitfold ops for PyTorch: bit-exact fused kernels with eager fallback.

Every op exists twice:
  bitfold.torch.ln_modulate(x, scale, shift, eps)        direct: least host
                                                         time, eager code
  torch.ops.bitfold.ln_modulate(x, scale, shift, eps)    registered custom op
                                                         with a fake impl:
                                                         torch.compile
                                                         (fullgraph) and
                                                         CUDA graphs

Ops: ln_modulate, qk_layernorm (q and k, one launch), conv_bias,
residual_gate, rmsnorm_modulate, wan_rmsnorm_silu (SGLang's and diffusers'
Wan VAE norm + SiLU), hf_rmsnorm (HF LlamaRMSNorm, optional residual and
modulation; torch.ops.bitfold.hf_rmsnorm returns [y] or [y, x + residual]).
Outputs come from torch's caching allocator (or `out=`, on the direct row
ops); kernels run on torch's current stream. qk_layernorm reads the strided
q/k views of a fused QKV projection in place (rows in two strides: heads
D apart, tokens 3*H*D apart); views of more than two row strides are
copied to contiguous first, as aten's layer_norm copies them itself
(bench/host_cost.py measures both).

Fallback (mode "auto", the default): where a guard rejects the inputs
(dtype, device, requires_grad, empty, or the C API's shape/stride/alignment
checks) the op computes its eager chain, counts the reason in stats() and
warns once per reason. configure(mode="strict") raises BitfoldFallback
instead. These ops have no autograd: with grad enabled and an input that
requires grad, they fall back to eager (which records the graph).

Host cost: the first call at a layout (dtypes, shapes, strides, devices,
scalars) takes the checked path and prepares a launcher; later calls at
that layout reuse it (bench/host_cost.py). The C API still validates every
launch, addresses' alignment included.

verify="once": the first call per (op, dtype, width, device) also runs the
eager chain and compares bit for bit (NaN where NaN); a mismatch disables
the op for the process, warns once with the first differing index, and
returns the eager result. Verification is skipped while a CUDA graph is
being captured (it needs a host sync) and happens at the next call outside.

CUDA graphs: warm calls inside a capture are captured like any others. The
first call of a new shape class compiles or loads a module; the runtime
does that with the thread's capture mode relaxed (a global-mode capture,
torch.cuda.graph's default, refuses module loads on every thread and is
invalidated by a refused one), so capturing a cold shape works, and so does
a first call on another thread while one captures; warming shapes before
capture keeps compiles out of it.

Compiles never stall a call: the default runtime compiles a new shape class
in the background (async compile mode) while the op serves its eager chain
(the same bits; counted as "compiling" in stats(), not as a fallback), and
the kernel from the first call after the compile finished. A compile that
fails leaves its layout on eager (a "compile" fallback, warned once). A
CUDA graph capture, strict mode and ops without an eager chain wait for
the compile instead. configure(async_compile=False) or $BITFOLD_ASYNC_COMPILE=0 makes
every first call wait for its compile (what the GPU tests and benches use);
wait_for_compiles() waits for the pending ones (before timing a model, or
capturing new shapes in a CUDA graph).
"""
import torch as _torch  # noqa: F401  (bitfold.torch needs torch)

import bitfold as _bitfold

from . import _ops
from ._ops import (BitfoldFallback, config, reset_stats, stats,  # noqa: F401
                   wait_for_compiles)
from ._table import (conv_bias, hf_rmsnorm, ln_modulate, qk_layernorm,  # noqa: F401
                     residual_gate, rmsnorm_modulate, wan_rmsnorm_silu)
from . import _custom  # noqa: F401  (registers torch.ops.bitfold.*)
from ._patch import patch, unpatch  # noqa: F401
from ._runtime import Kernel, Runtime  # noqa: F401
from ._user import kernel, op_from_source  # noqa: F401
from ._table import OPS as _OPS

OPS = tuple(op.name for op in _OPS)


# The default runtime compiles new shapes in the background while the ops
# serve their eager chains (configure(async_compile=False) or
# $BITFOLD_ASYNC_COMPILE=0: every first call waits for its compile).
_bitfold._default_async = True


def configure(mode=None, verify=None, async_compile=None):
    """Process-wide defaults: mode "auto" | "strict", verify "off" | "once",
    async_compile True | False (the default runtime's compile mode; also
    switches a default runtime made already)."""
    if async_compile is not None:
        _ops.set_async_compile(bool(async_compile))
    if mode is not None:
        if mode not in ("auto", "strict"):
            raise ValueError(f"mode must be 'auto' or 'strict', not {mode!r}")
        config.mode = mode
    if verify is not None:
        if verify not in ("off", "once"):
            raise ValueError(f"verify must be 'off' or 'once', not {verify!r}")
        config.verify = verify
    return {"mode": config.mode, "verify": config.verify,
            "async_compile": _bitfold.default_async_compile()}
