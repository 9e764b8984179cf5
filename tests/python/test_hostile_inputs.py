"""Misuse from Python: a kernel used after its runtime is closed raises
(it segfaulted the interpreter), integers out of the C types' range raise
ValueError naming the argument (ctypes wrapped them silently),
set_config('') and set_pdl('no') are errors (they restored the default and
turned PDL on), and kernel text or tune DBs that crashed or hung the
library are refused. Each case that once crashed runs in a child
interpreter, so a regression fails its test instead of the whole run."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import bitfold

LONG_LITERAL = """bitfold.row_program py_long_literal v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16
input x : f32 row_major per_element
body:
  %x = load x : f32
  %c = const 0.{digits} : f32
  %y = mul %x, %c : f32
  output y : f32 row_major = %y
"""


def run_child(code, timeout=60):
    """Runs `code` in a fresh interpreter; (returncode, stdout+stderr)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


class ClosedRuntime(unittest.TestCase):
    def test_kernel_after_runtime_close_raises_instead_of_crashing(self):
        code = """
            import bitfold
            rt = bitfold.Runtime(disk_cache=False)
            k = rt.kernel("ln_modulate", dtype="bf16")
            rt.close()
            rt.close()  # twice is fine
            calls = [lambda: k.set_config("r1.t128.v8.p1"),
                     lambda: k.set_pdl(True),
                     lambda: k.prewarm([(1, 8, 64)]),
                     lambda: k.launch_raw(b"", b"", 0, 0),
                     lambda: rt.kernel("ln_modulate", dtype="f32"),
                     lambda: rt.cache_stats()]
            for i, call in enumerate(calls):
                try:
                    call()
                    print("accepted", i)
                except bitfold.BitfoldError as e:
                    assert "closed" in str(e), e
            print("done")
        """
        rc, out = run_child(code)
        self.assertEqual(rc, 0, out)
        self.assertIn("done", out)
        self.assertNotIn("accepted", out)


class IntegerRanges(unittest.TestCase):
    def test_out_of_range_integers_raise_value_error_naming_the_argument(self):
        with self.assertRaisesRegex(ValueError, "cache_max_bytes"):
            bitfold.Runtime(disk_cache=False, cache_max_bytes=2**70)
        with self.assertRaisesRegex(ValueError, "compile_threads"):
            bitfold.Runtime(disk_cache=False, compile_threads=2**40)
        with self.assertRaisesRegex(ValueError, "compile_threads"):
            bitfold.Runtime(disk_cache=False, compile_threads=1.5)
        rt = bitfold.Runtime(disk_cache=False)
        try:
            k = rt.kernel("ln_modulate", dtype="bf16")
            with self.assertRaisesRegex(ValueError, "device"):
                k.prewarm([(1, 8, 64)], device=2**40)
            with self.assertRaisesRegex(ValueError, "device"):
                rt.prewarm([(k, [(1, 8, 64)])], device=-2**40)
            with self.assertRaisesRegex(ValueError, "shape dim"):
                k.prewarm([(1, 8, 2**64)])
        finally:
            rt.close()


class ConfigAndPdl(unittest.TestCase):
    def setUp(self):
        self.rt = bitfold.Runtime(disk_cache=False)
        self.k = self.rt.kernel("ln_modulate", dtype="bf16")

    def tearDown(self):
        self.rt.close()

    def test_empty_config_is_an_error_not_the_default(self):
        with self.assertRaises(bitfold.BitfoldError):
            self.k.set_config("")
        self.k.set_config("r1.t128.v8.p1")
        self.k.set_config(None)  # None is the documented reset

    def test_set_pdl_takes_booleans_not_truthiness(self):
        for bad in ("no", "false", "0", 2, None, 0.5):
            with self.assertRaises(ValueError, msg=repr(bad)):
                self.k.set_pdl(bad)
        self.k.set_pdl(False)
        self.k.set_pdl(True)
        self.k.set_pdl(0)


class HostileText(unittest.TestCase):
    def test_a_thirty_thousand_digit_literal_is_refused(self):
        code = f"""
            import bitfold
            rt = bitfold.Runtime(disk_cache=False)
            try:
                rt.kernel_from_source({LONG_LITERAL.format(digits="7" * 30000)!r})
                print("accepted")
            except bitfold.BitfoldError as e:
                print("refused", "number literal of" in str(e))
        """
        rc, out = run_child(code)
        self.assertEqual(rc, 0, out[-2000:])
        self.assertIn("refused True", out)

    def test_a_fifo_as_tune_db_does_not_hang(self):
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "db.json")
            os.mkfifo(fifo)
            code = f"""
                import bitfold
                rt = bitfold.Runtime(disk_cache=False, tune_db={fifo!r})
                rt.close()
                print("created")
            """
            rc, out = run_child(code, timeout=30)
            self.assertEqual(rc, 0, out)
            self.assertIn("created", out)


if __name__ == "__main__":
    unittest.main()
