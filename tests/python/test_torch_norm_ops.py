"""bitfold.torch on CPU, part 2 (skipped, visibly, without torch):

- the prepared fast path of the direct ops (warm calls reuse a launcher per
  layout; a changed layout, grad, verify or reset never reuses a wrong one),
  on the fake driver;
- wan_rmsnorm_silu and hf_rmsnorm with a stub runtime that records what
  the op asks for and launches (template parameters, operand order, dtypes,
  shapes, scalars), so their Python logic is tested whether or not the
  library registers those templates yet;
- their eager chains against the real eager modules they stand for
  (diffusers' WanRMS_norm + SiLU and RMSNorm, SGLang's RMS_norm, HF
  LlamaRMSNorm), and the diffusers patches of those sites.
"""
import os
import struct
import unittest
import warnings

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the package's core is tested without torch
    torch = None

try:
    import diffusers
except Exception:  # optional: the patch tests need the real classes
    diffusers = None

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")


def rand(*shape, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype or torch.bfloat16)


def channels_last(t):
    return t.contiguous(memory_format=torch.channels_last_3d if t.dim() == 5
                        else torch.channels_last)


def ln_inputs(seed=0, cols=64):
    x = rand(2, 8, cols, seed=seed)
    proj = rand(2, 4 * cols, seed=seed + 1)
    return x, proj[:, cols:2 * cols], proj[:, 3 * cols:]


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class PreparedFastPath(unittest.TestCase):
    """Host tensors on the fake driver (its kernels write nothing)."""

    def setUp(self):
        import bitfold
        from test_torch_cpu import TorchOnFakeDriver
        TorchOnFakeDriver.setUp(self)  # the fake runtime, host tensors allowed, fresh stats
        self.addCleanup(setattr, self.ops, "_ALLOW_HOST", False)  # also when skipped
        if getattr(bitfold._default.lib, "bitfold_prepare_raw", None) is None:
            self.skipTest("the library has no bitfold_prepare_raw")

    def sites(self, op="ln_modulate"):
        """The Python path's sites (tuple keys; the C path's are bytes)."""
        return {k: v for k, v in self.ops._sites.get(op, {}).items()
                if isinstance(k, tuple)}

    def test_warm_calls_reuse_one_launcher_per_layout(self):
        x, sc, sh = ln_inputs()
        for seed in range(3):  # new tensors, same layout: one site
            x, sc, sh = ln_inputs(seed)
            self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual(len(self.sites()), 1)
        self.assertEqual(self.bt.stats()["ln_modulate"]["launches"], 3)
        self.bt.ln_modulate(x, sc, sh, 1e-5)  # eps is part of the layout key
        self.bt.ln_modulate(x.contiguous(), sc.contiguous(), sh.contiguous(), 1e-6)
        self.assertEqual(len(self.sites()), 3)
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {})

    def test_the_warm_launch_passes_this_calls_addresses(self):
        import ctypes
        from test_fake_launch import FakeLaunch
        fake = ctypes.CDLL(FAKE_CUDA)
        fake.fake_cuda_last_launch.restype = FakeLaunch
        x, sc, sh = ln_inputs(0)
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        x2, sc2, sh2 = ln_inputs(5)
        fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]
        fake.fake_cuda_expect_params(11)  # record the next launch's 11 parameters
        y2 = self.bt.ln_modulate(x2, sc2, sh2, 1e-6)
        params = list(fake.fake_cuda_last_launch().params)
        for t in (x2, sc2, sh2, y2):
            self.assertIn(t.data_ptr(), params, "an address of the warm call is missing")
        self.assertNotIn(x.data_ptr(), params)

    def test_grad_after_a_warm_call_falls_back_and_keeps_the_graph(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        x.requires_grad_(True)
        y = self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertIsNotNone(y.grad_fn)
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {"requires_grad": 1})

    def test_an_unverified_site_is_not_used_by_verify_once(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)  # verify off: the site is unverified
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = self.bt.ln_modulate(x, sc, sh, 1e-6, verify="once")
        # the fake kernel wrote nothing: verification must have run and caught it
        self.assertTrue(torch.equal(y, self.bt._eager.ln_modulate(x, sc, sh, 1e-6)))
        self.assertEqual(self.bt.stats()["ln_modulate"]["mismatches"], 1)
        self.assertEqual(len(self.sites()), 0, "a disabled op keeps no launcher")
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual(self.bt.stats()["ln_modulate"]["fallbacks"], {"disabled": 1})

    def test_reset_stats_drops_the_launchers(self):
        x, sc, sh = ln_inputs()
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.bt.reset_stats()
        self.assertEqual(len(self.sites()), 0)
        self.assertNotIn("ln_modulate", self.bt.stats())

    def test_every_row_op_is_warm_after_one_call(self):
        bf = torch.bfloat16
        x, sc, sh = ln_inputs()
        qkv = rand(2, 5, 3 * 4 * 32)
        q, k = qkv[..., :128].unflatten(-1, (4, 32)), qkv[..., 128:256].unflatten(-1, (4, 32))
        c = channels_last(rand(1, 8, 2, 3, 3))
        xr, w, s2 = rand(2, 4, 2048), rand(2048), rand(2, 2 * 2048)
        calls = {
            "ln_modulate": lambda: self.bt.ln_modulate(x, sc, sh, 1e-6),
            "qk_layernorm": lambda: self.bt.qk_layernorm(q, k, 1e-6),
            "conv_bias": lambda: self.bt.conv_bias(c, torch.zeros(8, dtype=bf), c),
            "residual_gate": lambda: self.bt.residual_gate(x, x, sc.unsqueeze(1)),
            "rmsnorm_modulate": lambda: self.bt.rmsnorm_modulate(
                xr, w, s2[:, :2048], s2[:, 2048:], 1e-6),
        }
        for op, call in calls.items():
            for _ in range(3):
                call()
            s = self.bt.stats()[op]
            self.assertEqual((s["launches"], s["fallbacks"], len(self.sites(op))), (3, {}, 1), op)


