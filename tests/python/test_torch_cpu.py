"""bitfold.torch on CPU (skipped, visibly, where torch is not installed):
fallback and its counters, strict mode, the registered custom ops and their
fake impls under torch.compile(fullgraph=True), and verify="once" against
the fake driver (whose kernels write nothing, so verification must catch
them, disable the op and return eager)."""
import os
import sys
import unittest
import warnings

try:
    import torch
except ImportError:  # the package's core is tested without torch
    torch = None

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "torch")


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 8, 64, generator=g).to(torch.bfloat16)
    proj = torch.randn(2, 4 * 64, generator=g).to(torch.bfloat16)
    return x, proj[:, 64:128], proj[:, 192:]


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
class TorchFallback(unittest.TestCase):
    def setUp(self):
        import bitfold.torch as bt
        self.bt = bt
        bt.reset_stats()
        bt.configure(mode="auto", verify="off")

    def test_cpu_tensors_fall_back_to_eager_counted_and_warned_once(self):
        x, scale, shift = inputs()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y1 = self.bt.ln_modulate(x, scale, shift, 1e-6)
            y2 = self.bt.ln_modulate(x, scale, shift, 1e-6)
        ref = self.bt._eager.ln_modulate(x, scale, shift, 1e-6)
        self.assertTrue(torch.equal(y1, ref) and torch.equal(y2, ref))
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {"device": 2})
        self.assertEqual(sum("eager fallback (device)" in str(m.message) for m in w), 1)

    def test_a_patched_attention_processor_class_is_made_once(self):
        """patch() swaps GLM's attention processor for an instance of a
        subclass; patching again (or another model) reuses that subclass,
        keeps the processor's state and does not pile up classes."""
        from bitfold.torch import _patch

        class Processor:
            def __init__(self):
                self.backend = "native"

        a = _patch._bitfold_processor(Processor(), owner="a")
        b = _patch._bitfold_processor(Processor(), owner="b")
        self.assertIs(type(a), type(b))
        self.assertTrue(issubclass(type(a), Processor))
        self.assertEqual((a.backend, a._bitfold_owner, b._bitfold_owner),
                         ("native", "a", "b"))

    def test_the_fallback_is_the_eager_chain_of_the_moment(self):
        """The ops look their chain up in _eager per fallback, so replacing
        it (as the GPU verify test does) is what they run and compare with."""
        x, scale, shift = inputs()
        saved = self.bt._eager.ln_modulate
        self.addCleanup(setattr, self.bt._eager, "ln_modulate", saved)
        self.bt._eager.ln_modulate = lambda *a: "replaced"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertEqual(self.bt.ln_modulate(x, scale, shift, 1e-6), "replaced")

    def test_strict_mode_raises_the_guard_message(self):
        self.bt.configure(mode="strict")
        x, scale, shift = inputs()
        with self.assertRaisesRegex(self.bt.BitfoldFallback, "device"):
            self.bt.ln_modulate(x, scale, shift, 1e-6)
        with self.assertRaisesRegex(self.bt.BitfoldFallback, "dtype"):
            self.bt.residual_gate(x.double(), x.double(), x.double())

    def test_requires_grad_falls_back_and_keeps_the_graph(self):
        x, scale, shift = inputs()
        x.requires_grad_(True)
        y = self.bt.ln_modulate(x, scale, shift, 1e-6)
        self.assertIsNotNone(y.grad_fn)

    def test_every_op_is_registered_with_a_fake(self):
        for op in self.bt.OPS:
            self.assertTrue(hasattr(torch.ops.bitfold, op), op)

    def test_compiled_module_with_every_op_has_no_graph_break(self):
        bt = self.bt

        class Every(torch.nn.Module):
            def forward(self, x, scale, shift, q, k, c, bias, w):
                y = torch.ops.bitfold.ln_modulate(x, scale, shift, 1e-6)
                qo, ko = torch.ops.bitfold.qk_layernorm(q, k, 1e-6)
                z = torch.ops.bitfold.conv_bias(c, bias, c)
                r = torch.ops.bitfold.residual_gate(y, y, scale.unsqueeze(1))
                m = torch.ops.bitfold.rmsnorm_modulate(x, w, scale, shift, 1e-6)
                s = torch.ops.bitfold.wan_rmsnorm_silu(c, bias, bias)
                return y, qo, ko, z, r, m, s
        x, scale, shift = inputs()
        g = torch.Generator().manual_seed(3)
        q = torch.randn(1, 5, 4, 32, generator=g).to(torch.bfloat16)
        k = torch.randn(1, 5, 4, 32, generator=g).to(torch.bfloat16)
        c = torch.randn(1, 8, 2, 3, 3, generator=g).to(torch.bfloat16).contiguous(
            memory_format=torch.channels_last_3d)
        bias = torch.randn(8, generator=g).to(torch.bfloat16)
        w = torch.randn(64, generator=g).to(torch.bfloat16)
        args = (x, scale, shift, q, k, c, bias, w)
        m = Every()
        eager = m(*args)
        compiled = torch.compile(m, fullgraph=True, backend="aot_eager")(*args)
        for a, b in zip(eager, compiled):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(bt.stats()["ln_modulate"]["fallbacks"].get("device", 0) > 0, True)


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class TorchOnFakeDriver(unittest.TestCase):
    """Host tensors launched on the fake driver: the kernel never runs."""

    def setUp(self):
        import bitfold
        import bitfold.torch as bt
        from bitfold.torch import _ops
        os.environ["BITFOLD_LIBCUDA"] = FAKE_CUDA
        if bitfold._default is None:
            bitfold._default = bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False)
        self.bt, self.ops = bt, _ops
        _ops._ALLOW_HOST = True
        bt.reset_stats()
        bt.configure(mode="auto", verify="off")

    def tearDown(self):
        self.ops._ALLOW_HOST = False

    def test_launch_counts_and_leaves_outputs_to_the_kernel(self):
        x, scale, shift = inputs()
        y = self.bt.ln_modulate(x, scale, shift, 1e-6)
        self.assertEqual(y.shape, x.shape)
        self.assertEqual(self.bt.stats()["ln_modulate"]["launches"], 1)
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {})

    def test_every_op_and_layout_is_accepted_by_the_c_api(self):
        """Each op's kernel parameters and tensor layouts (chunks, per-batch
        gates, fused-QKV views, channels-last, f32 bias) launch, direct and
        through torch.ops.bitfold, with no fallback. (wan_rmsnorm_silu and
        hf_rmsnorm: test_torch_norm_ops.py.)"""
        bf = torch.bfloat16
        x, scale, shift = inputs()
        qkv = torch.randn(2, 5, 3 * 4 * 32).to(bf)
        q, k = qkv[..., :128].unflatten(-1, (4, 32)), qkv[..., 128:256].unflatten(-1, (4, 32))
        c = torch.randn(1, 8, 2, 3, 3).to(bf).contiguous(memory_format=torch.channels_last_3d)
        proj = torch.randn(2, 3 * 64).to(bf)
        w = torch.randn(2048).to(bf)
        xr = torch.randn(2, 4, 2048).to(bf)
        s2 = torch.randn(2, 2 * 2048).to(bf)
        calls = {
            "ln_modulate": lambda f: f(x, scale, shift, 1e-6),
            "qk_layernorm": lambda f: f(q, k, 1e-6),
            "conv_bias": lambda f: (f(c, torch.randn(8)), f(c, torch.randn(8).to(bf), c)),
            "residual_gate": lambda f: (f(x, x, proj[:, 64:128].unsqueeze(1)), f(x, x, x),
                                        f(x, x, proj[0, :64])),
            "rmsnorm_modulate": lambda f: f(xr, w, s2[:, :2048], s2[:, 2048:], 1e-6),
        }
        for op, call in calls.items():
            for f in (getattr(self.bt, op), getattr(torch.ops.bitfold, op)):
                call(f)
            s = self.bt.stats()[op]
            self.assertEqual(s["fallbacks"], {}, op)
            self.assertGreater(s["launches"], 0, op)

    def test_inputs_broadcast_over_rows_launch_where_read_elementwise(self):
        """A gate or a modulation expanded over the batch (stride 0 between
        its rows) launches; a reduced input expanded over its rows is
        refused (stride) and served by eager with its bits."""
        bf = torch.bfloat16
        x, scale, shift = inputs()
        gate = torch.randn(1, 1, 64).to(bf).expand(2, 1, 64)
        self.bt.residual_gate(x, x, gate)
        self.bt.ln_modulate(x, scale[:1].expand(2, 64), shift[:1].expand(2, 64), 1e-6)
        for op in ("residual_gate", "ln_modulate"):
            s = self.bt.stats()[op]
            self.assertEqual((s["launches"], s["fallbacks"]), (1, {}), op)
        xe = x[:, :1].expand(2, 8, 64)
        y = self.bt.ln_modulate(xe, scale, shift, 1e-6)
        self.assertTrue(torch.equal(y, self.bt._eager.ln_modulate(xe, scale, shift, 1e-6)))
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {"stride": 1})

    def test_out_is_written_by_the_kernel_or_by_the_fallback(self):
        x, scale, shift = inputs()
        buf = torch.empty_like(x)
        self.assertIs(self.bt.ln_modulate(x, scale, shift, 1e-6, out=buf), buf)
        self.assertEqual(self.bt.stats()["ln_modulate"]["launches"], 1)
        xs = torch.randn(2, 8, 63).to(torch.bfloat16)
        s2 = torch.zeros(2, 63, dtype=torch.bfloat16)
        buf = torch.empty_like(xs)
        self.assertIs(self.bt.ln_modulate(xs, s2, s2, 1e-6, out=buf), buf)
        self.assertTrue(torch.equal(buf, self.bt._eager.ln_modulate(xs, s2, s2, 1e-6)))
        r = x.clone()
        self.assertIs(self.bt.residual_gate(r, x, x, out=r), r)  # in place: exact alias
        self.assertEqual(self.bt.stats()["residual_gate"]["fallbacks"], {})

    def test_c_rejection_is_a_counted_fallback(self):
        x, scale, shift = inputs()
        xs = torch.randn(2, 8, 66).to(torch.bfloat16)[..., :63]  # not 4-aligned columns
        s2 = torch.zeros(2, 63, dtype=torch.bfloat16)
        y = self.bt.ln_modulate(xs, s2, s2, 1e-6)
        self.assertTrue(torch.equal(y, self.bt._eager.ln_modulate(xs, s2, s2, 1e-6)))
        reasons = self.bt.stats()["ln_modulate"]["fallbacks"]
        self.assertEqual(sum(reasons.values()), 1, reasons)

    def test_a_refused_layout_does_not_reach_the_library_again(self):
        xs = torch.randn(2, 8, 128).to(torch.bfloat16)[..., ::2]  # columns 2 apart
        s2 = torch.zeros(2, 64, dtype=torch.bfloat16)
        reached = []
        real = self.ops._launch  # the only way to bitfold_prepare_raw / bitfold_launch_raw
        self.ops._launch = lambda *a: reached.append(a[0]) or real(*a)
        self.addCleanup(setattr, self.ops, "_launch", real)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ys = [self.bt.ln_modulate(xs, s2, s2, 1e-6) for _ in range(3)]
        ref = self.bt._eager.ln_modulate(xs, s2, s2, 1e-6)
        self.assertTrue(all(torch.equal(y, ref) for y in ys))
        self.assertEqual(reached, ["ln_modulate"], "a remembered refusal reached the library")
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {"stride": 3})

        self.assertEqual(sum("eager fallback (stride)" in str(m.message) for m in w), 1)
        self.bt.reset_stats()
        self.bt.configure(mode="strict")  # refused in strict mode: raised, not warned
        with self.assertRaises(self.bt.BitfoldFallback):
            self.bt.ln_modulate(xs, s2, s2, 1e-6)
        self.bt.configure(mode="auto")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.bt.ln_modulate(xs, s2, s2, 1e-6)
        self.assertEqual(sum("eager fallback (stride)" in str(m.message) for m in w), 1)
        self.assertEqual(len(reached), 2)
        self.bt.reset_stats()  # forgets the refusal with the counters
        self.bt.ln_modulate(xs, s2, s2, 1e-6)
        self.assertEqual(len(reached), 3)
        out = torch.empty_like(ref)  # out= joins the key: a site of its own
        for _ in range(2):
            out.zero_()
            self.assertIs(self.bt.ln_modulate(xs, s2, s2, 1e-6, out=out), out)
            self.assertTrue(torch.equal(out, ref))
        self.assertEqual(len(reached), 4)

    def test_a_torch_runtime_kernel_launches_torch_tensors_as_they_are(self):
        """bitfold.torch.Runtime (what tests/gpu and bench/ launch by hand):
        views keep their strides; a rejected launch raises BitfoldError."""
        import ctypes
        import bitfold
        from test_fake_launch import FakeLaunch
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_last_launch.restype = FakeLaunch
        fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]
        rt = self.bt.Runtime(lib_path=FAKE_LIB, disk_cache=False)
        self.addCleanup(rt.close)
        k = rt.kernel("ln_modulate", "dtype=bf16")
        self.assertIsInstance(k, self.bt.Kernel)
        x, scale, shift = inputs()  # scale and shift: chunks of a projection
        y = torch.empty_like(x)
        fake.fake_cuda_expect_params(11)
        k.launch([x, scale, shift, y], [1e-6])
        params = list(fake.fake_cuda_last_launch().params)
        for t in (x, scale, shift, y):
            self.assertIn(t.data_ptr(), params)
        with self.assertRaises(bitfold.BitfoldError):
            k.launch([x[..., ::2], scale, shift, y], [1e-6])

    def test_verify_once_catches_a_wrong_kernel_and_disables_the_op(self):
        x, scale, shift = inputs()
        ref = self.bt._eager.ln_modulate(x, scale, shift, 1e-6)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = self.bt.ln_modulate(x, scale, shift, 1e-6, verify="once")
            y2 = self.bt.ln_modulate(x, scale, shift, 1e-6, verify="once")
        self.assertTrue(torch.equal(y, ref) and torch.equal(y2, ref))
        s = self.bt.stats()["ln_modulate"]
        self.assertEqual(s["mismatches"], 1)
        self.assertIn("first differing flat index", s["disabled"])
        self.assertEqual(s["fallbacks"], {"disabled": 1})
        self.assertEqual(sum(str(m.message).startswith("bitfold.torch.ln_modulate: verify mismatch")
                             for m in w), 1)


