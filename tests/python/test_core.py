"""The installed package without torch: where the library comes from, the
template list, kernel metadata, errors. Runs in the venv the wheel was
installed into (tests/python/CMakeLists.txt)."""
import os
import subprocess
import sys
import unittest

import bitfold
from bitfold import _lib


class InstalledPackage(unittest.TestCase):
    def test_imports_without_torch(self):
        code = "import sys, bitfold; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={k: v for k, v in os.environ.items()
                                              if k != "BITFOLD_LIB"})
        self.assertEqual(out.stdout.strip(), "False")

    def test_library_is_the_one_inside_the_package(self):
        if "BITFOLD_LIB" in os.environ:
            self.skipTest("BITFOLD_LIB is set")
        lib = _lib.load()
        pkg = os.path.dirname(os.path.abspath(bitfold.__file__))
        self.assertEqual(os.path.dirname(lib.bitfold_path), os.path.join(pkg, "lib"))
        self.assertTrue(pkg.startswith(sys.prefix), f"{pkg} is not inside {sys.prefix}")

    def test_bitfold_lib_overrides_the_packaged_library(self):
        fake = os.environ.get("BITFOLD_TEST_FAKE_LIB")
        if not fake:
            self.skipTest("BITFOLD_TEST_FAKE_LIB not set")
        code = "import bitfold._lib as L; print(L.load().bitfold_path)"
        env = dict(os.environ, BITFOLD_LIB=fake)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=env)
        self.assertEqual(out.stdout.strip(), fake)

    def test_version_and_templates(self):
        self.assertRegex(bitfold.version(), r"^\d+\.\d+\.\d+")
        names = bitfold.templates()
        for n in ("ln_modulate", "qk_layernorm", "conv_bias", "residual_gate",
                  "rmsnorm_modulate", "wan_rmsnorm_silu"):
            self.assertIn(n, names)

    def test_kernel_metadata(self):
        rt = bitfold.Runtime(disk_cache=False)
        try:
            k = rt.kernel("ln_modulate", dtype="bf16")
            self.assertEqual(k.tensor_names, ["x", "scale", "shift", "y"])
            self.assertEqual(k.tensor_is_output, [False, False, False, True])
            self.assertEqual(k.scalar_names, ["eps"])
            qk = rt.kernel("qk_layernorm")
            self.assertEqual(qk.num_groups, 2)
            self.assertEqual(qk.num_tensors, 4)
            gate = rt.kernel("residual_gate", "dtype=f16", gate="per_batch")
            self.assertEqual(gate.params, "dtype=f16,gate=per_batch")
            self.assertIs(rt.kernel("residual_gate", "dtype=f16", gate="per_batch"), gate)
        finally:
            rt.close()

    def test_errors_carry_status_and_message(self):
        rt = bitfold.Runtime(disk_cache=False)
        try:
            with self.assertRaises(bitfold.BitfoldError) as e:
                rt.kernel("no_such_template")
            self.assertEqual(e.exception.status, "BITFOLD_ERROR_UNKNOWN_TEMPLATE")
            with self.assertRaises(bitfold.BitfoldError) as e:
                rt.kernel("ln_modulate", dtype="f64")
            self.assertEqual(e.exception.status, "BITFOLD_ERROR_INVALID_ARGUMENT")
            self.assertIn("f64", e.exception.message)
        finally:
            rt.close()

    def test_kernel_from_source_gives_a_kernel_with_the_programs_operands(self):
        text = "\n".join([
            "bitfold.row_program py_user_scale v1", "groups 1",
            "guard cols % 1 == 0, 1 <= cols <= 16777216",
            "input x : f32 row_major per_element", "scalar a : f32 default 2",
            "body:", "  %x = load x : f32", "  %a = scalar a : f32",
            "  %y = mul %x, %a : f32", "  output y : f32 row_major = %y", ""])
        rt = bitfold.Runtime(disk_cache=False)
        try:
            k = rt.kernel_from_source(text)
            self.assertEqual(k.tensor_names, ["x", "y"])
            self.assertEqual(k.tensor_is_output, [False, True])
            self.assertEqual(k.scalar_names, ["a"])
            self.assertEqual(k.name, "py_user_scale")
            self.assertIs(rt.kernel_from_source(text), k)
            self.assertIs(bitfold.kernel_from_source(text, runtime=rt), k)
            # Registered by name: the template lookup reaches it too.
            self.assertEqual(rt.kernel("py_user_scale").tensor_names, ["x", "y"])
        finally:
            rt.close()

    def test_kernel_from_source_errors_carry_line_and_column(self):
        stock = "\n".join([
            "bitfold.row_program ln_modulate v1", "groups 1",
            "guard cols % 1 == 0, 1 <= cols <= 16777216",
            "input x : f32 row_major per_element", "body:",
            "  %x = load x : f32", "  output y : f32 row_major = %x", ""])
        rt = bitfold.Runtime(disk_cache=False)
        try:
            with self.assertRaises(bitfold.BitfoldError) as e:
                rt.kernel_from_source("bitfold.row_program bad v1\ngroups x\n")
            self.assertEqual(e.exception.status, "BITFOLD_ERROR_INVALID_ARGUMENT")
            self.assertRegex(e.exception.message, r"2:8: expected")
            with self.assertRaises(bitfold.BitfoldError) as e:
                rt.kernel_from_source(stock.encode())
            self.assertIn("stock kernel", e.exception.message)
        finally:
            rt.close()

if __name__ == "__main__":
    unittest.main()