# ---- wan_rmsnorm_silu and hf_rmsnorm on a stub runtime ------------------------------

class StubKernel:
    """Records launch_raw calls; has the operands the template declares."""

    def __init__(self, name, params, operands, refuse=None):
        self.name, self.params, self.tensor_names = name, params, operands
        self.lib = type("StubLib", (), {"bitfold_path": "<stub>"})()
        self.launches, self.refuse, self.attempts = [], refuse, 0

    def launch_raw(self, data, meta, nmeta, n, scalars, stream):
        self.attempts += 1
        if self.refuse:
            import bitfold
            raise bitfold.BitfoldError(self.refuse, "the stub refuses this layout")
        words = struct.unpack(f"{nmeta}q", meta)
        tensors, at = [], 0
        for _ in range(n):
            nd = words[at + 1]
            tensors.append((words[at] & 0xFFFFFFFF, tuple(words[at + 2:at + 2 + nd]),
                            tuple(words[at + 2 + nd:at + 2 + 2 * nd])))
            at += 2 + 2 * nd
        self.launches.append({"data": struct.unpack(f"{n}Q", data), "tensors": tensors,
                              "scalars": scalars})


class StubRuntime:
    def __init__(self, operands=None, refuse=None):
        self.kernels, self.operands, self.refuse = [], operands, refuse

    def kernel(self, name, params):
        from bitfold.torch import _table
        fields = dict(p.split("=") for p in params.split(","))
        if name == "wan_rmsnorm_silu":
            names = _table._wan_operands((None, None, None, fields["bias"] == "1",
                                        fields["conv_bias"] == "1"))
        else:
            names = _table._hf_operands((None, None, fields["residual"] == "1",
                                       fields["modulate"] == "1"))
        k = StubKernel(name, params, self.operands or names, self.refuse)
        self.kernels.append(k)
        return k


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
class NormOpsOnAStubRuntime(unittest.TestCase):
    def setUp(self):
        import bitfold
        import bitfold.torch as bt
        from bitfold.torch import _ops
        self.bt, self.ops, self.bitfold = bt, _ops, bitfold
        self.saved = (bitfold.default_runtime, _ops._ALLOW_HOST)
        self.use(StubRuntime())
        _ops._ALLOW_HOST = True
        bt.reset_stats()
        bt.configure(mode="auto", verify="off")

    def use(self, rt):
        self.rt = rt
        self.bitfold.default_runtime = lambda: rt
        from bitfold.torch import _table
        for op in (_table.WAN_RMSNORM_SILU, _table.HF_RMSNORM):
            op.new_kernels()

    def tearDown(self):
        self.bitfold.default_runtime, self.ops._ALLOW_HOST = self.saved
        from bitfold.torch import _table
        for op in (_table.WAN_RMSNORM_SILU, _table.HF_RMSNORM):
            op.new_kernels()

    def words(self, dtype):
        return self.bitfold.DTYPE_WORDS[self.ops._DT_NAME[dtype]] & 0xFFFFFFFF

    def test_wan_launches_each_variant_with_its_operands_params_and_scale(self):
        bf, f32 = torch.bfloat16, torch.float32
        x = channels_last(rand(1, 96, 2, 4, 4))
        for form in ("x", "f32"):
            for gdt in (bf, f32):
                for with_bias in (False, True):
                    for with_conv in (False, True):
                        gamma = rand(96, 1, 1, 1, seed=1, dtype=gdt)  # WanRMS_norm's shape
                        bias = rand(96, seed=2, dtype=gdt) if with_bias else None
                        conv = rand(96, seed=3) if with_conv else None
                        y = self.bt.wan_rmsnorm_silu(x, gamma, bias, conv, form)
                        k = self.rt.kernels[-1]
                        what = (form, gdt, with_bias, with_conv)
                        self.assertEqual(k.params, f"dtype=bf16,form={form},gamma="
                                         f"{self.ops._DT_NAME[gdt]},bias={int(with_bias)},"
                                         f"conv_bias={int(with_conv)}", what)
                        call = k.launches[-1]
                        ops = [x, gamma] + [t for t in (bias, conv) if t is not None] + [y]
                        self.assertEqual(call["data"], tuple(t.data_ptr() for t in ops), what)
                        self.assertEqual([t[0] for t in call["tensors"]],
                                         [self.words(t.dtype) for t in ops], what)
                        self.assertEqual([t[1] for t in call["tensors"][1:-1]],
                                         [(96,)] * (len(ops) - 2), what)
                        self.assertEqual(call["tensors"][-1][2], tuple(x.stride()), what)
                        self.assertEqual(call["scalars"], struct.pack("f", 96 ** 0.5), what)
                        self.assertEqual(y.dtype, gdt, what)
        self.assertEqual(self.bt.stats()["wan_rmsnorm_silu"]["fallbacks"], {})

    def test_hf_launches_each_variant_with_its_operands_and_eps(self):
        bf, f32 = torch.bfloat16, torch.float32
        x = rand(2, 8, 64)
        for wdt in (bf, f32):
            for with_res in (False, True):
                for modulate in (False, True):
                    w = rand(64, seed=1, dtype=wdt)
                    res = rand(2, 8, 64, seed=2) if with_res else None
                    sc, sh = (rand(2, 64, seed=3), rand(2, 64, seed=4)) if modulate else (None,
                                                                                          None)
                    out = self.bt.hf_rmsnorm(x, w, 1e-5, res, sc, sh)
                    y, s = out if with_res else (out, None)
                    what = (wdt, with_res, modulate)
                    k = self.rt.kernels[-1]
                    self.assertEqual(k.params, f"dtype=bf16,weight={self.ops._DT_NAME[wdt]},"
                                     f"residual={int(with_res)},modulate={int(modulate)}", what)
                    ops = [x] + ([res] if with_res else []) + [w] + \
                        ([sc, sh] if modulate else []) + ([s] if with_res else []) + [y]
                    call = k.launches[-1]
                    self.assertEqual(call["data"], tuple(t.data_ptr() for t in ops), what)
                    self.assertEqual([t[0] for t in call["tensors"]],
                                     [self.words(t.dtype) for t in ops], what)
                    self.assertEqual(call["scalars"], struct.pack("f", 1e-5), what)
                    self.assertEqual((y.dtype, y.shape), (wdt, x.shape), what)
                    if with_res:
                        self.assertEqual((s.dtype, s.shape), (bf, x.shape), what)
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {})

    def test_a_template_with_other_operands_is_refused_not_launched(self):
        self.use(StubRuntime(operands=["x", "weight", "y", "sum"]))
        x, w = rand(2, 8, 64), rand(64, seed=1)
        y = self.bt.hf_rmsnorm(x, w, 1e-6)
        self.assertTrue(torch.equal(y, self.bt._eager.hf_rmsnorm(x, w, 1e-6)))
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"unsupported": 1})
        self.assertEqual(self.rt.kernels[-1].launches, [])

    def test_a_refused_layout_is_remembered_and_the_library_is_not_called_again(self):
        self.use(StubRuntime(refuse="BITFOLD_ERROR_STRIDE"))
        x, w = rand(2, 8, 64), rand(64, seed=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ys = [self.bt.hf_rmsnorm(x, w, 1e-6) for _ in range(3)]
        for y in ys:
            self.assertTrue(torch.equal(y, self.bt._eager.hf_rmsnorm(x, w, 1e-6)))
        self.assertEqual(len(self.rt.kernels), 1, "the kernel was looked up again")
        self.assertEqual(self.rt.kernels[0].attempts, 1, "a remembered refusal reached launch")
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"stride": 3})
        self.assertEqual(sum("eager fallback (stride)" in str(m.message) for m in caught), 1)
        self.bt.configure(mode="strict")
        with self.assertRaisesRegex(self.bt.BitfoldFallback, "stride"):
            self.bt.hf_rmsnorm(x, w, 1e-6)
        self.bt.configure(mode="auto")
        self.bt.hf_rmsnorm(x.contiguous()[:, :4], w, 1e-6)  # another layout: asked again
        self.assertEqual(self.rt.kernels[0].attempts, 2)

    def test_a_remembered_refusal_served_inline_counts_every_path_and_strict_still_raises(self):
        """The direct function and the torch.ops body serve a remembered
        refusal themselves (_ops.hit_source): each call counted once, a
        per-call strict mode still raises, the chain of the moment runs."""
        self.use(StubRuntime(refuse="BITFOLD_ERROR_STRIDE"))
        x, w = rand(2, 8, 64), rand(64, seed=1)
        ref = self.bt._eager.hf_rmsnorm(x, w, 1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.bt.hf_rmsnorm(x, w, 1e-6)
            self.assertTrue(torch.equal(torch.ops.bitfold.hf_rmsnorm(x, w, 1e-6)[0], ref))
            self.assertTrue(torch.equal(self.bt.hf_rmsnorm(x, w, 1e-6), ref))
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"stride": 3})
        with self.assertRaisesRegex(self.bt.BitfoldFallback, "stride"):
            self.bt.hf_rmsnorm(x, w, 1e-6, mode="strict")
        saved = self.bt._eager.hf_rmsnorm
        self.addCleanup(setattr, self.bt._eager, "hf_rmsnorm", saved)
        self.bt._eager.hf_rmsnorm = lambda *a: "replaced"
        self.assertEqual(self.bt.hf_rmsnorm(x, w, 1e-6), "replaced")
        self.assertEqual(self.rt.kernels[0].attempts, 1, "a remembered refusal reached launch")
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"stride": 4})

    def test_a_refusal_first_met_in_strict_mode_is_warned_and_counted_later_in_auto(self):
        self.use(StubRuntime(refuse="BITFOLD_ERROR_STRIDE"))
        x, w = rand(2, 8, 64), rand(64, seed=1)
        self.bt.configure(mode="strict")
        with self.assertRaisesRegex(self.bt.BitfoldFallback, "stride"):
            self.bt.hf_rmsnorm(x, w, 1e-6)
        self.bt.configure(mode="auto")
        self.bt.reset_stats()  # the strict call's site stays until here; again:
        with self.assertRaisesRegex(self.bt.BitfoldFallback, "stride"):
            self.bt.hf_rmsnorm(x, w, 1e-6, mode="strict")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                y = self.bt.hf_rmsnorm(x, w, 1e-6)
        self.assertTrue(torch.equal(y, self.bt._eager.hf_rmsnorm(x, w, 1e-6)))
        self.assertEqual(self.rt.kernels[0].attempts, 2, "a remembered refusal reached launch")
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"stride": 3})
        self.assertEqual(sum("eager fallback (stride)" in str(m.message) for m in caught), 1)

    def test_a_refusal_that_depends_on_the_addresses_is_not_remembered(self):
        self.use(StubRuntime(refuse="BITFOLD_ERROR_ALIGNMENT"))
        x, w = rand(2, 8, 64), rand(64, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                self.bt.hf_rmsnorm(x, w, 1e-6)
        self.assertEqual(self.rt.kernels[0].attempts, 2)
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"alignment": 2})

    def test_dtypes_the_kernels_do_not_take_fall_back(self):
        x = channels_last(rand(1, 8, 2, 4, 4))
        f16 = torch.float16
        cases = {
            "gamma f16 with bf16 x": lambda: self.bt.wan_rmsnorm_silu(x, rand(8, dtype=f16)),
            "bias not gamma's dtype": lambda: self.bt.wan_rmsnorm_silu(
                x, rand(8), rand(8, dtype=torch.float32)),
            "conv_bias not x's dtype": lambda: self.bt.wan_rmsnorm_silu(
                x, rand(8), None, rand(8, dtype=torch.float32)),
        }
        for what, call in cases.items():
            self.bt.reset_stats()
            call()
            self.assertEqual(self.bt.stats()["wan_rmsnorm_silu"]["fallbacks"], {"dtype": 1}, what)
        y = self.bt.hf_rmsnorm(rand(2, 4, 64), rand(64, dtype=f16), 1e-6)
        self.assertEqual(y.dtype, torch.float32)  # eager's promotion of bf16 * f16
        self.assertEqual(self.bt.stats()["hf_rmsnorm"]["fallbacks"], {"dtype": 1})

    def test_bad_arguments_raise(self):
        x = channels_last(rand(1, 8, 2, 4, 4))
        with self.assertRaisesRegex(ValueError, "form"):
            self.bt.wan_rmsnorm_silu(x, rand(8), form="bf16")
        with self.assertRaisesRegex(ValueError, "scale and shift"):
            self.bt.hf_rmsnorm(rand(2, 4, 64), rand(64), 1e-6, scale=rand(2, 64))