if __name__ == "__main__":
    unittest.main()


try:
    import diffusers
except Exception:  # optional: the patch tests need the real classes
    diffusers = None


@unittest.skipIf(torch is None or diffusers is None,
                 "torch or diffusers not installed: patch tests skipped")
class DiffusersPatchOnCpu(unittest.TestCase):
    """On CPU every patched site falls back to its eager chain, so patched
    and unpatched forwards must be equal: the patched forwards are the
    originals' code. The fingerprints must match the installed diffusers."""

    def setUp(self):
        import bitfold.torch as bt
        self.bt = bt
        bt.reset_stats()
        warnings.simplefilter("ignore")

    def test_glm_image_patched_equals_unpatched(self):
        sys.path.insert(0, EXAMPLES)
        import glm_image_blocks as ex
        model = ex.build(4, 32, 2, seed=0, device="cpu")
        kw = ex.inputs(16, 8, seed=1, batch=2, device="cpu")
        with torch.no_grad():
            eager = model(**kw)[0]
            sites = self.bt.patch(model)
            patched = model(**kw)[0]
            self.assertEqual(self.bt.unpatch(model), len(sites))
            again = model(**kw)[0]
        kinds = {type(m).__name__ for _, m in model.named_modules()}
        self.assertIn("GlmImageTransformerBlock", kinds)
        self.assertEqual(len(sites), 2 * 3 + 1, sites)  # per block: adaLN, block, attn; norm_out
        self.assertTrue(torch.equal(patched, eager))
        self.assertTrue(torch.equal(again, eager))
        used = self.bt.stats()
        for op in ("ln_modulate", "qk_layernorm", "residual_gate"):
            self.assertGreater(sum(used[op]["fallbacks"].values()), 0, op)

    def test_wan_vae_conv_sites_patch_and_keep_cpu_results(self):
        from diffusers import AutoencoderKLWan
        torch.manual_seed(0)
        vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[True]).eval()
        z = torch.randn(1, 4, 2, 4, 4)
        with torch.no_grad():
            eager = vae.decode(z, return_dict=False)[0]
            sites = self.bt.patch(vae)
            patched = vae.decode(z, return_dict=False)[0]
            self.bt.unpatch(vae)
        kinds = {type(m).__name__ for q, m in vae.named_modules() if q in sites}
        self.assertEqual(kinds, {"WanCausalConv3d", "WanResidualBlock"})
        # On CPU aten fuses the bias into the convolution, so the patched
        # forward keeps the original there (bitfold splits it only where
        # aten's cuDNN path does): equal, and conv_bias never called.
        self.assertTrue(torch.equal(patched, eager))
        self.assertNotIn("conv_bias", self.bt.stats())
