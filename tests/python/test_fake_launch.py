"""Launch plumbing from Python on CPU: libbitfold built with the fake
compiler ($BITFOLD_TEST_FAKE_LIB) over the fake libcuda
($BITFOLD_TEST_FAKE_CUDA), which records what cuLaunchKernel was given.
The raw path, the DLPack path and threads must launch the parameters the
C++ launch tests expect (tests/runtime/LaunchTest.cpp)."""
import ctypes
import os
import struct
import threading
import unittest

import bitfold
from bitfold import RawTensor

FAKE_LIB = os.environ.get("BITFOLD_TEST_FAKE_LIB")
FAKE_CUDA = os.environ.get("BITFOLD_TEST_FAKE_CUDA")


class FakeLaunch(ctypes.Structure):
    _fields_ = [("function", ctypes.c_void_p), ("context", ctypes.c_void_p),
                ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("sharedBytes", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("programmatic", ctypes.c_int), ("numParams", ctypes.c_int),
                ("params", ctypes.c_uint64 * 64)]


def f32_bits(v):
    return struct.unpack("I", struct.pack("f", v))[0]


def ln_tensors(addr_y=0x40000000):
    """x (2, 4, 64); scale and shift chunks of a (2, 256) tensor; y."""
    return [RawTensor(0x10000000, "bf16", (2, 4, 64), (256, 64, 1), 0),
            RawTensor(0x20000000, "bf16", (2, 64), (256, 1), 0),
            RawTensor(0x20000080, "bf16", (2, 64), (256, 1), 0),
            RawTensor(addr_y, "bf16", (2, 4, 64), (256, 64, 1), 0)]


LN_PARAMS = [0x10000000, 64, 0x20000000, 256, 0x20000080, 256, 0x40000000, 64, 8, 4,
             f32_bits(1e-6)]


@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class FakeDriverLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["BITFOLD_LIBCUDA"] = FAKE_CUDA
        cls.rt = bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False)
        cls.k = cls.rt.kernel("ln_modulate")
        cls.k.launch(ln_tensors(), [1e-6])  # loads the fake driver
        cls.fake = ctypes.CDLL(FAKE_CUDA)
        cls.fake.fake_cuda_last_launch.restype = FakeLaunch
        cls.fake.fake_cuda_expect_params.argtypes = [ctypes.c_int]

    @classmethod
    def tearDownClass(cls):
        cls.rt.close()

    def last(self):
        return self.fake.fake_cuda_last_launch()

    def assertParams(self, launch, want):
        got = [launch.params[i] for i in range(len(want))]
        self.assertEqual(got, want, f"parameters {got} vs expected {want}")

    def test_raw_launch_passes_the_abi_parameters(self):
        self.fake.fake_cuda_expect_params(11)
        self.k.launch(ln_tensors(), [1e-6], stream=0xABC0)
        launch = self.last()
        self.assertParams(launch, LN_PARAMS)
        self.assertEqual(launch.stream, 0xABC0)
        self.assertEqual(launch.grid[0], 4)  # fake config r2: 8 rows -> 4 CTAs

    def test_dlpack_launch_matches_the_raw_one(self):
        keep, caps = [], []
        for t in ln_tensors():
            shape = (ctypes.c_int64 * len(t.shape))(*t.shape)
            strides = (ctypes.c_int64 * len(t.strides))(*t.strides)
            dl = bitfold._lib.DLTensor(t.data, bitfold._lib.DLDevice(2, 0), len(t.shape),
                                       bitfold._lib.DLDataType(4, 16, 1), shape, strides, 0)
            # A DLManagedTensor: the DLTensor, manager_ctx, deleter (none).
            managed = (ctypes.c_char * (ctypes.sizeof(dl) + 16))()
            ctypes.memmove(managed, ctypes.byref(dl), ctypes.sizeof(dl))
            keep += [shape, strides, managed]
            new = ctypes.pythonapi.PyCapsule_New
            new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                          ctypes.c_void_p]
            caps.append(new(ctypes.addressof(managed), b"dltensor", None))
        self.fake.fake_cuda_expect_params(11)
        self.k.launch(caps, [1e-6])
        self.assertParams(self.last(), LN_PARAMS)

    def test_a_kernel_from_source_launches_its_programs_abi(self):
        # examples/user_kernels/softmax.bfk: x then y, no dims, no scalars.
        path = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                            "user_kernels", "softmax.bfk")
        with open(path) as f:
            k = self.rt.kernel_from_source(f.read())
        self.assertEqual(k.tensor_names, ["x", "y"])
        self.fake.fake_cuda_expect_params(5)
        k.launch([RawTensor(0x10000000, "bf16", (4, 64), (64, 1), 0),
                  RawTensor(0x20000000, "bf16", (4, 64), (64, 1), 0)], [], stream=0xABC0)
        launch = self.last()
        self.assertParams(launch, [0x10000000, 64, 0x20000000, 64, 4])
        self.assertEqual(launch.stream, 0xABC0)

    def test_rejections_raise_with_the_c_status(self):
        bad = ln_tensors()
        bad[0] = bad[0]._replace(dtype="f16")
        with self.assertRaises(bitfold.BitfoldError) as e:
            self.k.launch(bad, [1e-6])
        self.assertEqual(e.exception.status, "BITFOLD_ERROR_DTYPE")
        bad = ln_tensors(addr_y=0x40000002)
        with self.assertRaises(bitfold.BitfoldError) as e:
            self.k.launch(bad, [1e-6])
        self.assertEqual(e.exception.status, "BITFOLD_ERROR_ALIGNMENT")
        with self.assertRaises(bitfold.BitfoldError) as e:
            self.k.launch_raw(b"\0" * 8, b"\0" * 16, 2, 1, [1e-6])
        self.assertEqual(e.exception.status, "BITFOLD_ERROR_INVALID_ARGUMENT")
        with self.assertRaises(bitfold.BitfoldError) as e:
            self.k.launch(ln_tensors(), [])
        self.assertEqual(e.exception.status, "BITFOLD_ERROR_INVALID_ARGUMENT")

    def test_first_launch_of_a_class_compiles_once(self):
        before = self.rt.cache_stats()["compiles"]
        t = [RawTensor(0x10000000, "bf16", (1, 8, 96), (768, 96, 1), 0),
             RawTensor(0x20000000, "bf16", (1, 96), (96, 1), 0),
             RawTensor(0x30000000, "bf16", (1, 96), (96, 1), 0),
             RawTensor(0x40000000, "bf16", (1, 8, 96), (768, 96, 1), 0)]
        for _ in range(3):
            self.k.launch(t, [1e-5])
        self.assertEqual(self.rt.cache_stats()["compiles"], before + 1)

    def test_two_threads_launch_concurrently(self):
        errors = []

        def worker(stream):
            try:
                for _ in range(300):
                    self.k.launch(ln_tensors(), [1e-6], stream=stream)
            except Exception as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=worker, args=(s,)) for s in (0x100, 0x200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_two_groups_in_one_launch(self):
        qk = self.rt.kernel("qk_layernorm")
        t = [RawTensor(0x10000000, "bf16", (1, 3, 32, 128), (12288, 4096, 128, 1), 0),
             RawTensor(0x20000000, "bf16", (1, 3, 32, 128), (12288, 4096, 128, 1), 0),
             RawTensor(0x30000000, "bf16", (1, 5, 32, 128), (20480, 4096, 128, 1), 0),
             RawTensor(0x40000000, "bf16", (1, 5, 32, 128), (20480, 4096, 128, 1), 0)]
        self.fake.fake_cuda_expect_params(11)
        qk.launch(t, [1e-6])
        self.assertParams(self.last(), [0x10000000, 128, 0x20000000, 128, 0x30000000, 128,
                                        0x40000000, 128, 96, 160, f32_bits(1e-6)])


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(FAKE_LIB and FAKE_CUDA, "BITFOLD_TEST_FAKE_LIB/_CUDA not set")
class FakeDriverPrewarm(unittest.TestCase):
    """Kernel.prewarm / Runtime.prewarm_status and the options of 0.2."""

    def setUp(self):
        os.environ["BITFOLD_LIBCUDA"] = FAKE_CUDA
        self.rt = bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False, compile_threads=2,
                                  cache_max_bytes=0, tune_on_miss="off",
                                  tune_budget_seconds=5)

    def tearDown(self):
        self.rt.close()

    def test_prewarm_then_launch_compiles_nothing_more(self):
        k = self.rt.kernel("ln_modulate")
        k.prewarm([(1, 8, 96), (1, 8, 160)])
        st = self.rt.prewarm_status(wait=True)
        self.assertEqual((st["pending"], st["done"], st["failed"]), (0, 2, 0), st)
        compiles = self.rt.cache_stats()["compiles"]
        self.assertEqual(compiles, 2)
        x = RawTensor(0x10000000, "bf16", (1, 8, 96), (768, 96, 1), 0)
        v = RawTensor(0x20000000, "bf16", (1, 96), (96, 1), 0)
        y = RawTensor(0x40000000, "bf16", (1, 8, 96), (768, 96, 1), 0)
        k.launch([x, v, v, y], [1e-6])
        self.assertEqual(self.rt.cache_stats()["compiles"], compiles,
                         "a launch of a prewarmed shape (1, 8, 96) compiled again")

    def test_async_compile_raises_not_ready_then_launches(self):
        rt = bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False, async_compile=True)
        try:
            k = rt.kernel("ln_modulate")
            x = RawTensor(0x10000000, "bf16", (1, 8, 224), (1792, 224, 1), 0)
            v = RawTensor(0x20000000, "bf16", (1, 224), (224, 1), 0)
            y = RawTensor(0x40000000, "bf16", (1, 8, 224), (1792, 224, 1), 0)
            with self.assertRaises(bitfold.NotReady) as e:
                k.launch([x, v, v, y], [1e-6])
            self.assertEqual(e.exception.status, "BITFOLD_STATUS_NOT_READY")
            self.assertIsInstance(e.exception, bitfold.BitfoldError)
            rt.prewarm_status(wait=True)
            k.launch([x, v, v, y], [1e-6])
            self.assertEqual(rt.cache_stats()["compiles"], 1)
        finally:
            rt.close()

    def test_prewarm_of_a_bad_shape_raises(self):
        k = self.rt.kernel("ln_modulate")
        with self.assertRaises(bitfold.BitfoldError) as e:
            k.prewarm([()])
        self.assertEqual(e.exception.status, "BITFOLD_ERROR_INVALID_ARGUMENT")

    def test_unknown_tune_mode_is_refused(self):
        with self.assertRaises(ValueError):
            bitfold.Runtime(lib_path=FAKE_LIB, disk_cache=False, tune_on_miss="sometimes")
