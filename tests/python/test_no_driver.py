"""A machine without the CUDA driver (CI, a CPU-only container): the wheel
imports and makes a runtime, and the first launch fails with an error that
says the driver is missing. Runs in a child process with $BITFOLD_LIBCUDA
naming a library that does not exist, the packaged libbitfold.so."""
import os
import subprocess
import sys
import unittest

CHILD = r"""
import bitfold
from bitfold import RawTensor
rt = bitfold.Runtime(disk_cache=False)
k = rt.kernel("ln_modulate")
t = [RawTensor(0x10000000, "bf16", (2, 4, 64), (256, 64, 1), 0),
     RawTensor(0x20000000, "bf16", (2, 64), (256, 1), 0),
     RawTensor(0x20000080, "bf16", (2, 64), (256, 1), 0),
     RawTensor(0x40000000, "bf16", (2, 4, 64), (256, 64, 1), 0)]
try:
    k.launch(t, [1e-6])
except Exception as e:
    print("launch failed:", e)
else:
    print("launch succeeded")
"""


class NoCudaDriver(unittest.TestCase):
    def test_import_works_and_the_first_launch_says_the_driver_is_missing(self):
        env = dict(os.environ, BITFOLD_LIBCUDA="/nonexistent/libcuda.so.1")
        env.pop("BITFOLD_LIB", None)
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                             text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("launch failed:", out.stdout)
        self.assertIn("cannot load the CUDA driver", out.stdout)


if __name__ == "__main__":
    unittest.main()