# ---- the eager chains against the modules they stand for ----------------------------

class LlamaRMSNorm(torch.nn.Module if torch else object):
    """transformers' LlamaRMSNorm.forward, as written there."""

    def __init__(self, weight, eps):
        super().__init__()
        self.weight, self.variance_epsilon = torch.nn.Parameter(weight), eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def sglang_wan_norm_silu(x, gamma, bias):
    """SGLang's Wan VAE RMS_norm (channel_first) then SiLU."""
    scale = x.shape[1] ** 0.5
    return F.silu(F.normalize(x, dim=1) * scale * gamma + bias)


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
class EagerChainsMatchTheModules(unittest.TestCase):
    def setUp(self):
        from bitfold.torch import _eager
        self.eager = _eager

    def test_hf_chain_is_llama_rmsnorm_bit_for_bit(self):
        for wdt in (torch.bfloat16, torch.float32):
            x, w = rand(2, 16, 256, seed=4), rand(256, seed=5, dtype=wdt)
            with torch.no_grad():
                ref = LlamaRMSNorm(w, 1e-6)(x)
            self.assertTrue(torch.equal(self.eager.hf_rmsnorm(x, w, 1e-6), ref), wdt)

    def test_hf_chain_with_residual_and_modulation(self):
        x, r, w = rand(2, 16, 64, seed=1), rand(2, 16, 64, seed=2), rand(64, seed=3)
        sc, sh = rand(2, 64, seed=4), rand(2, 64, seed=5)
        y, s = self.eager.hf_rmsnorm(x, w, 1e-6, r, sc, sh)
        self.assertTrue(torch.equal(s, x + r))
        with torch.no_grad():
            ref = LlamaRMSNorm(w, 1e-6)(x + r) * (1 + sc[:, None]) + sh[:, None]
        self.assertTrue(torch.equal(y, ref))

    def test_wan_x_form_is_sglangs_norm_then_silu(self):
        x = channels_last(rand(1, 16, 2, 4, 4, seed=6))
        for gdt in (torch.bfloat16, torch.float32):
            g, b = rand(16, 1, 1, 1, seed=7, dtype=gdt), rand(16, 1, 1, 1, seed=8, dtype=gdt)
            self.assertTrue(torch.equal(self.eager.wan_rmsnorm_silu(x, g, b, None, "x"),
                                        sglang_wan_norm_silu(x, g, b)), gdt)

    def test_wan_conv_bias_is_added_to_x_first(self):
        x, cb = channels_last(rand(1, 16, 2, 4, 4, seed=6)), rand(16, seed=9)
        g = rand(16, seed=7)
        ref = sglang_wan_norm_silu(x + cb.view(1, 16, 1, 1, 1), g.view(16, 1, 1, 1), 0.0)
        self.assertTrue(torch.equal(self.eager.wan_rmsnorm_silu(x, g, None, cb), ref))

    @unittest.skipIf(diffusers is None, "diffusers not installed")
    def test_wan_f32_form_is_diffusers_wanrms_norm_then_silu(self):
        from diffusers.models.autoencoders.autoencoder_kl_wan import WanRMS_norm
        for bias in (False, True):
            for dt in (torch.bfloat16, torch.float32):
                torch.manual_seed(1)
                norm = WanRMS_norm(16, images=False, bias=bias)
                with torch.no_grad():
                    norm.gamma.normal_()
                    if bias:
                        norm.bias.normal_()
                norm = norm.to(dt)
                x = channels_last(rand(1, 16, 2, 4, 4, seed=2, dtype=dt))
                with torch.no_grad():
                    ref = F.silu(norm(x))
                    got = self.eager.wan_rmsnorm_silu(
                        x, norm.gamma, norm.bias if bias else None, None, "f32")
                self.assertTrue(torch.equal(got, ref), (bias, dt))

    @unittest.skipIf(diffusers is None, "diffusers not installed")
    def test_hf_chain_is_diffusers_rmsnorm_where_the_weight_has_xs_dtype(self):
        from diffusers.models.normalization import RMSNorm
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            m = RMSNorm(128, eps=1e-6).to(dt)
            with torch.no_grad():
                m.weight.normal_()
                x = rand(2, 8, 128, seed=3, dtype=dt)
                self.assertTrue(torch.equal(self.eager.hf_rmsnorm(x, m.weight, 1e-6), m(x)), dt)


