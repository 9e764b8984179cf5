"""bitfold.torch's async compile default on CPU (skipped, visibly, without
torch): a first call at a new shape class is served by the eager chain
while the kernel compiles in the background, later calls get the kernel;
many threads' first calls of one shape queue one compile and every caller
is served; a compile that fails in the background is reported once and
leaves the shape on eager; ops without an eager chain (and strict mode)
wait for their own class's compile, not for every compile queued; the
mode is the default once bitfold.torch is imported, and
configure(async_compile=False) / $BITFOLD_ASYNC_COMPILE=0 turn it off.
Host tensors on the fake driver (its kernels write nothing) or stub
kernels (one fails its background compile, one stays busy a while).
"""
import os
import threading
import unittest
import warnings

try:
    import torch
except ImportError:  # the package's core is tested without torch
    torch = None

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")


def inputs(rows=8, cols=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, rows, cols, generator=g).to(torch.bfloat16)
    proj = torch.randn(2, 2 * cols, generator=g).to(torch.bfloat16)
    return x, proj[:, :cols], proj[:, cols:]


class FailingKernel:
    """A real kernel's metadata whose launches answer NOT_READY once, then
    the compile failure a background compile would have recorded."""

    def __init__(self, real):
        self.name, self.params, self.tensor_names = real.name, real.params, real.tensor_names
        self.lib = type("StubLib", (), {"bitfold_path": "<stub>"})()  # no prepared launches
        self.attempts = 0

    def launch_raw(self, *args):
        import bitfold
        self.attempts += 1
        if self.attempts == 1:
            raise bitfold.NotReady("BITFOLD_STATUS_NOT_READY", "compiling in the background")
        raise bitfold.BitfoldError("BITFOLD_ERROR_COMPILE", "ptxas: the stub fails")


