"""bitfold from Python through its C API (ctypes), on torch tensors.

    import bitfold_torch as bf
    rt = bf.Runtime()                       # libbitfold.so from $BITFOLD_LIB
    k = rt.kernel("ln_modulate", "dtype=bf16")
    k.launch([x, scale, shift, y], [1e-6])  # on torch's current stream

Tensors are passed as DLPack DLTensor structs built from torch's own
metadata (pointer, shape, strides in elements), so views and chunks keep
their strides; nothing is copied. A kernel keeps the structs of its last
256 argument lists (keyed by pointer, dtype, shape, strides, device and the
scalars' f32 bits), so relaunching the same tensors costs about 15 us of
host time per launch instead of 35-50 (H200 machine, Python 3.12).
"""
import ctypes
import os
import struct

import torch


# The DLPack structs are the package's (python/bitfold/_lib.py).
from bitfold._lib import DLDataType, DLDevice, DLTensor  # noqa: E402


_DTYPES = {
    torch.bfloat16: (4, 16),
    torch.float16: (2, 16),
    torch.float32: (2, 32),
    torch.int32: (0, 32),
    torch.uint8: (1, 8),
}


class BitfoldError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _default_lib():
    path = os.environ.get("BITFOLD_LIB")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "build", "runtime", "libbitfold.so"),):
        if os.path.exists(cand):
            return cand
    return "libbitfold.so"


class Runtime:
    def __init__(self, lib_path=None, cache_dir=None):
        self.lib = ctypes.CDLL(lib_path or _default_lib())
        lib = self.lib
        lib.bitfold_last_error.restype = ctypes.c_char_p
        lib.bitfold_status_name.restype = ctypes.c_char_p
        lib.bitfold_status_name.argtypes = [ctypes.c_int]
        lib.bitfold_version.restype = ctypes.c_char_p
        lib.bitfold_runtime_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.bitfold_runtime_destroy.argtypes = [ctypes.c_void_p]
        lib.bitfold_template.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.POINTER(ctypes.c_void_p)]
        lib.bitfold_kernel_num_tensors.argtypes = [ctypes.c_void_p]
        lib.bitfold_kernel_num_scalars.argtypes = [ctypes.c_void_p]
        lib.bitfold_kernel_set_config.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.bitfold_kernel_set_pdl.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.bitfold_launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(DLTensor)),
                                       ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_int,
                                       ctypes.c_void_p]
        self.handle = ctypes.c_void_p()
        if cache_dir is not None:
            os.environ["BITFOLD_CACHE_DIR"] = cache_dir
        self._check(lib.bitfold_runtime_create(None, ctypes.byref(self.handle)))
        self._kernels = {}

    def _check(self, status):
        if status != 0:
            name = self.lib.bitfold_status_name(status).decode()
            raise BitfoldError(name, self.lib.bitfold_last_error().decode())

    @property
    def version(self):
        return self.lib.bitfold_version().decode()

    def kernel(self, name, params=""):
        key = (name, params)
        if key not in self._kernels:
            h = ctypes.c_void_p()
            self._check(self.lib.bitfold_template(self.handle, name.encode(), params.encode(),
                                                  ctypes.byref(h)))
            self._kernels[key] = Kernel(self, h)
        return self._kernels[key]

    def kernels(self):
        """The kernels looked up so far."""
        return list(self._kernels.values())

    def close(self):
        if self.handle:
            self.lib.bitfold_runtime_destroy(self.handle)
            self.handle = ctypes.c_void_p()


def to_dltensor(t):
    """A DLTensor describing torch tensor `t` (kept alive by the caller)."""
    code, bits = _DTYPES[t.dtype]
    shape = (ctypes.c_int64 * t.dim())(*t.shape)
    strides = (ctypes.c_int64 * t.dim())(*t.stride())
    dev = DLDevice(2 if t.is_cuda else 1, t.device.index if t.is_cuda else 0)
    d = DLTensor(ctypes.c_void_p(t.data_ptr()), dev, t.dim(), DLDataType(code, bits, 1),
                 shape, strides, 0)
    d._keep = (shape, strides)
    return d


class Kernel:
    # Prepared ctypes arguments per (tensors' pointer, dtype, shape, strides,
    # device; scalars' bits): building DLTensors costs tens of microseconds
    # of Python per launch, more than the launch itself, and the same
    # tensors are launched again and again (decode steps, graphs, benches).
    ARG_CACHE_LIMIT = 256

    def __init__(self, rt, handle):
        self.rt = rt
        self.handle = handle
        self.num_tensors = rt.lib.bitfold_kernel_num_tensors(handle)
        self.num_scalars = rt.lib.bitfold_kernel_num_scalars(handle)
        self._args = {}

    def set_config(self, config):
        self.rt._check(self.rt.lib.bitfold_kernel_set_config(
            self.handle, config.encode() if config else None))

    def set_pdl(self, enable):
        """Programmatic dependent launch for later launches (see bitfold.h)."""
        self.rt._check(self.rt.lib.bitfold_kernel_set_pdl(self.handle, 1 if enable else 0))

    def launch(self, tensors, scalars=(), stream=None):
        # Scalars by their f32 bits: 0.0 and -0.0 are different launches.
        try:
            key = (tuple((t.data_ptr(), t.dtype, t.shape, t.stride(), t.device)
                         for t in tensors), struct.pack(f"{len(scalars)}f", *scalars))
        except (AttributeError, TypeError, OverflowError, struct.error):
            key = None  # not cacheable: build the arguments (and their errors) below
        args = self._args.get(key) if key is not None else None
        if args is None:
            dl = [to_dltensor(t) for t in tensors]
            ptrs = (ctypes.POINTER(DLTensor) * len(dl))(*[ctypes.pointer(d) for d in dl])
            sc = (ctypes.c_float * max(1, len(scalars)))(*scalars)
            args = (ptrs, len(dl), sc, len(scalars), dl)
            if key is not None:
                if len(self._args) >= self.ARG_CACHE_LIMIT:
                    self._args.clear()
                self._args[key] = args
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream if torch.cuda.is_available() else 0
        self.rt._check(self.rt.lib.bitfold_launch(self.handle, args[0], args[1], args[2],
                                                  args[3], ctypes.c_void_p(stream)))
