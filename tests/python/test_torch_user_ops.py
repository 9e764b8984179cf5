"""bitfold.torch.op_from_source on the fake driver (skipped, visibly,
without torch or the fake libraries): a program built with bitfold.dsl or
written as text becomes a direct function and torch.ops.<ns>.<op> with a
fake impl from the shape rule (torch.compile(fullgraph=True) traces it),
launches through the same site table as the stock ops, and bad input
raises clear errors naming the argument. The fake kernels write nothing:
bits are checked on the GPU (tests/gpu/test_torch_tutorial.py)."""
import os
import unittest
import warnings

try:
    import torch
except ImportError:
    torch = None

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")


def python_sites(ops, name):
    """An op's Python-path sites (tuple keys; the C path's are bytes)."""
    return {k: v for k, v in ops._sites[name].items() if isinstance(k, tuple)}


def silu_and_mul_program(name="silu_and_mul"):
    from bitfold import dsl
    p = dsl.Program(name)
    gate, up = p.input("gate", "bf16"), p.input("up", "bf16")
    g = dsl.extend(gate.load())
    silu = dsl.round(g / (1.0 + dsl.exp_libdevice(-g)), "bf16")
    p.output("y", "bf16", dsl.round(silu * up.load(), "bf16"))
    return p


SCALE_TEXT = """bitfold.row_program scale_two_ways v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16777216
input x : f32 row_major per_element
scalar a : f32
scalar b : f32 default 2.0
body:
  %x = load x : f32
  %a = scalar a : f32
  %b = scalar b : f32
  %ya = mul %x, %a : f32
  %yb = mul %x, %b : f32
  %h = round to bf16 %yb : bf16
  output ya : f32 row_major = %ya
  output yb : bf16 row_major = %h
"""


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class UserOpsOnTheFakeDriver(unittest.TestCase):
    count = 0

    def setUp(self):
        from test_torch_cpu import TorchOnFakeDriver
        TorchOnFakeDriver.setUp(self)
        self.addCleanup(setattr, self.ops, "_ALLOW_HOST", False)
        UserOpsOnTheFakeDriver.count += 1
        self.ns = f"pyops_test{UserOpsOnTheFakeDriver.count}"

    def test_a_builder_program_is_a_direct_function_and_a_custom_op(self):
        f = self.bt.op_from_source(silu_and_mul_program(), f"{self.ns}::silu_and_mul")
        g, u = torch.randn(3, 5, 64).bfloat16(), torch.randn(3, 5, 64).bfloat16()
        for _ in range(3):
            y = f(g, u)
        self.assertEqual((y.shape, y.dtype), (g.shape, torch.bfloat16))
        op = getattr(getattr(torch.ops, self.ns), "silu_and_mul")
        self.assertEqual(op(g, u).shape, g.shape)
        s = self.bt.stats()[f"{self.ns}::silu_and_mul"]
        self.assertEqual((s["launches"], s["fallbacks"]), (4, {}))
        self.assertEqual(len(python_sites(self.ops, f"{self.ns}::silu_and_mul")), 1)

    def test_integer_and_byte_operands_launch_with_their_own_dtype_words(self):
        # cross_entropy's target is an i32 per-row input: its launch
        # metadata must say int32 (a float-only table once sent 0, which the
        # library refused as "int0 x0 lanes").
        root = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "zoo")
        with open(os.path.join(root, "cross_entropy.bfk")) as f:
            ce = self.bt.op_from_source(f.read(), f"{self.ns}::cross_entropy")
        x = torch.randn(4, 8192).bfloat16()
        t = torch.tensor([0, 5, 8191, 77], dtype=torch.int32)
        for _ in range(2):
            ce(x, t)
        s = self.bt.stats()[f"{self.ns}::cross_entropy"]
        self.assertEqual((s["launches"], s["fallbacks"]), (2, {}))
        import bitfold
        for dt, name in ((torch.int32, "i32"), (torch.int8, "i8"), (torch.uint8, "u8")):
            meta, _ = self.ops._meta_words((torch.zeros(2, dtype=dt),), 0)
            self.assertEqual(meta[:8], bitfold.DTYPE_WORDS[name].to_bytes(8, "little"), dt)
        # A user op may take an integer first operand; the stock ops' x stays float.
        self.assertIsNone(self.ops._ready((torch.zeros(2, dtype=torch.int8),),
                                          self.ops._WORD)[1])
        self.assertEqual(self.ops._ready((torch.zeros(2, dtype=torch.int8),))[1][0], "dtype")

    def test_a_per_row_k_output_comes_back_as_rows_by_k(self):
        # layer_norm_stats2: (mean, rstd) as per_row(2); the launch binds the
        # [rows..., 2] tensor the op allocates, the fake impl has its shape.
        root = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "zoo")
        with open(os.path.join(root, "layer_norm_stats2.bfk")) as f:
            ln = self.bt.op_from_source(f.read(), f"{self.ns}::layer_norm_stats2")
        x = torch.randn(3, 5, 64).bfloat16()
        y, stats = ln(x, 1e-5)
        self.assertEqual((y.shape, stats.shape, stats.dtype),
                         (x.shape, (3, 5, 2), torch.float32))
        s = self.bt.stats()[f"{self.ns}::layer_norm_stats2"]
        self.assertEqual((s["launches"], s["fallbacks"]), (1, {}))
        op = getattr(torch.ops, self.ns).layer_norm_stats2
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            fy, fstats = op(torch.empty(4, 7, 32, dtype=torch.bfloat16), 1e-5)
        self.assertEqual(fstats.shape, (4, 7, 2))

    def test_verify_once_leaves_an_op_without_fallback_on_its_fast_path(self):
        f = self.bt.op_from_source(silu_and_mul_program("silu_and_mul_v"),
                                   f"{self.ns}::silu_and_mul_v")
        self.bt.configure(verify="once")
        g = torch.randn(2, 64).bfloat16()
        for _ in range(3):
            f(g, g)
        s = self.bt.stats()[f"{self.ns}::silu_and_mul_v"]
        self.assertEqual((s["launches"], s["verified"], s["mismatches"]), (3, 0, 0))
        (launch, verified, _), = python_sites(self.ops, f"{self.ns}::silu_and_mul_v").values()
        self.assertTrue(verified)

    def test_the_fake_impl_follows_the_shape_rule_under_torch_compile(self):
        f = self.bt.op_from_source(SCALE_TEXT, f"{self.ns}::scale_two_ways")
        op = getattr(torch.ops, self.ns).scale_two_ways
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            x = torch.empty(4, 7, 32)
            ya, yb = op(x, 3.0)
        self.assertEqual((ya.shape, ya.dtype, yb.shape, yb.dtype),
                         (x.shape, torch.float32, x.shape, torch.bfloat16))

        def model(x):
            ya, yb = op(x, 0.5, 4.0)
            return ya + 1, yb
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        ya, yb = compiled(torch.randn(2, 32))
        self.assertEqual((ya.shape, yb.dtype), ((2, 32), torch.bfloat16))
        ya, yb = f(torch.randn(2, 32), 0.5)  # b's default
        self.assertEqual(yb.dtype, torch.bfloat16)

    def test_bad_input_raises_naming_the_argument(self):
        f = self.bt.op_from_source(silu_and_mul_program(), f"{self.ns}::silu_and_mul")
        g = torch.randn(2, 64).bfloat16()
        cases = [
            (lambda: f(g), TypeError, "up"),
            (lambda: f(g, 1.0), TypeError, "argument 'up' must be a tensor"),
            (lambda: f(g, g.float()), TypeError, "argument 'up' is torch.float32"),
            (lambda: f(g, torch.randn(2, 128).bfloat16()[:, ::2]), ValueError, "up"),
        ]
        for call, kind, text in cases:
            with self.assertRaisesRegex(kind, text):
                call()
        self.ops._ALLOW_HOST = False
        with self.assertRaisesRegex(ValueError, "argument 'gate' is a cpu tensor"):
            f(g, g)

    def test_names_and_programs_are_checked_at_definition(self):
        import bitfold
        self.bt.op_from_source(silu_and_mul_program(), f"{self.ns}::silu_and_mul")
        with self.assertRaisesRegex(ValueError, "already registered"):
            self.bt.op_from_source(silu_and_mul_program(), f"{self.ns}::silu_and_mul")
        with self.assertRaisesRegex(ValueError, "namespace::op"):
            self.bt.op_from_source(silu_and_mul_program(), "silu_and_mul")
        bad = SCALE_TEXT.replace("%h = round to bf16 %yb : bf16", "%h = mul %yb, %x : bf16")
        with self.assertRaisesRegex(bitfold.BitfoldError, r"<source>:\d+:\d+"):
            self.bt.op_from_source(bad.replace("scale_two_ways", "bad_text"),
                                   f"{self.ns}::bad_text")

    def test_a_fallback_serves_refused_inputs_like_the_stock_ops(self):
        def eager(gate, up):
            return torch.nn.functional.silu(gate) * up
        f = self.bt.op_from_source(silu_and_mul_program("silu_and_mul_fb"),
                                   f"{self.ns}::silu_and_mul_fb", fallback=eager)
        g = torch.randn(2, 128).bfloat16()[:, ::2]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(2):
                y = f(g, g)
        self.assertTrue(torch.equal(y, eager(g, g)))
        self.assertEqual(self.bt.stats()[f"{self.ns}::silu_and_mul_fb"]["fallbacks"],
                         {"stride": 2})
        self.assertEqual(len(w), 1)
        self.bt.configure(mode="strict")
        with self.assertRaises(self.bt.BitfoldFallback):
            f(g, g)

    def test_the_tutorial_code_defines_its_op_and_model(self):
        import re
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                            "torch-tutorial.md")
        with open(path) as f:
            first = re.findall(r"```python\n(.*?)```", f.read(), re.S)[0]
        self.assertLess(len(first.splitlines()), 30)
        scope = {}
        exec(compile(first, "torch-tutorial.md", "exec"), scope)
        x = torch.randn(2, 3, 64).bfloat16()
        self.assertEqual(scope["MLP"](64, 96).bfloat16()(x).shape, x.shape)
        self.assertEqual(self.bt.stats()["mylib::silu_and_mul"]["launches"], 1)

    def test_the_decorator_form(self):
        @self.bt.kernel(f"{self.ns}::silu_and_mul_dec")
        def silu_and_mul():
            return silu_and_mul_program("silu_and_mul_dec")
        g = torch.randn(2, 64).bfloat16()
        self.assertEqual(silu_and_mul(g, g).shape, g.shape)


if __name__ == "__main__":
    unittest.main()