class SlowKernel:
    """A real kernel whose launches answer NOT_READY `busy` times first, on
    a runtime that always has another compile pending and whose
    wait-for-every-compile must not be called."""

    class BusyRuntime:
        def prewarm_status(self, wait=False):
            if wait:
                raise AssertionError("waited for every compile of the runtime")
            return {"pending": 1, "done": 0, "failed": 0}

    def __init__(self, real, busy):
        self.real, self.busy = real, busy
        self.name, self.params, self.tensor_names = real.name, real.params, real.tensor_names
        self.lib = type("StubLib", (), {"bitfold_path": "<stub>"})()  # no prepared launches
        self.rt = SlowKernel.BusyRuntime()
        self.attempts = 0

    def launch_raw(self, *args):
        import bitfold
        self.attempts += 1
        if self.attempts <= self.busy:
            raise bitfold.NotReady("BITFOLD_STATUS_NOT_READY", "compiling in the background")
        return self.real.launch_raw(*args)


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class AsyncCompileOnTheFakeDriver(unittest.TestCase):
    def setUp(self):
        import bitfold
        import bitfold.torch as bt
        from bitfold.torch import _ops, _table
        os.environ["BITFOLD_LIBCUDA"] = FAKE_CUDA
        self.bitfold, self.bt, self.ops, self.table = bitfold, bt, _ops, _table
        self.saved = (bitfold._default, bitfold._async_choice, _ops._ALLOW_HOST)
        self.rt = bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False, async_compile=True)
        self.use(self.rt)
        _ops._ALLOW_HOST = True
        bt.reset_stats()
        bt.configure(mode="auto", verify="off")

    def use(self, rt):
        self.bitfold._default = rt
        for op in self.table.OPS:
            op.new_kernels()

    def tearDown(self):
        self.bitfold._default, self.bitfold._async_choice, self.ops._ALLOW_HOST = self.saved
        for op in self.table.OPS:
            op.new_kernels()
        self.rt.close()

    def stats(self):
        return self.bt.stats()["ln_modulate"]

    def test_first_call_is_served_by_eager_and_a_later_one_by_the_kernel(self):
        x, sc, sh = inputs()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # serving eager while compiling never warns
            y = self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertTrue(torch.equal(y, self.bt._eager.ln_modulate(x, sc, sh, 1e-6)))
        self.assertEqual(self.stats()["compiling"], 1)
        self.assertEqual(self.stats()["launches"], 0)
        self.assertEqual(self.stats()["fallbacks"], {}, "serving eager while compiling "
                         "is not a fallback")
        self.assertEqual(self.bt.wait_for_compiles()["pending"], 0)
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual(self.stats()["launches"], 2)
        self.assertEqual(self.stats()["compiling"], 1)
        self.assertEqual(self.rt.cache_stats()["compiles"], 1)

    def test_quick_first_compiles_the_quick_config_then_the_chosen_one(self):
        rt = self.bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False, async_compile=True,
                                  quick_first=True)
        try:
            self.use(rt)
            g = torch.Generator().manual_seed(3)
            x = torch.randn(2, 8, 4096, generator=g).to(torch.bfloat16)
            w = torch.randn(4096, generator=g).to(torch.bfloat16)
            y = self.bt.hf_rmsnorm(x, w, 1e-6)
            self.assertTrue(torch.equal(y, self.bt._eager.hf_rmsnorm(x, w, 1e-6)))
            st = self.bt.wait_for_compiles()
            # The quick config (two passes on 256 threads), then the upgrade
            # to the chosen one: two compiles, both background tasks.
            self.assertEqual((st["pending"], st["done"], st["failed"]), (0, 2, 0), st)
            self.assertEqual(rt.cache_stats()["compiles"], 2)
            self.bt.hf_rmsnorm(x, w, 1e-6)
            self.assertEqual(self.bt.stats()["hf_rmsnorm"]["launches"], 1)
            self.assertEqual(rt.cache_stats()["compiles"], 2)
        finally:
            self.use(self.rt)
            rt.close()

    def test_out_argument_gets_the_eager_result_while_compiling(self):
        x, sc, sh = inputs()
        out = torch.full_like(x, 7.0)
        r = self.bt.ln_modulate(x, sc, sh, 1e-6, out=out)
        self.assertIs(r, out)
        self.assertTrue(torch.equal(out, self.bt._eager.ln_modulate(x, sc, sh, 1e-6)))

    def test_many_threads_first_calls_of_one_shape_compile_once_and_are_all_served(self):
        x, sc, sh = inputs(rows=16, cols=128)
        want = self.bt._eager.ln_modulate(x, sc, sh, 1e-6)
        n, start, results, errors = 8, threading.Barrier(8), [None] * 8, []

        def caller(i):
            try:
                start.wait()
                results[i] = self.bt.ln_modulate(x, sc, sh, 1e-6)
            except Exception as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        self.assertFalse(any(t.is_alive() for t in threads), "a first call hangs")
        self.assertEqual(errors, [])
        s = self.stats()
        self.assertEqual(s["compiling"] + s["launches"], n, "a caller was not served")
        self.assertGreaterEqual(s["compiling"], 1)
        for r in results:
            self.assertEqual(r.shape, x.shape)
        eager_served = sum(torch.equal(r, want) for r in results)
        self.assertGreaterEqual(eager_served, s["compiling"])
        self.rt.prewarm_status(wait=True)
        self.assertEqual(self.rt.cache_stats()["compiles"], 1, "one shape, one compile")

    def test_a_background_compile_failure_is_reported_once_and_the_shape_stays_eager(self):
        real = self.rt.kernel("ln_modulate", "dtype=bf16")
        stub = FailingKernel(real)
        self.table.LN_MODULATE.kernels = lambda variant: stub
        x, sc, sh = inputs()
        want = self.bt._eager.ln_modulate(x, sc, sh, 1e-6)
        self.assertTrue(torch.equal(self.bt.ln_modulate(x, sc, sh, 1e-6), want))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(3):
                self.assertTrue(torch.equal(self.bt.ln_modulate(x, sc, sh, 1e-6), want))
        self.assertEqual(len([w for w in seen if "compile" in str(w.message)]), 1,
                         [str(w.message) for w in seen])
        s = self.stats()
        self.assertEqual((s["compiling"], s["launches"], s["fallbacks"]),
                         (1, 0, {"compile": 3}))
        self.assertEqual(stub.attempts, 2, "the failed layout reached the library again")

    def test_an_op_without_an_eager_chain_waits_for_its_compile(self):
        from bitfold.torch import op_from_source
        text = "\n".join([
            "bitfold.row_program async_residual_add v1", "groups 1",
            "guard cols % 1 == 0, 1 <= cols <= 16777216",
            "input x : bf16 row_major per_element", "input r : bf16 row_major per_element",
            "body:", "  %x = load x : bf16", "  %xf = extend %x : f32", "  %r = load r : bf16",
            "  %rf = extend %r : f32", "  %sum = add %xf, %rf : f32",
            "  %y = round to bf16 %sum : bf16", "  output y : bf16 row_major = %y", ""])
        f = op_from_source(text, "bitfold_async_test::residual_add", runtime=self.rt)
        x = torch.randn(4, 64).to(torch.bfloat16)
        y = f(x, x)
        self.assertEqual(y.shape, x.shape)
        s = self.bt.stats()["bitfold_async_test::residual_add"]
        self.assertEqual((s["launches"], s["compiling"]), (1, 0))

    def test_strict_mode_waits_for_the_compile_instead_of_serving_eager(self):
        self.bt.configure(mode="strict")
        x, sc, sh = inputs(cols=96)
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual((self.stats()["launches"], self.stats()["compiling"]), (1, 0))

    def test_a_call_that_waits_waits_for_its_own_class_only(self):
        # Strict mode: the call waits; other compiles stay pending throughout
        # (another op's class, an upgrade), and it is served once its own
        # class answers.
        x, sc, sh = inputs()
        real = self.rt.kernel("ln_modulate", "dtype=bf16")
        self.bt.ln_modulate(x, sc, sh, 1e-6)  # the real class compiles ...
        self.rt.prewarm_status(wait=True)  # ... and is ready
        self.bt.reset_stats()
        self.bt.configure(mode="strict")
        stub = SlowKernel(real, busy=3)
        self.table.LN_MODULATE.kernels = lambda variant: stub
        self.bt.ln_modulate(x, sc, sh, 1e-6)
        self.assertEqual(stub.attempts, 4)
        self.assertEqual((self.stats()["launches"], self.stats()["compiling"]), (1, 0))

    def test_closing_the_runtime_while_compiles_run_does_not_hang(self):
        rt = self.bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False, async_compile=True)
        self.use(rt)
        for cols in (64, 128, 192, 256, 320, 384, 448, 512):
            x, sc, sh = inputs(cols=cols)
            y = self.bt.ln_modulate(x, sc, sh, 1e-6)
            self.assertTrue(torch.equal(y, self.bt._eager.ln_modulate(x, sc, sh, 1e-6)))
        done = threading.Event()
        threading.Thread(target=lambda: (rt.close(), done.set()), daemon=True).start()
        self.assertTrue(done.wait(60), "closing a runtime with compiles queued hangs")
        self.use(self.rt)


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
class AsyncCompileIsTheDefault(unittest.TestCase):
    def setUp(self):
        import bitfold
        import bitfold.torch as bt
        self.bitfold, self.bt = bitfold, bt
        self.saved = (bitfold._async_choice, os.environ.get("BITFOLD_ASYNC_COMPILE"))
        bitfold._async_choice = None
        os.environ.pop("BITFOLD_ASYNC_COMPILE", None)

    def tearDown(self):
        self.bitfold._async_choice = self.saved[0]
        if self.saved[1] is None:
            os.environ.pop("BITFOLD_ASYNC_COMPILE", None)
        else:
            os.environ["BITFOLD_ASYNC_COMPILE"] = self.saved[1]

    def test_importing_bitfold_torch_makes_the_default_runtime_async(self):
        self.assertTrue(self.bitfold.default_async_compile())

    def test_quick_first_follows_async_compile_unless_the_environment_says(self):
        saved = os.environ.pop("BITFOLD_QUICK_FIRST", None)
        try:
            self.assertTrue(self.bitfold.default_quick_first(True))
            self.assertFalse(self.bitfold.default_quick_first(False))
            os.environ["BITFOLD_QUICK_FIRST"] = "0"
            self.assertFalse(self.bitfold.default_quick_first(True))
            os.environ["BITFOLD_QUICK_FIRST"] = "1"
            self.assertTrue(self.bitfold.default_quick_first(False))
        finally:
            os.environ.pop("BITFOLD_QUICK_FIRST", None)
            if saved is not None:
                os.environ["BITFOLD_QUICK_FIRST"] = saved

    def test_the_environment_turns_it_off(self):
        os.environ["BITFOLD_ASYNC_COMPILE"] = "0"
        self.assertFalse(self.bitfold.default_async_compile())

    def test_configure_wins_over_the_environment(self):
        os.environ["BITFOLD_ASYNC_COMPILE"] = "1"
        saved = self.bitfold._default
        self.bitfold._default = None  # no runtime to switch
        try:
            self.assertFalse(self.bt.configure(async_compile=False)["async_compile"])
            self.assertFalse(self.bitfold.default_async_compile())
        finally:
            self.bitfold._default = saved


if __name__ == "__main__":
    unittest.main()
