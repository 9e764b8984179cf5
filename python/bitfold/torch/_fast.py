"""The warm call in C (python/native/fast.c, module `_bitfold_fast`).

Where torch has DLPack's C exchange API (torch.Tensor.__dlpack_c_exchange_api__,
torch >= 2.11) and the module was built, a warm call of a direct op or a
torch.ops custom op is served in C: the layout key, the site lookup, the
outputs' allocation and the prepared launch (or a remembered refusal's
chain), with no Python frame between the op's own function and the
driver. The Python path (_ops.call) stays the reference: it registers
here, after its own checked launch, only sites whose launch it can state
as argument positions and fresh dense outputs; everything else (out=,
verify=, mode=, copies of operands, other layouts, grad, a rejected
launch, a shape class still compiling) reaches it as before. Inside a CUDA
graph capture a warm call is served here too and captured like any other
launch.

On by default (the H200 oracle ran tests/gpu/test_fast_path.py and the op
suites with it on): it looks for the module next to $BITFOLD_LIB, inside
the package (bitfold/lib), then in a source checkout's build/python;
BITFOLD_FAST=0 turns it off, BITFOLD_FAST=<path> loads that file.
"""
import ctypes
import functools
import importlib.util
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAME = "_bitfold_fast.abi3.so"
why_not = None  # why the C path is off, for bench/host_cost.py and tests
# The tensor types served as they are (not fake or functional subclasses):
# the C path's and the custom ops' test alike.
PLAIN = (torch.Tensor, torch.nn.Parameter)


def _candidates():
    env = os.environ.get("BITFOLD_FAST", "")
    if env == "0":
        return []
    if env not in ("", "1"):
        return [env]
    lib = os.environ.get("BITFOLD_LIB")
    near = [os.path.join(os.path.dirname(lib), _NAME)] if lib else []
    return near + [os.path.join(_HERE, "..", "lib", _NAME),
                   os.path.join(_HERE, "..", "..", "..", "build", "python", _NAME)]


def _load():
    global why_not
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        why_not = f"torch {torch.__version__} has no DLPack C exchange API"
        return None
    paths = [p for p in _candidates() if os.path.exists(p)]
    if not paths:
        why_not = "off (BITFOLD_FAST=0)" \
            if os.environ.get("BITFOLD_FAST") == "0" else f"{_NAME} not found"
        return None
    try:
        spec = importlib.util.spec_from_file_location("_bitfold_fast", paths[0])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.init(api, *PLAIN, torch.is_grad_enabled)
    except (ImportError, OSError, RuntimeError, AttributeError) as e:
        why_not = f"{paths[0]}: {e}"
        return None
    return module


module = _load()
run = module.run if module is not None else None

# The C part's allocation of fresh outputs: torch's own C functions where
# this torch exports them (libtorch's AOTI C shim: aoti_torch_empty_strided,
# and libtorch_python's THPVariable_Wrap(const at::TensorBase &)), the same
# at::empty_strided as torch.empty_strided without its Python argument
# parsing; else torch's Python factories. BITFOLD_FAST_EMPTY=0 keeps the
# factories. `empty_via` says which.
_SHIM = ("aoti_torch_empty_strided", "aoti_torch_get_data_ptr",
         "aoti_torch_delete_tensor_object", "_Z16THPVariable_WrapRKN2at10TensorBaseE")
_shim_lib = None
empty_via = "torch factories"


def _bind_shim():
    global _shim_lib, empty_via
    if module is None:
        return
    if os.environ.get("BITFOLD_FAST_EMPTY") == "0":
        empty_via = "torch factories (BITFOLD_FAST_EMPTY=0)"
        return
    try:  # torch._C is loaded: this finds it and the libraries it links
        lib = ctypes.CDLL(torch._C.__file__)
        addrs = [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in _SHIM]
    except (OSError, AttributeError) as e:
        empty_via = f"torch factories (no C allocation in torch {torch.__version__}: {e})"
        return
    module.init_empty(*addrs)
    _shim_lib, empty_via = lib, "torch's C allocation"


_bind_shim()


def _torch_code(fn, name):
    f = getattr(_shim_lib, f"aoti_torch_{fn}_{name}", None)
    if f is None:
        return None
    f.restype = ctypes.c_int32
    return f()


@functools.lru_cache(maxsize=None)
def _codes(dtype, device_type):
    """torch's C codes of a dtype and a device type, or None."""
    d = _torch_code("dtype", str(dtype).removeprefix("torch."))
    t = _torch_code("device_type", device_type)
    return None if d is None or t is None else (d, t)


