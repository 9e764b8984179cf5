"""torch.ops.bitfold.* as registered by _custom.py (torch.library.Library,
the body as the Autograd kernel) on the fake driver (skipped, visibly,
without torch): a plain call launches the kernel; an input needing grad
still launches it, and backward through the result raises (no autograd
formula) instead of passing silently; under torch.inference_mode and
no_grad the kernel runs; torch.compile(fullgraph=True) of a function
calling the op traces it through the fake impl.
"""
import os
import unittest

try:
    import torch
except ImportError:  # the package's core is tested without torch
    torch = None

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")


def inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 64, generator=g).to(torch.bfloat16)
    proj = torch.randn(2, 128, generator=g).to(torch.bfloat16)
    return x, proj[:, :64], proj[:, 64:]


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class CustomOpsOnTheFakeDriver(unittest.TestCase):
    def setUp(self):
        import bitfold
        import bitfold.torch as bt
        from bitfold.torch import _ops, _table
        os.environ["BITFOLD_LIBCUDA"] = FAKE_CUDA
        self.bitfold, self.bt, self.ops, self.table = bitfold, bt, _ops, _table
        self.saved = (bitfold._default, _ops._ALLOW_HOST)
        self.rt = bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False)
        bitfold._default = self.rt
        for op in _table.OPS:
            op.new_kernels()
        _ops._ALLOW_HOST = True
        bt.reset_stats()
        bt.configure(mode="auto", verify="off")

    def tearDown(self):
        self.bitfold._default, self.ops._ALLOW_HOST = self.saved
        for op in self.table.OPS:
            op.new_kernels()
        self.rt.close()

    def launches(self):
        return self.bt.stats().get("ln_modulate", {"launches": 0})["launches"]

    def test_a_plain_call_launches_the_kernel(self):
        x, sc, sh = inputs()
        y = torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual((y.shape, y.requires_grad), (x.shape, False))
        self.assertEqual(self.launches(), 1)

    def test_backward_through_the_op_raises_instead_of_passing_silently(self):
        x, sc, sh = inputs()
        x.requires_grad_(True)
        y = torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual(self.launches(), 1, "the forward runs the kernel, as before")
        self.assertTrue(y.requires_grad)
        with self.assertRaisesRegex(RuntimeError, "no autograd formula"):
            y.float().sum().backward()

    def test_ops_returning_a_list_or_a_tuple_keep_it_with_an_input_needing_grad(self):
        g = torch.Generator().manual_seed(5)
        x, r = (torch.randn(2, 8, 64, generator=g).to(torch.bfloat16) for _ in range(2))
        w = torch.randn(64, generator=g).to(torch.bfloat16).requires_grad_(True)
        for args in ((x, w, 1e-6), (x, w, 1e-6, r)):
            out = torch.ops.bitfold.hf_rmsnorm(*args)
            self.assertIsInstance(out, list)
            self.assertEqual(len(out), len(args) - 2)
            self.assertTrue(all(o.requires_grad for o in out))
        q = torch.randn(1, 4, 2, 64, generator=g).to(torch.bfloat16).requires_grad_(True)
        qo, ko = torch.ops.bitfold.qk_layernorm(q, q, 1e-6)
        with self.assertRaisesRegex(RuntimeError, "no autograd formula"):
            (qo.float().sum() + ko.float().sum()).backward()
        s = self.bt.stats()
        self.assertEqual((s["hf_rmsnorm"]["launches"], s["qk_layernorm"]["launches"]), (2, 1))

    def test_no_grad_and_inference_mode_run_the_kernel(self):
        x, sc, sh = inputs()
        x.requires_grad_(True)
        with torch.no_grad():
            self.assertFalse(torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6).requires_grad)
        with torch.inference_mode():
            xi, sci, shi = inputs()
            torch.ops.bitfold.ln_modulate(xi, sci, shi, 1e-6)
        self.assertEqual(self.launches(), 2)

    def test_compile_traces_the_op_through_its_fake_impl(self):
        x, sc, sh = inputs()

        def f(x, sc, sh):
            return torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6) * 2
        y = torch.compile(f, fullgraph=True, backend="aot_eager")(x, sc, sh)
        self.assertEqual(y.shape, x.shape)
        self.assertGreaterEqual(self.launches(), 1, "the compiled function calls the kernel")

    def test_compile_with_an_input_needing_grad_refuses_the_backward(self):
        """AOT autograd traces the backward when it compiles: the error
        comes then (as with torch.library.custom_op and no formula)."""
        x, sc, sh = inputs()
        x.requires_grad_(True)

        def f(x, sc, sh):
            return torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6) * 2
        with self.assertRaisesRegex(Exception, "no autograd formula"):
            torch.compile(f, fullgraph=True, backend="aot_eager")(x, sc, sh).float().sum()


if __name__ == "__main__":
    unittest.main()
