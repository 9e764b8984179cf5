"""bitfold.torch.Runtime: a bitfold.Runtime whose kernels launch torch
tensors directly, on torch's current stream (what the GPU oracle tests and
the benches use to call a template's kernel by hand)."""
import torch

import bitfold
from . import _ops

_WORDS = _ops._WORD


def _meta(tensors, dev):
    words = []
    for t in tensors:
        words += (_WORDS.get(t.dtype, 0) | dev << 32, t.dim())
        words += t.shape
        words += t.stride()
    return _ops.struct.pack(f"{len(words)}q", *words), len(words)


class Kernel(bitfold.Kernel):
    def launch(self, tensors, scalars=(), stream=None):
        """Launches on torch tensors (their addresses, shapes and strides
        as they are: views keep their strides) in the kernel's order, on
        `stream` (a CUstream as int; None: torch's current stream). Other
        tensors (DLPack, RawTensor) go to bitfold.Kernel.launch."""
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            return super().launch(tensors, scalars, stream)
        dev = max(tensors[0].get_device(), 0)
        meta, nmeta = _meta(tensors, dev)
        data = _ops._packers[len(tensors)](tensors)
        if stream is None and tensors[0].is_cuda:
            stream = _ops._raw_stream(dev)
        return self.launch_raw(data, meta, nmeta, len(tensors), scalars, stream or None)


class Runtime(bitfold.Runtime):
    """bitfold.Runtime whose kernel()/kernel_from_source() kernels launch
    torch tensors (Kernel.launch above)."""

    def _new_kernel(self, handle, name, params):
        return Kernel(self, handle, name, params)