def _shim_shape(y):
    """(sizes, strides, dtype, device type, device index) of fresh output
    y in torch's C codes, or None (the factory makes it)."""
    codes = _codes(y.dtype, y.device.type) if _shim_lib is not None else None
    if codes is None:
        return None
    index = y.device.index if y.device.index is not None else -1
    return tuple(y.shape), y.stride(), codes[0], codes[1], index


def _plain(v):
    return type(v) in PLAIN


def _arg_of(a, t):
    """The index of the argument t is, or is a same-address view of; None
    where that is not exactly one argument."""
    hits = [i for i, v in enumerate(a) if v is t]
    if not hits and t._base is not None:
        hits = [i for i, v in enumerate(a) if _plain(v) and v._base is t._base
                and v.data_ptr() == t.data_ptr()]
    return hits[0] if len(hits) == 1 else None


def _dense(y):
    """Whether y's elements fill exactly y.numel() places of its storage in
    some order of its dims (contiguous, channels-last, ...)."""
    order = sorted(range(y.dim()), key=lambda d: -y.stride(d))
    return y.permute(order).is_contiguous()


def _out_spec(a, y):
    """(argument, in place, make, like, shape) of an output: the argument it
    is (out=, an output written over an input); or for a fresh dense one the
    argument it takes its shape and device from and how to allocate it, the
    way that is cheapest and gives its exact shape, strides and dtype:
    torch.empty_like(that argument) (like) or torch.empty_strided bound to
    them, and the same through torch's C allocation (shape: _shim_shape);
    None where neither."""
    i = next((i for i, v in enumerate(a) if v is y), None)
    if i is not None:
        return i, True, None, False
    i = next((i for i, v in enumerate(a) if _plain(v) and v.shape == y.shape
              and v.device == y.device), None)
    if i is None or not _dense(y):
        return None
    twin = torch.empty_like(a[i])
    if twin.dtype == y.dtype and twin.stride() == y.stride():
        return i, False, torch.empty_like, True, _shim_shape(y)
    make = functools.partial(torch.empty_strided, tuple(y.shape), y.stride(),
                             dtype=y.dtype, device=y.device)
    return i, False, make, False, _shim_shape(y)


def _slots(a, outs, ts):
    """Each launch operand as an argument index or -(output index) - 1."""
    slots = []
    for t in ts:
        j = next((j for j, y in enumerate(outs) if y is t), None)
        i = _arg_of(a, t) if j is None else -j - 1
        if i is None:
            return None
        slots.append(i)
    return tuple(slots)


def key_args(a, out):
    """The arguments the C path keys a call on: a, plus out= where given."""
    return a if out is None else a + (out,)


def _same_view(t):
    return t.as_strided(t.size(), t.stride(), t.storage_offset())


def launch_site(op, a, out, aux, launch, verified, counts):
    """(key, site) of the C part of the launcher site of op's call on
    arguments a (and out=); None where its launch is not argument positions
    and outputs that are fresh and dense or arguments. The op's alloc
    runs once more, on a distinct view of each tensor argument, so that an
    argument passed twice (x, x) still has one position per operand. The
    views keep every stride (view_as would recompute a size-1 dim's), so
    the outputs' strides are those of the Python path's call."""
    prepared = getattr(launch, "prepared", None)
    if module is None or prepared is None:
        return None
    key = module.key(key_args(a, out))
    if key is None:
        return None
    views = tuple(_same_view(v) if _plain(v) else v for v in a)
    ov = None if out is None else _same_view(out)
    outs, ts = op.alloc(views, ov, aux)
    args = key_args(views, ov)
    slots = _slots(args, outs, ts)
    specs = tuple(_out_spec(args, y) for y in outs)
    if slots is None or None in specs:
        return None
    entry = module.entry(prepared.handle.value, launch.address, slots, specs, verified)
    return key, (entry, launch, counts)


def refusal_site(a, chain, counts, reason):
    """(key, site) of the C part of a remembered refusal (auto mode,
    counted): the chain serves the call, counted under reason; or None."""
    key = module.key(a) if module is not None else None
    if key is None:
        return None
    return key, (module.entry(None, None, (), (), False, True), chain, counts, reason)


def function_address(fn):
    """The address of a ctypes function (the C path calls it directly)."""
    return ctypes.cast(fn, ctypes.c_void_p).value