@unittest.skipIf(torch is None or diffusers is None,
                 "torch or diffusers not installed: patch tests skipped")
class NormPatchesOnCpu(unittest.TestCase):
    """On CPU the patched norms fall back to their eager chains: outputs
    equal the unpatched model's, and the op's fallbacks show it was called."""

    def setUp(self):
        import bitfold.torch as bt
        self.bt = bt
        bt.reset_stats()
        warnings.simplefilter("ignore")

    def test_wan_residual_blocks_route_norm_and_silu_through_the_op(self):
        from diffusers import AutoencoderKLWan
        torch.manual_seed(0)
        vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[True]).eval()
        for m in vae.modules():
            if type(m).__name__ == "WanRMS_norm":
                with torch.no_grad():
                    m.gamma.normal_()
        z = torch.randn(1, 4, 2, 4, 4)
        with torch.no_grad():
            eager = vae.decode(z, return_dict=False)[0]
            self.bt.patch(vae)
            patched = vae.decode(z, return_dict=False)[0]
            self.bt.unpatch(vae)
            again = vae.decode(z, return_dict=False)[0]
        self.assertTrue(torch.equal(patched, eager))
        self.assertTrue(torch.equal(again, eager))
        self.assertGreater(sum(self.bt.stats()["wan_rmsnorm_silu"]["fallbacks"].values()), 0)

    def test_diffusers_rmsnorm_is_patched_where_the_forms_agree(self):
        from diffusers.models.normalization import RMSNorm
        model = torch.nn.Sequential(RMSNorm(64, eps=1e-6), RMSNorm(64, eps=1e-5))
        model[1].weight.data = model[1].weight.data.float()  # f32 weight on bf16 x
        model[0].to(torch.bfloat16)
        x = rand(2, 4, 64)
        with torch.no_grad():
            m0, m1 = model[0](x), model[1](x)
            sites = self.bt.patch(model)
            p0, p1 = model[0](x), model[1](x)
            self.assertEqual(self.bt.unpatch(model), 2)
        self.assertEqual(sites, ["0", "1"])
        self.assertTrue(torch.equal(p0, m0) and torch.equal(p1, m1))
        self.assertEqual(sum(self.bt.stats()["hf_rmsnorm"]["fallbacks"].values()), 1,
                         "only the bf16-weight norm goes through hf_rmsnorm")


if __name__ == "__main__":
    unittest.main()
