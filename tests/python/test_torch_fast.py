"""bitfold.torch's warm call in C (python/native/fast.c, _fast.py) on the
fake driver, on by default (skipped, visibly, with BITFOLD_FAST=0, without
torch, without a torch that has DLPack's C exchange API, or without the
built module): it serves exactly
the calls the Python path registered, with this call's addresses, and
hands every other call back (out=, verify, grad, other layouts, a launch
the C API rejects, an operand the op copies, an output written in place).
"""
import ctypes
import os
import subprocess
import sys
import unittest

try:
    import torch
except ImportError:
    torch = None

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")


def _fast_module():
    if torch is None:
        return None
    from bitfold.torch import _fast
    return _fast.module


if torch is not None:
    from test_torch_norm_ops import ln_inputs, rand


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class WarmCallInC(unittest.TestCase):
    def setUp(self):
        from test_torch_cpu import TorchOnFakeDriver
        TorchOnFakeDriver.setUp(self)
        self.addCleanup(setattr, self.ops, "_ALLOW_HOST", False)
        self.fast = _fast_module()
        if self.fast is None:
            from bitfold.torch import _fast
            self.skipTest(f"the C warm call is off: {_fast.why_not}")

    def served(self, fn):
        """fn's result and how many calls the C path served during it."""
        before = self.fast.served()
        r = fn()
        return r, self.fast.served() - before

    def test_a_warm_call_is_served_in_c_with_this_calls_addresses(self):
        from test_fake_launch import FakeLaunch
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_last_launch.restype = FakeLaunch
        fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]
        x, sc, sh = ln_inputs(0)
        _, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 0, "the first call is the Python path's")
        x2, sc2, sh2 = ln_inputs(5)
        fake.fake_cuda_expect_params(11)
        y2, n = self.served(lambda: self.bt.ln_modulate(x2, sc2, sh2, 1e-6))
        self.assertEqual(n, 1)
        params = list(fake.fake_cuda_last_launch().params)
        for t in (x2, sc2, sh2, y2):
            self.assertIn(t.data_ptr(), params)
        self.assertNotIn(x.data_ptr(), params)
        self.assertEqual((y2.shape, y2.dtype, y2.is_contiguous()), (x2.shape, x2.dtype, True))
        self.assertEqual(self.bt.stats()["ln_modulate"]["launches"], 2)

    def test_an_argument_passed_twice_keeps_one_position_per_operand(self):
        from test_fake_launch import FakeLaunch
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_last_launch.restype = FakeLaunch
        fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]
        x, sc, _ = ln_inputs(0)
        gate = sc.unsqueeze(1)
        self.bt.residual_gate(x, x, gate)  # registered from a call with x twice
        r, u = rand(2, 8, 64, seed=3), rand(2, 8, 64, seed=4)
        fake.fake_cuda_expect_params(8)
        _, n = self.served(lambda: self.bt.residual_gate(r, u, gate))
        self.assertEqual(n, 1)
        params = list(fake.fake_cuda_last_launch().params)
        self.assertIn(r.data_ptr(), params)
        self.assertIn(u.data_ptr(), params)

    def test_calls_it_does_not_serve_take_the_python_path(self):
        x, sc, sh = ln_inputs(0)
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        y = torch.empty_like(x)
        cases = {
            "out= (a layout of its own, first met)": lambda: self.bt.ln_modulate(
                x, sc, sh, 1e-6, out=y),
            "mode=": lambda: self.bt.ln_modulate(x, sc, sh, 1e-6, mode="auto"),
            "another eps": lambda: self.bt.ln_modulate(x, sc, sh, 1e-5),
            "another layout": lambda: self.bt.ln_modulate(x.contiguous(), sc.contiguous(),
                                                          sh.contiguous(), 1e-6),
            "an int eps": lambda: self.bt.ln_modulate(x, sc, sh, 0),
        }
        for what, call in cases.items():
            _, n = self.served(call)
            self.assertEqual(n, 0, what)
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {})

    def test_out_and_outputs_written_in_place_are_the_callers_tensors(self):
        from test_fake_launch import FakeLaunch
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_last_launch.restype = FakeLaunch
        fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]
        x, sc, sh = ln_inputs(0)
        self.bt.ln_modulate(x, sc, sh, 1e-6, out=torch.empty_like(x))
        y = torch.empty_like(x)
        fake.fake_cuda_expect_params(11)
        r, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6, out=y))
        self.assertEqual(n, 1)
        self.assertIs(r, y)
        self.assertIn(y.data_ptr(), list(fake.fake_cuda_last_launch().params))
        zoo = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "zoo")
        with open(os.path.join(zoo, "fused_add_rms_norm.bfk")) as f:
            op = self.bt.op_from_source(f.read(), "fasttest::fused_add_rms_norm")
        xs, rs, w = rand(4, 64, seed=1), rand(4, 64, seed=2), rand(64, seed=3)
        op(xs, rs, w, 1e-6)
        x2, r2 = rand(4, 64, seed=4), rand(4, 64, seed=5)
        (h, y2), n = self.served(lambda: op(x2, r2, w, 1e-6))
        self.assertEqual(n, 1)
        self.assertIs(h, r2, "h aliases residual: the caller's tensor")
        self.assertIs(y2, x2, "y aliases x")

    def test_channels_last_outputs_are_allocated_in_their_layout(self):
        from test_fake_launch import FakeLaunch
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_last_launch.restype = FakeLaunch
        cl = torch.channels_last_3d
        c = rand(1, 96, 2, 4, 4).contiguous(memory_format=cl)
        g, b = rand(96, 1, 1, 1, seed=1), rand(96, seed=2)
        # name: (call, the parameters to record: at most the kernel's, and
        # the output's address among them: pointer and row stride pairs first)
        calls = {"wan_rmsnorm_silu": (lambda x: self.bt.wan_rmsnorm_silu(x, g, None, None, "f32"),
                                      5),
                 "conv_bias": (lambda x: self.bt.conv_bias(x, b, x), 7)}
        for name, (call, params) in calls.items():
            call(c)
            c2 = rand(1, 96, 2, 4, 4, seed=3).contiguous(memory_format=cl)
            fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]
            fake.fake_cuda_expect_params(params)
            y, n = self.served(lambda: call(c2))
            self.assertEqual(n, 1, name)
            self.assertEqual(y.shape, c2.shape)
            self.assertTrue(y.is_contiguous(memory_format=cl), f"{name}: {y.stride()}")
            # size-1 dims too: eager's (and the Python path's) strides
            self.assertEqual(y.stride(), torch.empty_like(c2).stride(), name)
            self.assertIn(y.data_ptr(), list(fake.fake_cuda_last_launch().params), name)
            self.assertEqual(self.bt.stats()[name]["fallbacks"], {})
            # a size-1 dim whose stride is not the canonical one (view_as
            # recomputes it): the output keeps it, as empty_like does
            odd = [t.view_as(t) for t in (c, c2)]
            self.assertNotEqual(odd[0].stride(), c.stride())
            call(odd[0])
            y, n = self.served(lambda: call(odd[1]))
            self.assertEqual(n, 1, name)
            self.assertEqual(y.stride(), torch.empty_like(odd[1]).stride(), name)

    def test_grad_is_the_python_paths_and_keeps_the_graph(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        x.requires_grad_(True)
        y, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 0)
        self.assertIsNotNone(y.grad_fn)
        with torch.no_grad():
            _, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 1, "grad off: served in C again")

    def test_an_unverified_site_is_not_served_under_verify_once(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)  # verify off: unverified
        self.bt.configure(verify="once")
        self.addCleanup(self.bt.configure, verify="off")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 0)
        # the fake kernel wrote nothing: verify ran, caught it and disabled the op
        self.assertEqual(self.bt.stats()["ln_modulate"]["mismatches"], 1)
        _, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 0, "a disabled op keeps no site")

    def test_a_launch_the_c_api_rejects_goes_back_to_the_checked_path(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        buf = rand(2 * 8 * 64 + 1, seed=7)
        xm = buf[1:].view(2, 8, 64)  # same layout, 2 bytes off the alignment
        y, n = self.served(lambda: self.bt.ln_modulate(xm, sc, sh, 1e-6))
        self.assertEqual(n, 0)
        self.assertTrue(torch.equal(y, self.bt._eager.ln_modulate(xm, sc, sh, 1e-6)))
        self.assertEqual(sum(self.bt.stats()["ln_modulate"]["fallbacks"].values()), 1)

    def test_custom_ops_and_multiple_outputs_are_served(self):
        x, w = rand(2, 4, 2048), rand(2048, seed=2)
        res = rand(2, 4, 2048, seed=3)
        self.bt.hf_rmsnorm(x, w, 1e-6, res)
        r, n = self.served(lambda: self.bt.hf_rmsnorm(x, w, 1e-6, res))
        self.assertEqual(n, 1)
        self.assertIsInstance(r, tuple)
        self.assertEqual([(t.shape, t.dtype) for t in r], [(x.shape, w.dtype), (x.shape, x.dtype)])
        ops = torch.ops.bitfold
        ops.ln_modulate(*ln_inputs(), 1e-6)
        y, n = self.served(lambda: ops.ln_modulate(*ln_inputs(2), 1e-6))
        self.assertEqual(n, 1)
        self.assertTrue(y.is_contiguous())
        r, n = self.served(lambda: ops.hf_rmsnorm(x, w, 1e-6, res))
        self.assertEqual(n, 1)
        self.assertIsInstance(r, list, "the custom op returns its list")

    def test_fresh_outputs_are_torchs_own_allocations(self):
        # torch's factories, not a DLPack blob: a blob's storage is not
        # resizable, and on CUDA record_stream silently skips it (its memory
        # could be reused while another stream still reads it)
        x, w = rand(2, 4, 2048), rand(2048, seed=2).float()  # y: w's dtype
        res = rand(2, 4, 2048, seed=3)
        qkv = rand(1, 16, 3 * 8 * 128, seed=4)
        q, k = (qkv[..., i * 1024:(i + 1) * 1024].unflatten(-1, (8, 128)) for i in (0, 1))
        calls = {"ln_modulate": lambda: self.bt.ln_modulate(*ln_inputs(3), 1e-6),
                 "hf_rmsnorm": lambda: self.bt.hf_rmsnorm(x, w, 1e-6, res),
                 "qk_layernorm": lambda: self.bt.qk_layernorm(rand(1, 16, 8, 128, seed=5),
                                                              rand(1, 16, 8, 128, seed=6), 1e-6)}
        from bitfold.torch import _fast
        shim = _fast.empty_via == "torch's C allocation"
        for name, call in calls.items():
            first = call()
            made = self.fast.shim_outputs()
            r, n = self.served(call)
            self.assertEqual(n, 1, name)
            ys = r if isinstance(r, tuple) else (r,)
            firsts = first if isinstance(first, tuple) else (first,)
            # torch's C allocation (where bound) made every fresh output
            self.assertEqual(self.fast.shim_outputs() - made, len(ys) if shim else 0, name)
            for y, f in zip(ys, firsts):
                self.assertTrue(y.untyped_storage().resizable(), name)
                self.assertEqual(y.storage_offset(), 0, name)
                self.assertEqual(y.untyped_storage().nbytes(), f.untyped_storage().nbytes())
                self.assertEqual((type(y), y.requires_grad, y.is_inference()),
                                 (torch.Tensor, False, False), name)
            with torch.inference_mode():  # as the Python path's would be
                r, n = self.served(call)
            self.assertEqual(n, 1, name)
            for y in (r if isinstance(r, tuple) else (r,)):
                self.assertTrue(y.is_inference(), name)
        self.assertEqual(calls["hf_rmsnorm"]()[0].dtype, torch.float32)
        del q, k

    def test_a_failing_c_allocation_falls_back_to_torchs_factory(self):
        from bitfold.torch import _fast
        if _fast.empty_via != "torch's C allocation":
            self.skipTest(_fast.empty_via)
        real = _fast._shim_shape
        # a shape torch rejects (a negative size): the shim fails at every call
        bad = lambda y: (None if real(y) is None else ((-1,) + real(y)[0][1:],) + real(y)[1:])
        _fast._shim_shape = bad
        self.addCleanup(setattr, _fast, "_shim_shape", real)
        self.bt.ln_modulate(*ln_inputs(0), 1e-6)  # registered with the bad shape
        made = self.fast.shim_outputs()
        x2, sc2, sh2 = ln_inputs(5)
        y, n = self.served(lambda: self.bt.ln_modulate(x2, sc2, sh2, 1e-6))
        self.assertEqual(n, 1, "still served in C, by the factory")
        self.assertEqual(self.fast.shim_outputs(), made)
        self.assertEqual((y.shape, y.stride(), y.dtype), (x2.shape, x2.stride(), x2.dtype))
        with self.assertRaises(ValueError):
            self.fast.init_empty(1, None, None, None)  # all four or none

    def test_a_remembered_refusal_is_served_by_its_chain_and_counted(self):
        x = rand(2, 8, 128)[..., ::2]  # columns 2 apart: refused
        _, sc, sh = ln_inputs()
        ref = self.bt._eager.ln_modulate(x, sc, sh, 1e-6)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.bt.ln_modulate(x, sc, sh, 1e-6)
        y, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 1)
        self.assertTrue(torch.equal(y, ref))
        self.assertEqual(sum(self.bt.stats()["ln_modulate"]["fallbacks"].values()), 2)
        self.bt.configure(mode="strict")
        self.addCleanup(self.bt.configure, mode="auto")
        with self.assertRaises(self.bt.BitfoldFallback):
            self.bt.ln_modulate(x, sc, sh, 1e-6)

    def test_tensors_dlpack_cannot_describe_take_the_python_path(self):
        x, sc, sh = (t.to("meta") for t in ln_inputs())
        for _ in range(2):
            y, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
            self.assertEqual((n, y.device.type, y.shape), (0, "meta", x.shape))

    def test_a_negated_view_is_refused_at_a_layout_served_in_c(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        xv = torch._neg_view(x)  # x's layout and memory, read as -x (z.conj().imag makes such)
        ref = self.bt._eager.ln_modulate(-x, sc, sh, 1e-6)
        for _ in range(3):
            y, n = self.served(lambda: self.bt.ln_modulate(xv, sc, sh, 1e-6))
            self.assertEqual(n, 0)
            self.assertTrue(torch.equal(y, ref))
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {"unsupported": 3})

    def test_reset_stats_drops_the_c_sites_too(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.bt.reset_stats()
        _, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 0)
        _, n = self.served(lambda: self.bt.ln_modulate(x, sc, sh, 1e-6))
        self.assertEqual(n, 1)

    def test_run_checks_its_own_arguments(self):
        x, sc, sh = ln_inputs()
        for bad in [({}, (x, sc, sh, 1e-6), True), ([], (x, sc, sh, 1e-6), True, True),
                    ({}, [x, sc, sh, 1e-6], True, True)]:
            with self.assertRaises(TypeError):
                self.fast.run(*bad)
        self.assertIsNone(self.fast.run({}, (x, sc, sh, 1e-6), True, True))  # no site

    def test_keys_of_arguments_it_does_not_key_are_none(self):
        t = rand(4)
        self.assertIsNone(self.fast.key(()))  # no tensor
        self.assertIsNone(self.fast.key((t, [1])))
        self.assertIsNone(self.fast.key((t, 2 ** 70)))
        self.assertIsNone(self.fast.key((rand(*[1] * 9),)))  # more dims than the key holds
        self.assertIsNone(self.fast.key((t.as_subclass(torch.Tensor).view(4, 1)[:, 0]
                                         .as_subclass(type("Sub", (torch.Tensor,), {})),)))
        self.assertIsNone(self.fast.key((torch.empty(4, device="meta"),)))
        neg = torch.randn(4, dtype=torch.complex64).conj().imag  # a lazily negated view
        self.assertTrue(neg.is_neg())
        self.assertIsNone(self.fast.key((neg,)))
        a, b = self.fast.key((t, 1e-6, None, "x")), self.fast.key((t, 1e-6, None, "f32"))
        self.assertNotEqual(a, b)
        self.assertNotEqual(self.fast.key((t, 0.0)), self.fast.key((t, -0.0)))
        self.assertEqual(a, self.fast.key((rand(4, seed=9), 1e-6, None, "x")))
        with self.assertRaises(TypeError):
            self.fast.entry(1, 2, (0,), ((0, t),))  # verified missing
        with self.assertRaises(ValueError):
            self.fast.entry(1, 2, (-1,), (), False)  # a slot for an output it has not


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
class Switch(unittest.TestCase):
    def test_it_is_on_unless_bitfold_fast_is_0(self):
        code = ("from bitfold.torch import _fast; "
                "print(_fast.module is None, _fast.why_not)")

        def state(**env):
            env = {k: v for k, v in dict(os.environ, **env).items() if v is not None}
            return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, check=True).stdout.strip()
        self.assertEqual(state(BITFOLD_FAST="0"), "True off (BITFOLD_FAST=0)")
        self.assertEqual(state(BITFOLD_FAST="/nonexistent/_bitfold_fast.abi3.so"),
                         "True _bitfold_fast.abi3.so not found")
        # unset is "1": the same search, the same outcome (on where built)
        self.assertEqual(state(BITFOLD_FAST=None), state(BITFOLD_FAST="1"))

    def test_torchs_c_allocation_is_used_unless_bitfold_fast_empty_is_0(self):
        code = "from bitfold.torch import _fast; print(_fast.module is None, _fast.empty_via)"

        def via(**env):
            env = {k: v for k, v in dict(os.environ, **env).items() if v is not None}
            return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, check=True).stdout.strip()
        off, on = via(BITFOLD_FAST_EMPTY="0"), via(BITFOLD_FAST_EMPTY=None)
        if off.startswith("True"):
            self.skipTest("the C warm call is off")
        self.assertEqual(off, "False torch factories (BITFOLD_FAST_EMPTY=0)")
        self.assertTrue(on == "False torch's C allocation" or
                        on.startswith("False torch factories (no C allocation in torch"), on)


if __name__ == "__main__":
    unittest.main()
