"""Time of bitfold_runtime_create in a fresh process (the first creation,
which is what an application pays), through python/bitfold's ctypes
signatures. Needs no GPU. Usage:

    for i in $(seq 9); do python3 bench/runtime_create_time.py LIBBITFOLD; done

prints milliseconds, one line per process. A warm-cache first launch is
timed on a GPU by bench/launch_latency (warm-disk lines and the
"runtime creation <= 1 ms" goal).
"""
import ctypes
import os
import sys
import time

from bitfold import _lib  # noqa: E402

lib = _lib.load(sys.argv[1])
opts = _lib.RuntimeOptions()
lib.bitfold_runtime_options_init(ctypes.byref(opts))
opts.cache_dir = os.environ.get("BITFOLD_CACHE_DIR", "/tmp/bitfold-create-cache").encode()
opts.tune_db = b""
handle = ctypes.c_void_p()
t0 = time.perf_counter()
status = lib.bitfold_runtime_create(ctypes.byref(opts), ctypes.byref(handle))
t1 = time.perf_counter()
if status != 0:
    sys.exit(lib.bitfold_last_error().decode())
print(f"{(t1 - t0) * 1e3:.3f}")
