"""bitfold from Python: JIT-compiled kernels that match PyTorch eager bit for bit.

The core (this module) needs only the standard library: it loads
libbitfold.so (shipped inside the wheel; $BITFOLD_LIB overrides) and
launches kernels on DLPack tensors or on raw device pointers. PyTorch ops,
fallbacks and model patches are in `bitfold.torch`.

    import bitfold
    rt = bitfold.Runtime()
    k = rt.kernel("ln_modulate", dtype="bf16")
    k.launch([x, scale, shift, y], [1e-6], stream=s)   # DLPack tensors
"""
import ctypes
import os
import struct
import threading
from collections import namedtuple

from . import _lib

__all__ = ["BitfoldError", "Runtime", "Kernel", "RawTensor", "default_runtime",
           "kernel_from_source", "templates", "version", "DTYPE_WORDS", "raw_args"]

# DLDataType as the raw launch's dtype word: code | bits << 8 | lanes << 16.
DTYPE_WORDS = {"bf16": 4 | 16 << 8 | 1 << 16, "f16": 2 | 16 << 8 | 1 << 16,
               "f32": 2 | 32 << 8 | 1 << 16, "i32": 0 | 32 << 8 | 1 << 16,
               "u8": 1 | 8 << 8 | 1 << 16, "i8": 0 | 8 << 8 | 1 << 16,
               # DLPack 1.1's float8 codes (10, 12); u8 also binds float8.
               "f8e4m3fn": 10 | 8 << 8 | 1 << 16, "f8e5m2": 12 | 8 << 8 | 1 << 16}

RawTensor = namedtuple("RawTensor", "data dtype shape strides device")
RawTensor.__doc__ = """A CUDA tensor as raw facts: data (int address), dtype
(a DTYPE_WORDS key), shape and strides (in elements), device (ordinal)."""


class BitfoldError(RuntimeError):
    """A bitfold call failed: `status` ("BITFOLD_ERROR_SHAPE"...) and the
    library's message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class NotReady(BitfoldError):
    """BITFOLD_STATUS_NOT_READY: async compile mode (Runtime(async_compile=
    True)) and the launch's shape class is still compiling in the
    background. Nothing was launched: serve the call another way and launch
    again later."""


def _check(lib, status):
    if status != 0:
        cls = NotReady if status == _lib.STATUS_NOT_READY else BitfoldError
        raise cls(lib.bitfold_status_name(status).decode(),
                  lib.bitfold_last_error().decode())


def version(lib_path=None):
    """The library's version string."""
    return _lib.load(lib_path).bitfold_version().decode()


def templates(lib_path=None):
    """Names of the stock kernel templates."""
    lib = _lib.load(lib_path)
    return [lib.bitfold_registered_kernel_name(i).decode()
            for i in range(lib.bitfold_num_registered_kernels())]


_INT32 = (-2**31, 2**31 - 1)
_INT64 = (-2**63, 2**63 - 1)


