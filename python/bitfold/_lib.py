"""Finding and loading libbitfold.so, and the C API's ctypes signatures.

The library is looked up in this order: $BITFOLD_LIB; the copy inside the
installed package (bitfold/lib/libbitfold.so, put there by
scripts/build-wheel.sh); a source checkout's build/runtime/libbitfold.so;
then the system's loader path.
"""
import ctypes
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class CacheStats(ctypes.Structure):
    _fields_ = [("memory_hits", ctypes.c_uint64), ("disk_hits", ctypes.c_uint64),
                ("compiles", ctypes.c_uint64), ("compile_failures", ctypes.c_uint64)]


WARNING_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)


class RuntimeOptions(ctypes.Structure):
    _fields_ = [("cache_dir", ctypes.c_char_p), ("disk_cache", ctypes.c_int),
                ("warning", WARNING_FN), ("warning_user", ctypes.c_void_p),
                ("tune_db", ctypes.c_char_p),
                # Appended in 0.2 (bitfold.h).
                ("compile_threads", ctypes.c_int), ("cache_max_bytes", ctypes.c_int64),
                ("tune_on_miss", ctypes.c_int), ("tune_budget_seconds", ctypes.c_double)]


class PrewarmStatus(ctypes.Structure):
    _fields_ = [("pending", ctypes.c_uint64), ("done", ctypes.c_uint64),
                ("failed", ctypes.c_uint64)]


# bitfold_runtime_options.tune_on_miss values, by their Python names.
TUNE_ON_MISS = {"off": 0, "background": 1, "now": 2}


def candidates():
    """Paths tried for libbitfold.so, in order."""
    env = os.environ.get("BITFOLD_LIB")
    if env:
        return [env]
    return [os.path.join(_HERE, "lib", "libbitfold.so"),
            os.path.join(_HERE, "..", "..", "build", "runtime", "libbitfold.so"),
            "libbitfold.so.0"]


_VP, _I, _CP = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
_SIGNATURES = {
    "bitfold_status_name": ([_I], _CP),
    "bitfold_last_error": ([], _CP),
    "bitfold_version": ([], _CP),
    "bitfold_num_registered_kernels": ([], _I),
    "bitfold_registered_kernel_name": ([_I], _CP),
    "bitfold_runtime_options_init": ([ctypes.POINTER(RuntimeOptions)], None),
    "bitfold_runtime_create": ([ctypes.POINTER(RuntimeOptions), ctypes.POINTER(_VP)], _I),
    "bitfold_runtime_cache_stats": ([_VP, ctypes.POINTER(CacheStats)], _I),
    "bitfold_runtime_destroy": ([_VP], None),
    "bitfold_kernel_from_registry": ([_VP, _CP, _CP, ctypes.POINTER(_VP)], _I),
    # The text is passed as bytes with its length (no NUL needed).
    "bitfold_kernel_from_source": ([_VP, _CP, ctypes.c_size_t, ctypes.POINTER(_VP)], _I),
    "bitfold_kernel_num_tensors": ([_VP], _I),
    "bitfold_kernel_tensor_name": ([_VP, _I], _CP),
    "bitfold_kernel_tensor_is_output": ([_VP, _I], _I),
    "bitfold_kernel_num_groups": ([_VP], _I),
    "bitfold_kernel_num_scalars": ([_VP], _I),
    "bitfold_kernel_scalar_name": ([_VP, _I], _CP),
    "bitfold_kernel_set_config": ([_VP, _CP], _I),
    "bitfold_kernel_set_pdl": ([_VP, _I], _I),
    "bitfold_launch": ([_VP, ctypes.POINTER(ctypes.POINTER(DLTensor)), _I,
                        ctypes.POINTER(ctypes.c_float), _I, _VP], _I),
    # Arrays are passed as bytes (c_char_p: no copy); see Kernel.launch_raw.
    "bitfold_launch_raw": ([_VP, _I, _CP, _CP, _I, _CP, _I, _VP], _I),
    # Prepared launches (bitfold.torch's warm calls; bytes as for launch_raw).
    "bitfold_prepare_raw": ([_VP, _I, _CP, _I, _CP, _I, ctypes.POINTER(_VP)], _I),
    "bitfold_launch_prepared": ([_VP, _CP, _VP], _I),
    "bitfold_prepared_destroy": ([_VP], None),
    "bitfold_prewarm": ([_VP, _I, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(_I), _I], _I),
    "bitfold_runtime_prewarm_status": ([_VP, _I, ctypes.POINTER(PrewarmStatus)], _I),
    "bitfold_runtime_set_async_compile": ([_VP, _I], _I),
    "bitfold_runtime_set_quick_first": ([_VP, _I], _I),
}

# bitfold_status BITFOLD_STATUS_NOT_READY (async compile mode).
STATUS_NOT_READY = 13

_lock = threading.Lock()
_loaded = {}


def load(path=None):
    """The C library (loaded once per path), with its signatures set."""
    paths = [path] if path else candidates()
    with _lock:
        for p in paths:
            if p in _loaded:
                return _loaded[p]
        errors = []
        for p in paths:
            if os.sep in p and not os.path.exists(p):
                errors.append(f"{p}: no such file")
                continue
            try:
                lib = ctypes.CDLL(p)
            except OSError as e:
                errors.append(str(e))
                continue
            for name, (args, res) in _SIGNATURES.items():
                fn = getattr(lib, name, None)
                if fn is None:
                    continue  # an older library: the Python side checks before use
                fn.argtypes, fn.restype = args, res
            lib.bitfold_path = p
            _loaded[p] = lib
            return lib
        raise OSError("libbitfold.so not found (set BITFOLD_LIB): " + "; ".join(errors))