def _int_arg(name, value, lo, hi):
    """`value` as an int in [lo, hi]; ValueError naming the argument
    otherwise (ctypes would wrap it silently)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            as_int = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be an integer, not {value!r}") from None
        if as_int != value:
            raise ValueError(f"{name} must be an integer, not {value!r}")
        value = as_int
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], not {value}")
    return value


def _closed_error():
    return BitfoldError("BITFOLD_ERROR_INVALID_ARGUMENT",
                        "the runtime is closed (Runtime.close()); its kernels "
                        "cannot be used")


def _params_text(params, kwargs):
    parts = [params] if params else []
    parts += [f"{k}={v}" for k, v in sorted(kwargs.items())]
    return ",".join(parts)


def _program_name(text):
    """NAME of the header line "bitfold.row_program NAME v1" (for repr)."""
    for line in text.splitlines():
        words = line.split(b"#", 1)[0].split()
        if len(words) >= 2 and words[0] == b"bitfold.row_program":
            return words[1].decode(errors="replace")
    return "<source>"


class Runtime:
    """A bitfold runtime: its kernels, their compiled shape classes and the
    disk cache. Thread-safe (launches and lookups from many threads)."""

    def __init__(self, lib_path=None, cache_dir=None, disk_cache=True, tune_db=None,
                 compile_threads=None, cache_max_bytes=None, tune_on_miss=None,
                 tune_budget_seconds=None, async_compile=False, quick_first=False):
        """Options as bitfold.h's bitfold_runtime_options; None keeps the
        library's default. tune_on_miss: "off", "background" or "now".
        async_compile: a launch at a shape class not compiled yet starts its
        compile in the background and raises NotReady at once
        (bitfold_runtime_set_async_compile); later launches find it.
        quick_first: a new shape class runs the config that compiles
        fastest (same bits) until its chosen config is compiled in the
        background (bitfold_runtime_set_quick_first)."""
        self.lib = _lib.load(lib_path)
        opts = _lib.RuntimeOptions()
        self.lib.bitfold_runtime_options_init(ctypes.byref(opts))
        _set_new_options(opts, compile_threads, cache_max_bytes, tune_on_miss,
                         tune_budget_seconds)
        if cache_dir is not None:
            opts.cache_dir = cache_dir.encode()
        opts.disk_cache = 1 if disk_cache else 0
        if tune_db is not None:
            opts.tune_db = tune_db.encode()
        self.handle = ctypes.c_void_p()
        self._kernels = {}
        self._lock = threading.Lock()
        _check(self.lib, self.lib.bitfold_runtime_create(ctypes.byref(opts),
                                                         ctypes.byref(self.handle)))
        if async_compile:
            self.set_async_compile(True)
        if quick_first:
            self.set_quick_first(True)

    def _live(self):
        """The runtime's handle; BitfoldError once it is closed."""
        if not self.handle:
            raise _closed_error()
        return self.handle

    def set_async_compile(self, on):
        """Turns async compile mode on or off (see __init__)."""
        fn = getattr(self.lib, "bitfold_runtime_set_async_compile", None)
        if fn is None:
            raise BitfoldError("BITFOLD_ERROR_UNSUPPORTED",
                               f"{self.lib.bitfold_path} has no async compile mode")
        _check(self.lib, fn(self._live(), 1 if on else 0))

    def set_quick_first(self, on):
        """Turns quick-first mode on or off (see __init__)."""
        fn = getattr(self.lib, "bitfold_runtime_set_quick_first", None)
        if fn is None:
            raise BitfoldError("BITFOLD_ERROR_UNSUPPORTED",
                               f"{self.lib.bitfold_path} has no quick-first mode")
        _check(self.lib, fn(self._live(), 1 if on else 0))

    @property
    def version(self):
        return self.lib.bitfold_version().decode()

    def _lookup(self, key, find):
        """The kernel cached under `key`, else find(handle_ref) -> (name,
        params) fills a new handle (once, under the lock)."""
        k = self._kernels.get(key)
        if k is None:
            self._live()
            with self._lock:
                k = self._kernels.get(key)
                if k is None:
                    h = ctypes.c_void_p()
                    name, params = find(ctypes.byref(h))
                    k = self._kernels[key] = self._new_kernel(h, name, params)
        return k

    def _new_kernel(self, handle, name, params):
        return Kernel(self, handle, name, params)

    def kernel(self, name, params="", **kwargs):
        """The kernel of template `name` with parameters as text
        ("dtype=f16,gate=per_batch") and/or keywords (dtype="f16")."""
        text = _params_text(params, kwargs)

        def find(out):
            _check(self.lib, self.lib.bitfold_kernel_from_registry(
                self.handle, name.encode(), text.encode(), out))
            return name, text
        return self._lookup((name, text), find)

    def kernel_from_source(self, text):
        """A kernel from a program in the kernel text format
        (docs/kernel-format.md; str or bytes): parsed, verified and
        registered under the program's name, then launched like a
        template's kernel (shape classes, caches, tune DB). Raises
        BitfoldError (BITFOLD_ERROR_INVALID_ARGUMENT) with "line:column:"
        for malformed text, the verifier's message for an invalid program,
        and for a name taken by a stock template or by a different program."""
        fn = getattr(self.lib, "bitfold_kernel_from_source", None)
        if fn is None:
            raise BitfoldError("BITFOLD_ERROR_UNSUPPORTED",
                               f"{self.lib.bitfold_path} has no bitfold_kernel_from_source")
        data = text.encode() if isinstance(text, str) else bytes(text)

        def find(out):
            _check(self.lib, fn(self.handle, data, len(data), out))
            return _program_name(data), ""
        return self._lookup(("<source>", data), find)

    def kernels(self):
        """The kernels looked up so far."""
        return list(self._kernels.values())

    def cache_stats(self):
        """{memory_hits, disk_hits, compiles, compile_failures}."""
        s = _lib.CacheStats()
        _check(self.lib, self.lib.bitfold_runtime_cache_stats(self._live(), ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in s._fields_}

    def prewarm_status(self, wait=False):
        """{pending, done, failed} of the prewarm compiles (Kernel.prewarm);
        with wait=True after nothing is pending. Raises BitfoldError
        (BITFOLD_ERROR_COMPILE, the first failure's message) when one failed."""
        s = _lib.PrewarmStatus()
        _check(self.lib, self.lib.bitfold_runtime_prewarm_status(
            self._live(), 1 if wait else 0, ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in s._fields_}

    def prewarm(self, kernels_and_shapes, device=0, wait=False):
        """Kernel.prewarm for each (kernel, shapes) pair; with wait=True,
        returns prewarm_status(wait=True)."""
        for kernel, shapes in kernels_and_shapes:
            kernel.prewarm(shapes, device)
        return self.prewarm_status(wait=True) if wait else None

    def close(self):
        """Destroys the runtime (synchronise launched work first). Its
        kernels raise BitfoldError afterwards (their handles died with it)."""
        with self._lock:
            if not self.handle:
                return
            for k in self._kernels.values():
                k._detach()
            self._kernels = {}
            handle, self.handle = self.handle, ctypes.c_void_p()
        self.lib.bitfold_runtime_destroy(handle)


_default = None
_default_lock = threading.Lock()
# Whether default_runtime() is created in async compile mode when
# $BITFOLD_ASYNC_COMPILE is unset: importing bitfold.torch sets it (its ops
# serve the eager chain while a shape compiles); the core alone launches
# synchronously. _async_choice: bitfold.torch.configure(async_compile=).
_default_async = False
_async_choice = None


def default_async_compile():
    """Whether the default runtime compiles in the background:
    bitfold.torch.configure(async_compile=) decides, else
    $BITFOLD_ASYNC_COMPILE=1 or 0, else on when bitfold.torch was imported."""
    if _async_choice is not None:
        return _async_choice
    env = os.environ.get("BITFOLD_ASYNC_COMPILE")
    if env in ("0", "1"):
        return env == "1"
    return _default_async


def default_quick_first(async_compile):
    """Whether the default runtime runs quick-first: $BITFOLD_QUICK_FIRST=1
    or 0, else with async compile (a new shape's kernel serves sooner)."""
    env = os.environ.get("BITFOLD_QUICK_FIRST")
    if env in ("0", "1"):
        return env == "1"
    return bool(async_compile)


def default_runtime():
    """The process-wide runtime `bitfold.torch` uses (created on first use;
    in async compile mode per default_async_compile(), quick-first per
    default_quick_first())."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                background = default_async_compile()
                _default = Runtime(async_compile=background,
                                   quick_first=default_quick_first(background))
    return _default


_ctypes_api = ctypes.pythonapi
_ctypes_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_ctypes_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def raw_args(tensors):
    """(addresses, metadata words) bitfold_launch_raw takes for RawTensors."""
    data, meta = [], []
    for t in tensors:
        data.append(t.data)
        meta += [DTYPE_WORDS[t.dtype] | t.device << 32, len(t.shape)]
        meta += list(t.shape) + list(t.strides)
    return data, meta


class Kernel:
    """One template with fixed parameters; specialised per shape class on
    first launch."""

    def __init__(self, rt, handle, name, params):
        lib = rt.lib
        self.rt, self.lib, self.handle = rt, lib, handle
        self.address = handle.value
        self.name, self.params = name, params
        self.num_tensors = lib.bitfold_kernel_num_tensors(handle)
        self.num_scalars = lib.bitfold_kernel_num_scalars(handle)
        self.num_groups = lib.bitfold_kernel_num_groups(handle)
        self.tensor_names = [lib.bitfold_kernel_tensor_name(handle, i).decode()
                             for i in range(self.num_tensors)]
        self.tensor_is_output = [bool(lib.bitfold_kernel_tensor_is_output(handle, i))
                                 for i in range(self.num_tensors)]
        self.scalar_names = [lib.bitfold_kernel_scalar_name(handle, i).decode()
                             for i in range(self.num_scalars)]
        self._raw = getattr(lib, "bitfold_launch_raw", None)
        # The same entry point without argtypes, for bitfold.torch's hot path:
        # ctypes converts untyped int/bytes/c_void_p arguments in well under
        # half the time of typed ones (callers pass the handle as c_void_p,
        # small ints, bytes, and the stream as c_void_p or None).
        self._raw_untyped = lib["bitfold_launch_raw"] if self._raw is not None else None

    def __repr__(self):
        return f"<bitfold.Kernel {self.name} {self.params!r}>"

    def _detach(self):
        """The runtime is closing: the handle dies with it. Later calls
        raise; the raw hot path passes a null handle, which the library
        refuses (BITFOLD_ERROR_INVALID_ARGUMENT)."""
        self.handle = ctypes.c_void_p()
        self.address = None

    def _live(self):
        if not self.handle:
            raise _closed_error()
        return self.handle

    def set_config(self, config):
        """Pins the tile config ("r1.t128.v8.p1") of later specialisations;
        None restores the default choice (an empty string is an error, as
        any text that is not a config)."""
        if config is not None and not isinstance(config, str):
            raise TypeError(f"config must be a str or None, not {config!r}")
        _check(self.lib, self.lib.bitfold_kernel_set_config(
            self._live(), None if config is None else config.encode()))

    def set_pdl(self, enable):
        """Programmatic dependent launch for later launches (see bitfold.h):
        True/False (or 1/0); anything else is an error, not truthiness."""
        if enable not in (True, False) or not isinstance(enable, (bool, int)):
            raise ValueError(f"enable must be True or False, not {enable!r}")
        _check(self.lib, self.lib.bitfold_kernel_set_pdl(self._live(), 1 if enable else 0))

    def prewarm(self, shapes, device=0):
        """Compiles, in the background, what launches on dense tensors of
        `shapes` (a list of the first tensor's dims, e.g. [(1, 64, 1024)])
        on CUDA device `device` will need; returns at once (bitfold_prewarm).
        A launch of a shape still compiling waits for it.
        Runtime.prewarm_status(wait=True) waits for all of them."""
        device = _int_arg("device", device, *_INT32)
        shapes = [tuple(_int_arg("shape dim", d, *_INT64) for d in s) for s in shapes]
        flat = [d for s in shapes for d in s]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        ndims = (ctypes.c_int * max(1, len(shapes)))(*[len(s) for s in shapes])
        _check(self.lib, self.lib.bitfold_prewarm(self._live(), len(shapes), dims, ndims,
                                                  device))

    def launch(self, tensors, scalars=(), stream=None):
        """Launches on `tensors` (objects with __dlpack__, or RawTensors) in
        the kernel's order (bitfold.h), on `stream` (a CUstream as int;
        None: the legacy default stream)."""
        if tensors and all(isinstance(t, RawTensor) for t in tensors):
            data, meta = raw_args(tensors)
            return self.launch_raw(struct.pack(f"{len(data)}Q", *data),
                                   struct.pack(f"{len(meta)}q", *meta), len(meta),
                                   len(tensors), scalars, stream)
        capsules = [t.__dlpack__(stream=stream) if hasattr(t, "__dlpack__") else t
                    for t in tensors]
        ptrs = (ctypes.POINTER(_lib.DLTensor) * len(capsules))()
        for i, c in enumerate(capsules):
            # DLManagedTensor begins with its DLTensor; the capsule keeps
            # ownership (its destructor frees it when `capsules` goes).
            addr = _ctypes_api.PyCapsule_GetPointer(c, b"dltensor")
            ptrs[i] = ctypes.cast(addr, ctypes.POINTER(_lib.DLTensor))
        sc = (ctypes.c_float * max(1, len(scalars)))(*scalars)
        _check(self.lib, self.lib.bitfold_launch(self._live(), ptrs, len(capsules), sc,
                                                 len(scalars), stream))

    def launch_raw(self, data, meta, num_meta_words, num_tensors, scalars=(), stream=None):
        """bitfold_launch_raw (bitfold.h): `data` the addresses as bytes of
        num_tensors uint64, `meta` bytes of num_meta_words int64; `scalars`
        floats or their packed f32 bytes."""
        if self._raw is None:
            raise BitfoldError("BITFOLD_ERROR_UNSUPPORTED",
                               f"{self.lib.bitfold_path} has no bitfold_launch_raw")
        if not isinstance(scalars, bytes):
            scalars = struct.pack(f"{len(scalars)}f", *scalars)
        if self.address is None:
            raise _closed_error()
        status = self._raw(self.address, num_tensors, data, meta, num_meta_words, scalars,
                           len(scalars) // 4, stream)
        if status:
            _check(self.lib, status)


def _set_new_options(opts, compile_threads, cache_max_bytes, tune_on_miss,
                     tune_budget_seconds):
    """Fills the options appended in 0.2 that were given."""
    if compile_threads is not None:
        opts.compile_threads = _int_arg("compile_threads", compile_threads, *_INT32)
    if cache_max_bytes is not None:
        opts.cache_max_bytes = _int_arg("cache_max_bytes", cache_max_bytes, *_INT64)
    if tune_on_miss is not None:
        if tune_on_miss not in _lib.TUNE_ON_MISS:
            raise ValueError(f"tune_on_miss must be one of {sorted(_lib.TUNE_ON_MISS)}, "
                             f"not {tune_on_miss!r}")
        opts.tune_on_miss = _lib.TUNE_ON_MISS[tune_on_miss]
    if tune_budget_seconds is not None:
        opts.tune_budget_seconds = float(tune_budget_seconds)


def kernel_from_source(source, runtime=None):
    """A kernel from a program in the kernel text format
    (docs/kernel-format.md) on `runtime` (default: default_runtime()); see
    Runtime.kernel_from_source."""
    return (runtime or default_runtime()).kernel_from_source(source)