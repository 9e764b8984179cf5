//===- tests/runtime/LaunchTest.cpp - The launch path on a fake driver ----===//
//
// Everything after validation, on CPU: the fake libcuda (FakeCuda.cpp)
// records what cuLaunchKernel receives, the fake compiler (FakeCodegen.cpp)
// stands in for codegen. Checks the ABI order of the parameters, the grid,
// specialisation keys (what recompiles and what does not), contexts, the
// disk cache across runtimes, driver errors, that warm launches allocate
// nothing, and the tune DB (winner, default, stale, pinned, row buckets).
//
//===----------------------------------------------------------------------===//

#include "AllocationCounter.h"
#include "FakeCodegen.h"
#include "FakeCuda.h"

#include "autotune/ShapeClass.h"
#include "autotune/TuneDB.h"
#include "capi/CApiInternal.h"
#include "capi/Compose.h"
#include "cuda/Driver.h"
#include "runtime/Runtime.h"
#include "runtime/Status.h"
#include "runtime/bitfold.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <future>
#include <new>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;
using namespace bitfold::policy;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

constexpr DLDataType kBF16{kDLBfloat, 16, 1};

struct Hooks {
  FakeExpectParamsFn expectParams;
  FakeLastLaunchFn lastLaunch;
  FakeCountFn count;
  FakeTextFn lastImage, lastFunction;
  FakeUserContextFn userContext;
  FakeClearContextsFn clearContexts;
  FakeCaptureModeFn captureMode;
  FakeBeginCaptureFn beginCapture;
  FakeEndCaptureFn endCapture;
};

/// The fake's hooks (loading the driver first, as the runtime would).
const Hooks &hooks() {
  static Hooks h = [] {
    auto api = driver();
    EXPECT_TRUE(bool(api)) << llvm::toString(api.takeError());
    void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(lib, nullptr);
    Hooks h{};
    h.expectParams = (FakeExpectParamsFn)dlsym(lib, "fake_cuda_expect_params");
    h.lastLaunch = (FakeLastLaunchFn)dlsym(lib, "fake_cuda_last_launch");
    h.count = (FakeCountFn)dlsym(lib, "fake_cuda_count");
    h.lastImage = (FakeTextFn)dlsym(lib, "fake_cuda_last_image");
    h.lastFunction = (FakeTextFn)dlsym(lib, "fake_cuda_last_function");
    h.userContext = (FakeUserContextFn)dlsym(lib, "fake_cuda_user_context");
    h.clearContexts = (FakeClearContextsFn)dlsym(lib, "fake_cuda_clear_contexts");
    h.captureMode = (FakeCaptureModeFn)dlsym(lib, "fake_cuda_capture_mode");
    h.beginCapture = (FakeBeginCaptureFn)dlsym(lib, "fake_cuda_begin_capture");
    h.endCapture = (FakeEndCaptureFn)dlsym(lib, "fake_cuda_end_capture");
    return h;
  }();
  return h;
}

struct Tensor {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  Tensor(std::vector<int64_t> shp, uintptr_t addr, std::vector<int64_t> str = {},
         int device = 0)
      : shape(std::move(shp)), strides(std::move(str)) {
    t.data = reinterpret_cast<void *>(addr);
    t.device = {kDLCUDA, device};
    t.ndim = int(shape.size());
    t.dtype = kBF16;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
};

class Launch : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(fakeDriver);
    hooks().clearContexts();
    RuntimeOptions o;
    o.compiler = fake::fakeCompiler();
    o.cache.disk = false;
    rt = std::make_unique<Runtime>(std::move(o));
  }
  Kernel *kernel(const char *name, const char *params = "") {
    auto k = rt->findKernel(name, params);
    EXPECT_TRUE(bool(k)) << llvm::toString(k.takeError());
    return *k;
  }
  llvm::Error launch(Kernel *k, std::vector<Tensor *> ts, std::vector<float> s,
                     CUstream stream = nullptr) {
    std::vector<const DLTensor *> p;
    for (Tensor *t : ts)
      p.push_back(&t->t);
    return k->launch(p.data(), int(p.size()), s.data(), int(s.size()), stream);
  }
  std::unique_ptr<Runtime> rt;
};

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

} // namespace

TEST(FakeDriver, QueryDriverListsDevices) {
  auto info = queryDriver();
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->driverVersion, 12080);
  EXPECT_EQ(info->versionString(), "12.8");
  EXPECT_EQ(info->libraryPath, BITFOLD_FAKE_CUDA_PATH);
  ASSERT_EQ(info->devices.size(), 2u);
  EXPECT_EQ(info->devices[1].name, "Fake H200 #1");
  EXPECT_EQ(info->devices[1].arch(), "sm_90");
  EXPECT_EQ(info->devices[0].multiprocessors, 132);
  EXPECT_EQ(driver()->resolvedWith, "cuGetProcAddress_v2");
}

TEST(FakeDriver, LinkPtxWithDriver) {
  auto cubin = linkPtxWithDriver(".version 8.0\n", "sm_90");
  ASSERT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_EQ(std::string(cubin->begin(), cubin->end()), "FAKE-LINKED-CUBIN");
  EXPECT_STREQ(hooks().lastImage(), ".version 8.0\n");
  auto bad = linkPtxWithDriver("x", "compute_90");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("bad arch 'compute_90'"),
            std::string::npos);
}

TEST(FakeDriver, DeviceBufferRoundTrip) {
  auto ctx = ScopedContext::forDevice(0);
  ASSERT_TRUE(bool(ctx)) << llvm::toString(ctx.takeError());
  auto buf = DeviceBuffer::allocate(64);
  ASSERT_TRUE(bool(buf));
  ASSERT_FALSE(bool(buf->fill(0xAB)));
  char in[16] = "bitfold", out[16] = {};
  ASSERT_FALSE(bool(buf->copyFromHost(in, 8, 8)));
  ASSERT_FALSE(bool(buf->copyToHost(out, 8, 8)));
  EXPECT_STREQ(out, "bitfold");
  ASSERT_FALSE(bool(buf->copyToHost(out, 1, 0)));
  EXPECT_EQ(uint8_t(out[0]), 0xAB);
  auto over = buf->copyToHost(out, 16, 56);
  ASSERT_TRUE(bool(over));
  EXPECT_NE(llvm::toString(std::move(over)).find("overruns a 64-byte device "
                                                 "buffer"),
            std::string::npos);
  auto noDevice = ScopedContext::forDevice(5);
  ASSERT_FALSE(bool(noDevice));
  EXPECT_EQ(llvm::toString(noDevice.takeError()),
            "device cuda:5 does not exist (the driver sees 2 device(s))");
}

TEST_F(Launch, ParametersFollowTheAbiOrder) {
  Kernel *k = kernel("ln_modulate");
  // (B, S, D) = (2, 4, 64); scale and shift are chunks of a (2, 256) tensor.
  Tensor x({2, 4, 64}, 0x10000000), scale({2, 64}, 0x20000000, {256, 1}),
      shift({2, 64}, 0x20000080, {256, 1}), y({2, 4, 64}, 0x40000000);
  hooks().expectParams(11);
  int compiles = fake::fakeCompiles;
  CUstream stream = reinterpret_cast<CUstream>(uintptr_t(0xABC0));
  ASSERT_FALSE(bool(launch(k, {&x, &scale, &shift, &y}, {1e-6f}, stream)));
  EXPECT_EQ(fake::fakeCompiles, compiles + 1);
  FakeLaunch l = hooks().lastLaunch();
  // Fake default config r2.t64: 8 rows -> 4 CTAs of 128 threads.
  EXPECT_EQ(l.grid[0], 4u);
  EXPECT_EQ(l.grid[1], 1u);
  EXPECT_EQ(l.block[0], 128u);
  EXPECT_EQ(l.stream, stream);
  EXPECT_EQ(l.sharedBytes, 0u);
  const uint64_t want[] = {0x10000000, 64,  0x20000000, 256, 0x20000080, 256,
                           0x40000000, 64,  8 /*rows*/, 4 /*S*/,
                           bitsOf(1e-6f)};
  for (int i = 0; i < 11; ++i)
    EXPECT_EQ(l.params[i], want[i]) << "parameter " << i;
  EXPECT_STREQ(hooks().lastImage(), "FAKE-CUBIN ln_modulate r2.t64.v4.p1");
  EXPECT_STREQ(hooks().lastFunction(), "fake_ln_modulate");
  // No context was current: the primary context was made current (and
  // left current, as PyTorch does).
  CUcontext cur = nullptr;
  driver()->cuCtxGetCurrent(&cur);
  EXPECT_EQ(l.context, cur);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cur), 0x1000u);
}

TEST_F(Launch, WarmLaunchesDoNotRecompileOrReload) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f})));
  int compiles = fake::fakeCompiles;
  int loads = hooks().count("cuModuleLoadData");
  int launches = hooks().count("cuLaunchKernel");
  for (int i = 0; i < 5; ++i)
    ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f})));
  // Other row counts share the specialisation.
  Tensor x2({3, 5, 64}, 0x10000000), sc2({3, 64}, 0x20000000),
      sh2({3, 64}, 0x30000000), y2({3, 5, 64}, 0x40000000);
  ASSERT_FALSE(bool(launch(k, {&x2, &sc2, &sh2, &y2}, {1e-5f})));
  EXPECT_EQ(fake::fakeCompiles, compiles);
  EXPECT_EQ(hooks().count("cuModuleLoadData"), loads);
  EXPECT_EQ(hooks().count("cuLaunchKernel"), launches + 6);
  EXPECT_EQ(hooks().lastLaunch().grid[0], 8u); // 15 rows / 2

  // A new column count or alignment class is a new specialisation.
  Tensor x3({1, 8, 128}, 0x10000000), sc3({1, 128}, 0x20000000),
      sh3({1, 128}, 0x30000000), y3({1, 8, 128}, 0x40000000);
  ASSERT_FALSE(bool(launch(k, {&x3, &sc3, &sh3, &y3}, {1e-5f})));
  EXPECT_EQ(fake::fakeCompiles, compiles + 1);
  Tensor y8({1, 8, 64}, 0x40000008); // 8- instead of 16-byte aligned
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y8}, {1e-5f})));
  EXPECT_EQ(fake::fakeCompiles, compiles + 2);
  std::string key = k->lastSpecialisation().keyText;
  EXPECT_NE(key.find("shape: c64.a16-16-16-8.o32"), std::string::npos)
      << key;
}

// aten's reduction order depends on the row class below 16 rows
// (docs/aten-reduce.md section 2): each class is its own definition and
// specialisation, and a launch never takes another class's kernel.
TEST_F(Launch, DecodeRowClassesTakeTheirOwnDefinition) {
  Kernel *k = kernel("hf_rmsnorm");
  auto keyFor = [&](int64_t rows) {
    Tensor x({1, rows, 4096}, 0x10000000), w({4096}, 0x20000000),
        y({1, rows, 4096}, 0x40000000);
    llvm::Error e = launch(k, {&x, &w, &y}, {1e-6f});
    EXPECT_FALSE(bool(e)) << "rows " << rows << ": "
                          << llvm::toString(std::move(e));
    return k->lastSpecialisation().keyText;
  };
  int compiles = fake::fakeCompiles;
  std::string k16 = keyFor(16), k1 = keyFor(1), k2 = keyFor(2);
  EXPECT_EQ(fake::fakeCompiles, compiles + 3);
  EXPECT_NE(k16, k1);
  EXPECT_NE(k1, k2);
  EXPECT_NE(k16, k2);
  // Same classes again: no compile, the same kernels.
  EXPECT_EQ(keyFor(3), k2);
  EXPECT_EQ(keyFor(1), k1);
  EXPECT_EQ(keyFor(4096), k16);
  EXPECT_EQ(fake::fakeCompiles, compiles + 3);
  // The classes 4..7 and 8..15: two more.
  std::string k4 = keyFor(7), k8 = keyFor(15);
  EXPECT_EQ(fake::fakeCompiles, compiles + 5);
  EXPECT_NE(k4, k8);
  EXPECT_EQ(keyFor(4), k4);
  EXPECT_EQ(keyFor(8), k8);
  EXPECT_EQ(fake::fakeCompiles, compiles + 5);
}

TEST_F(Launch, ProgrammaticLaunchOnlyWhenAsked) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  CUstream stream = reinterpret_cast<CUstream>(uintptr_t(0xABC0));
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f}, stream)));
  EXPECT_EQ(hooks().lastLaunch().programmatic, -1) << "plain by default";
  EXPECT_FALSE(k->lastSpecialisation().gridDependencyWait);
  std::string plainKey = k->lastSpecialisation().keyText;

  // PDL launches need a kernel compiled to wait for its predecessor: a
  // specialisation of its own (and cache key), compiled once.
  k->setProgrammaticLaunch(true);
  int plain = hooks().count("cuLaunchKernel");
  int ex = hooks().count("cuLaunchKernelEx");
  int compiles = fake::fakeCompiles;
  hooks().expectParams(11);
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f}, stream)));
  EXPECT_EQ(fake::fakeCompiles, compiles + 1);
  EXPECT_TRUE(k->lastSpecialisation().gridDependencyWait);
  EXPECT_NE(k->lastSpecialisation().keyText, plainKey);
  EXPECT_NE(k->lastSpecialisation().keyText.find("pdl=1"), std::string::npos);
  EXPECT_EQ(hooks().count("cuLaunchKernel"), plain);
  EXPECT_EQ(hooks().count("cuLaunchKernelEx"), ex + 1);
  FakeLaunch l = hooks().lastLaunch();
  EXPECT_EQ(l.programmatic, 1);
  EXPECT_EQ(l.grid[0], 4u); // 8 rows / 2 per CTA
  EXPECT_EQ(l.block[0], 128u);
  EXPECT_EQ(l.stream, stream);
  EXPECT_EQ(l.params[0], 0x10000000u);
  EXPECT_EQ(l.params[10], bitsOf(1e-5f));

  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f}, stream)));
  EXPECT_EQ(fake::fakeCompiles, compiles + 1) << "warm";

  k->setProgrammaticLaunch(false);
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f}, stream)));
  EXPECT_EQ(hooks().lastLaunch().programmatic, -1);
  EXPECT_EQ(hooks().count("cuLaunchKernel"), plain + 1);
  EXPECT_EQ(k->lastSpecialisation().keyText, plainKey);
  EXPECT_EQ(fake::fakeCompiles, compiles + 1);
}

TEST_F(Launch, HugeTensorsUse64BitIndexing) {
  Kernel *k = kernel("ln_modulate");
  // 2^26 rows of 64: the last element is at offset 2^32 - 1.
  Tensor x({1, int64_t(1) << 26, 64}, 0x100000000),
      sc({1, 64}, 0x20000000), sh({1, 64}, 0x30000000),
      y({1, int64_t(1) << 26, 64}, 0x1000000000);
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f})));
  std::string key = k->lastSpecialisation().keyText;
  EXPECT_NE(key.find("shape: c64.a16-16-16-16.o64"), std::string::npos) << key;
  EXPECT_EQ(hooks().lastLaunch().grid[0], 1u << 25);
}

TEST_F(Launch, TwoGroupsInOneLaunch) {
  Kernel *k = kernel("qk_layernorm");
  Tensor q({1, 3, 32, 128}, 0x10000000), qy({1, 3, 32, 128}, 0x20000000),
      kx({1, 5, 32, 128}, 0x30000000), ky({1, 5, 32, 128}, 0x40000000);
  hooks().expectParams(11);
  ASSERT_FALSE(bool(launch(k, {&q, &qy, &kx, &ky}, {1e-6f})));
  FakeLaunch l = hooks().lastLaunch();
  const uint64_t want[] = {0x10000000, 128, 0x20000000, 128,
                           0x30000000, 128, 0x40000000, 128,
                           96,         160, bitsOf(1e-6f)};
  for (int i = 0; i < 11; ++i)
    EXPECT_EQ(l.params[i], want[i]) << "parameter " << i;
  EXPECT_EQ(l.grid[0], 128u); // (96 + 160) / 2
}

// Channels-first operands of one S (dense NCDHW) divide a pixel index
// once (".s1", compiled in); a frames-major residual, whose S differs,
// launches the kernel that reads each operand's own S, and still binds.
TEST_F(Launch, ChannelsFirstOperandsOfOneSAreASpecialisationOfTheirOwn) {
  Kernel *k = kernel("conv_bias", "layout=channels_first,residual=1");
  auto launchConv = [&](bool framesMajor) {
    Tensor x({1, 8, 4, 6, 6}, 0x10000000), bias({8}, 0x20000000),
        h({1, 8, 4, 6, 6}, 0x30000000,
          framesMajor ? std::vector<int64_t>{1152, 36, 288, 6, 1}
                      : std::vector<int64_t>{}),
        y({1, 8, 4, 6, 6}, 0x40000000);
    llvm::Error e = launch(k, {&x, &bias, &h, &y}, {});
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    return k->lastSpecialisation().keyText;
  };
  int compiles = fake::fakeCompiles;
  std::string one = launchConv(false), each = launchConv(true);
  EXPECT_EQ(fake::fakeCompiles, compiles + 2);
  EXPECT_NE(one.find(".s1\n"), std::string::npos) << one;
  EXPECT_EQ(each.find(".s1"), std::string::npos) << each;
  EXPECT_EQ(launchConv(false), one);
  EXPECT_EQ(launchConv(true), each);
  EXPECT_EQ(fake::fakeCompiles, compiles + 2);
}

TEST_F(Launch, ChannelsFirstSmallImagesTakeTheDefinitionOfTheirPixelClass) {
  Kernel *k = kernel("wan_rmsnorm_silu", "layout=channels_first,bias=0,outvec=4");
  auto keyFor = [&](std::vector<int64_t> shape) {
    Tensor x(shape, 0x10000000), gamma({96}, 0x20000000), y(shape, 0x40000000);
    llvm::Error e = launch(k, {&x, &gamma, &y}, {9.8f});
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    return k->lastSpecialisation().keyText;
  };
  int compiles = fake::fakeCompiles;
  // 16..31 pixels (block.x 4 threads), 32..63, and 128 and more.
  std::string k16 = keyFor({1, 96, 1, 4, 4}), k32 = keyFor({2, 96, 1, 4, 4}),
              big = keyFor({1, 96, 4, 8, 8});
  EXPECT_EQ(fake::fakeCompiles, compiles + 3);
  EXPECT_NE(k16, k32);
  EXPECT_NE(k16, big);
  EXPECT_NE(k32, big);
  EXPECT_EQ(keyFor({1, 96, 1, 4, 6}), k16);
  EXPECT_EQ(keyFor({1, 96, 1, 4, 12}), k32);
  EXPECT_EQ(keyFor({1, 96, 8, 16, 16}), big);
  EXPECT_EQ(fake::fakeCompiles, compiles + 3);
}

TEST(LaunchNoConfig, ADefinitionNoConfigCanRunIsRefusedBeforeACompile) {
  ASSERT_TRUE(fakeDriver);
  RuntimeOptions o;
  o.compiler = fake::fakeCompiler();
  o.compiler->checkConfig = [](const dsl::KernelDef &, const keys::ShapeSpec &,
                               const keys::TileConfig &) -> llvm::Error {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no tile config is legal");
  };
  o.cache.disk = false;
  Runtime rt(std::move(o));
  auto k = rt.findKernel("hf_rmsnorm", "");
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  Tensor x({1, 2, 64}, 0x10000000), w({64}, 0x20000000),
      y({1, 2, 64}, 0x40000000);
  const DLTensor *ts[] = {&x.t, &w.t, &y.t};
  const float eps = 1e-6f;
  const int compiles = fake::fakeCompiles;
  std::string msg;
  EXPECT_EQ(takeStatus((*k)->launch(ts, 3, &eps, 1, nullptr), msg),
            BITFOLD_ERROR_UNSUPPORTED);
  EXPECT_NE(msg.find("no tile config can run it"), std::string::npos) << msg;
  EXPECT_EQ(fake::fakeCompiles, compiles);
}

// q and k views of a fused (B, S, 3 * H * D) projection launch in place:
// the row-stride slot holds D, the heads per token and the token stride
// are the class's (compiled in), so contiguous and strided launches never
// share a kernel, and strided launches of any B and S do.
TEST_F(Launch, TwoLevelRowsAreASpecialisationOfTheirOwn) {
  Kernel *k = kernel("qk_layernorm");
  const int64_t H = 32, D = 128, token = 3 * H * D;
  auto launchQk = [&](int64_t B, int64_t S, bool strided) {
    std::vector<int64_t> st = {S * token, token, D, 1};
    Tensor q({B, S, H, D}, 0x10000000, strided ? st : std::vector<int64_t>{}),
        kx({B, S, H, D}, strided ? 0x10000000 + H * D * 2 : 0x30000000,
           strided ? st : std::vector<int64_t>{}),
        qy({B, S, H, D}, 0x20000000), ky({B, S, H, D}, 0x40000000);
    llvm::Error e = launch(k, {&q, &qy, &kx, &ky}, {1e-6f});
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    return k->lastSpecialisation().keyText;
  };
  int compiles = fake::fakeCompiles;
  std::string plain = launchQk(1, 3, false);
  hooks().expectParams(11);
  std::string strided = launchQk(1, 3, true);
  EXPECT_EQ(fake::fakeCompiles, compiles + 2);
  EXPECT_NE(plain, strided);
  EXPECT_NE(plain.find("shape: c128.a16-16.o32\n"), std::string::npos)
      << plain;
  EXPECT_NE(strided.find("shape: c128.a16-16.o32.l0:32x12288\n"),
            std::string::npos)
      << strided;
  FakeLaunch l = hooks().lastLaunch();
  const uint64_t want[] = {0x10000000, 128, 0x20000000, 128,
                           0x10000000 + 32 * 128 * 2, 128, 0x40000000, 128,
                           96, 96, bitsOf(1e-6f)};
  for (int i = 0; i < 11; ++i)
    EXPECT_EQ(l.params[i], want[i]) << "parameter " << i;
  // Other B and S: the same kernels, warm.
  EXPECT_EQ(launchQk(2, 77, true), strided);
  EXPECT_EQ(launchQk(2, 77, false), plain);
  EXPECT_EQ(fake::fakeCompiles, compiles + 2);
}

TEST_F(Launch, CallersContextIsUsedAndOtherDevicesGetTheirPrimary) {
  Kernel *k = kernel("residual_gate");
  CUcontext user0 = hooks().userContext(0);
  ASSERT_EQ(driver()->cuCtxPushCurrent(user0), CUDA_SUCCESS);
  Tensor r({4, 64}, 0x10000000), u({4, 64}, 0x20000000),
      g({4, 64}, 0x30000000), y({4, 64}, 0x40000000);
  ASSERT_FALSE(bool(launch(k, {&r, &u, &g, &y}, {})));
  EXPECT_EQ(hooks().lastLaunch().context, user0);

  // Tensors on cuda:1 while cuda:0's context is current: cuda:1's primary
  // context is pushed for the launch, then popped.
  Tensor r1({4, 64}, 0x10000000, {}, 1), u1({4, 64}, 0x20000000, {}, 1),
      g1({4, 64}, 0x30000000, {}, 1), y1({4, 64}, 0x40000000, {}, 1);
  ASSERT_FALSE(bool(launch(k, {&r1, &u1, &g1, &y1}, {})));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(hooks().lastLaunch().context), 0x1010u);
  CUcontext cur = nullptr;
  driver()->cuCtxGetCurrent(&cur);
  EXPECT_EQ(cur, user0);
}

TEST_F(Launch, DriverLaunchErrorsAreReported) {
  Kernel *k = kernel("residual_gate");
  Tensor r({4, 64}, 0x10000000), u({4, 64}, 0x20000000),
      g({4, 64}, 0x30000000), y({4, 64}, 0x40000000);
  ::setenv("FAKE_CUDA_LAUNCH_RESULT", "700", 1);
  llvm::Error e = launch(k, {&r, &u, &g, &y}, {});
  ::unsetenv("FAKE_CUDA_LAUNCH_RESULT");
  ASSERT_TRUE(bool(e));
  std::string msg;
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_CUDA);
  EXPECT_EQ(msg, "residual_gate: cuLaunchKernel(grid 2, block 128, config "
                 "r2.t64.v4.p1): CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory "
                 "access was encountered)");
}

TEST_F(Launch, PinnedConfigIsUsedAndChecked) {
  Kernel *k = kernel("residual_gate");
  Tensor r({4, 64}, 0x10000000), u({4, 64}, 0x20000000),
      g({4, 64}, 0x30000000), y({4, 64}, 0x40000000);
  auto cfg = k->parseConfig("r4.t32.v8.p1");
  ASSERT_TRUE(bool(cfg));
  ASSERT_FALSE(bool(k->setConfig(*cfg)));
  ASSERT_FALSE(bool(launch(k, {&r, &u, &g, &y}, {})));
  EXPECT_EQ(hooks().lastLaunch().block[0], 128u);
  EXPECT_EQ(hooks().lastLaunch().grid[0], 1u);
  EXPECT_EQ(k->lastSpecialisation().config, "r4.t32.v8.p1");
  auto tooBig = k->parseConfig("r1.t2048.v8.p1");
  ASSERT_FALSE(bool(k->setConfig(*tooBig)));
  llvm::Error e = launch(k, {&r, &u, &g, &y}, {});
  std::string msg;
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("config r1.t2048.v8.p1 is not legal for c64"),
            std::string::npos)
      << msg;
}

TEST(LaunchDiskCache, ASecondRuntimeLoadsInsteadOfCompiling) {
  ASSERT_TRUE(fakeDriver);
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("bitfold-launch-test", dir));
  Tensor r({4, 64}, 0x10000000), u({4, 64}, 0x20000000),
      g({4, 64}, 0x30000000), y({4, 64}, 0x40000000);
  const DLTensor *ts[] = {&r.t, &u.t, &g.t, &y.t};
  int before = fake::fakeCompiles;
  for (int run = 0; run < 2; ++run) {
    RuntimeOptions o;
    o.compiler = fake::fakeCompiler();
    o.cache.dir = std::string(dir);
    o.cache.disk = true;
    ::unsetenv("BITFOLD_DISK_CACHE");
    Runtime rt(std::move(o));
    ::setenv("BITFOLD_DISK_CACHE", "0", 1);
    auto k = rt.findKernel("residual_gate", "");
    ASSERT_TRUE(bool(k));
    ASSERT_FALSE(bool((*k)->launch(ts, 4, nullptr, 0, nullptr)));
    EXPECT_EQ(rt.cache().stats().diskHits, run == 0 ? 0u : 1u);
  }
  EXPECT_EQ(fake::fakeCompiles, before + 1);
  llvm::sys::fs::remove_directories(dir);
}

TEST(LaunchCApi, TheCApiLaunchesThroughTheSamePath) {
  ASSERT_TRUE(fakeDriver);
  bitfold_runtime *rt = nullptr;
  bitfold_runtime_options o;
  bitfold_runtime_options_init(&o);
  o.disk_cache = 0;
  ASSERT_EQ(bitfold_runtime_create(&o, &rt), BITFOLD_SUCCESS);
  bitfold_kernel *k = nullptr;
  ASSERT_EQ(bitfold_template(rt, "conv_bias", "dtype=bf16 residual=1", &k),
            BITFOLD_SUCCESS)
      << bitfold_last_error();
  std::vector<int64_t> cl = {96 * 64, 1, 96 * 8, 96};
  Tensor x({1, 96, 8, 8}, 0x10000000, cl), b({96}, 0x20000000),
      h({1, 96, 8, 8}, 0x30000000, cl), y({1, 96, 8, 8}, 0x10000000, cl);
  const DLTensor *ts[] = {&x.t, &b.t, &h.t, &y.t};
  hooks().expectParams(9);
  ASSERT_EQ(bitfold_launch(k, ts, 4, nullptr, 0, nullptr), BITFOLD_SUCCESS)
      << bitfold_last_error();
  FakeLaunch l = hooks().lastLaunch();
  EXPECT_EQ(l.params[0], 0x10000000u);
  EXPECT_EQ(l.params[1], 96u); // channels-last: row stride = C
  EXPECT_EQ(l.params[8], 64u); // rows = N*H*W
  EXPECT_EQ(l.programmatic, -1);
  // PDL through the C API: 0 or 1 only.
  EXPECT_EQ(bitfold_kernel_set_pdl(k, 2), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_kernel_set_pdl: enable must be 0 or 1, not 2");
  EXPECT_EQ(bitfold_kernel_set_pdl(nullptr, 1), BITFOLD_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(bitfold_kernel_set_pdl(k, 1), BITFOLD_SUCCESS);
  hooks().expectParams(9);
  ASSERT_EQ(bitfold_launch(k, ts, 4, nullptr, 0, nullptr), BITFOLD_SUCCESS)
      << bitfold_last_error();
  EXPECT_EQ(hooks().lastLaunch().programmatic, 1);
  EXPECT_EQ(hooks().lastLaunch().params[8], 64u);
  bitfold_runtime_destroy(rt);
  EXPECT_GE(hooks().count("cuModuleUnload"), 1);
}

// ---- Warm launches allocate nothing ----------------------------------------

TEST(AllocationCounter, NothrowNewAndStableSortStayInOneAllocatorFamily) {
  // Under ASan this aborted (alloc-dealloc-mismatch) while only the throwing
  // forms were replaced: AllocationCounter.h says why.
  allocations = 0;
  countAllocations = true;
  int *p = new (std::nothrow) int(7);
  countAllocations = false;
  EXPECT_EQ(allocations.load(), 1);
  delete p;
  std::vector<int> v(4096);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = int((i * 2654435761u) % 1000);
  std::stable_sort(v.begin(), v.end()); // its temporary buffer: new(nothrow)
  EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
}

TEST_F(Launch, WarmLaunchesDoNotAllocate) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  const DLTensor *ts[] = {&x.t, &sc.t, &sh.t, &y.t};
  float eps = 1e-6f;
  allocations = 0;
  countAllocations = true;
  llvm::Error cold = k->launch(ts, 4, &eps, 1, nullptr); // specialises
  countAllocations = false;
  ASSERT_FALSE(bool(cold));
  EXPECT_GT(allocations.load(), 0); // the counter sees the first launch's
  allocations = 0;
  countAllocations = true;
  bool ok = true;
  for (int i = 0; i < 100; ++i)
    if (llvm::Error e = k->launch(ts, 4, &eps, 1, nullptr)) {
      llvm::consumeError(std::move(e));
      ok = false;
    }
  countAllocations = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(allocations.load(), 0);
  // Through the C API too.
  bitfold_runtime *handle = wrapRuntime(std::move(rt));
  bitfold_kernel *ck = nullptr;
  ASSERT_EQ(bitfold_template(handle, "ln_modulate", "", &ck), BITFOLD_SUCCESS);
  ASSERT_EQ(bitfold_launch(ck, ts, 4, &eps, 1, nullptr), BITFOLD_SUCCESS);
  allocations = 0;
  countAllocations = true;
  for (int i = 0; i < 100; ++i)
    ok &= bitfold_launch(ck, ts, 4, &eps, 1, nullptr) == BITFOLD_SUCCESS;
  countAllocations = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(allocations.load(), 0);
  bitfold_runtime_destroy(handle);
}

// ---- The tune DB -----------------------------------------------------------

namespace {

/// A temporary directory with a tune DB path in it.
struct TuneDbDir {
  llvm::SmallString<128> dir;
  std::string path;
  TuneDbDir() {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("bitfold-tune-db", dir));
    path = std::string(dir) + "/tune-db.json";
  }
  ~TuneDbDir() { llvm::sys::fs::remove_directories(dir); }
};

autotune::Measurement timing(std::string config, double us) {
  autotune::Measurement m;
  m.config = std::move(config);
  m.medianUs = us;
  m.minUs = us - 0.1;
  m.maxUs = us + 0.3;
  m.spreadUs = 0.2;
  m.samples = 20;
  return m;
}

/// The ShapeSpec of a ln_modulate (B, S, 64) launch on the 16-byte aligned
/// tensors below, and the environment of fake device 0.
constexpr const char *kLnShape = "c64.a16-16-16-16.o32";

autotune::TuneKey lnKey(Runtime &rt, int64_t rows,
                        std::string gpu = "Fake H200 #0") {
  auto k = rt.findKernel("ln_modulate", "");
  EXPECT_TRUE(bool(k));
  auto def = (*k)->defFor(64);
  EXPECT_TRUE(bool(def));
  return keys::tuneKeyFor(
      **def, std::string(kLnShape) + "/r" + std::to_string(keys::rowBucket(rows)),
      keys::currentEnvironment(gpu, "sm_90", "fake-toolchain"));
}

class TuneDbLaunch : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(fakeDriver);
    hooks().clearContexts();
  }
  /// A runtime reading `db`; warnings collected.
  std::unique_ptr<Runtime> runtime(const std::string &db) {
    RuntimeOptions o;
    o.compiler = fake::fakeCompiler();
    o.cache.disk = false;
    o.cache.warn = [this](llvm::StringRef m) { warnings.push_back(m.str()); };
    capi::TuneDbOptions tdb;
    tdb.path = db;
    return capi::makeRuntime(std::move(o), tdb);
  }
  /// ln_modulate on (1, rows, 64); returns what the launch resolved to.
  Kernel::LastLaunch launchLn(Runtime &rt, int64_t rows) {
    auto k = rt.findKernel("ln_modulate", "");
    EXPECT_TRUE(bool(k));
    Tensor x({1, rows, 64}, 0x10000000), sc({1, 64}, 0x20000000),
        sh({1, 64}, 0x30000000), y({1, rows, 64}, 0x40000000);
    const DLTensor *ts[] = {&x.t, &sc.t, &sh.t, &y.t};
    float eps = 1e-6f;
    llvm::Error e = (*k)->launch(ts, 4, &eps, 1, nullptr);
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    return (*k)->lastSpecialisation();
  }
  /// Writes a DB with `measurements` under `key`.
  void writeDb(const std::string &path, const autotune::TuneKey &key,
               std::vector<autotune::Measurement> measurements) {
    autotune::TuneDB db;
    db.record(key, "r2.t64.v4.p1", measurements);
    ASSERT_FALSE(bool(db.save(path)));
  }
  std::vector<std::string> warnings;
  TuneDbDir dir;
};

} // namespace

TEST_F(TuneDbLaunch, FirstLaunchUsesTheDbWinner) {
  {
    auto probe = runtime("");
    writeDb(dir.path, lnKey(*probe, 8),
            {timing("r2.t64.v4.p1", 12.0), timing("r4.t32.v8.p1", 8.0)});
  }
  auto rt = runtime(dir.path);
  int compiles = fake::fakeCompiles;
  Kernel::LastLaunch l = launchLn(*rt, 8);
  EXPECT_EQ(l.config, "r4.t32.v8.p1");
  EXPECT_EQ(l.configFrom, "tune DB");
  EXPECT_EQ(l.shapeClass, std::string(kLnShape) + "/r8");
  EXPECT_EQ(l.origin.kind, CacheOrigin::Compiled);
  EXPECT_EQ(hooks().lastLaunch().grid[0], 2u); // 8 rows / 4 per CTA
  EXPECT_STREQ(hooks().lastImage(), "FAKE-CUBIN ln_modulate r4.t32.v8.p1");
  EXPECT_EQ(fake::fakeCompiles, compiles + 1);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  // The winner is part of the specialisation: warm launches reuse it.
  launchLn(*rt, 9); // same row bucket
  EXPECT_EQ(fake::fakeCompiles, compiles + 1);
}

TEST_F(TuneDbLaunch, WithoutAnEntryTheDefaultIsUsed) {
  auto missing = runtime(dir.path); // no file yet: an empty DB
  Kernel::LastLaunch l = launchLn(*missing, 8);
  EXPECT_EQ(l.config, "r2.t64.v4.p1");
  EXPECT_EQ(l.configFrom, "default");
  EXPECT_EQ(l.shapeClass, std::string(kLnShape) + "/r8");
  // An entry for another row bucket does not apply to this one.
  writeDb(dir.path, lnKey(*missing, 64),
          {timing("r2.t64.v4.p1", 12.0), timing("r4.t32.v8.p1", 8.0)});
  auto rt = runtime(dir.path);
  EXPECT_EQ(launchLn(*rt, 8).config, "r2.t64.v4.p1");
  EXPECT_EQ(launchLn(*rt, 100).config, "r4.t32.v8.p1"); // bucket 64
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

TEST_F(TuneDbLaunch, StaleEntryIsNotUsedAndWarnsOnce) {
  {
    auto probe = runtime("");
    writeDb(dir.path, lnKey(*probe, 8, "NVIDIA A100-SXM4-80GB"),
            {timing("r2.t64.v4.p1", 12.0), timing("r4.t32.v8.p1", 8.0)});
  }
  auto rt = runtime(dir.path);
  Kernel::LastLaunch l = launchLn(*rt, 8);
  EXPECT_EQ(l.config, "r2.t64.v4.p1");
  EXPECT_EQ(l.configFrom, "default (stale DB entry)");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("A100"), std::string::npos) << warnings[0];
  // Specialising the same class again (after unpinning) warns no more.
  auto k = rt->findKernel("ln_modulate", "");
  ASSERT_FALSE(bool((*k)->setConfig(std::nullopt)));
  EXPECT_EQ(launchLn(*rt, 8).configFrom, "default (stale DB entry)");
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(TuneDbLaunch, IllegalDbConfigFallsBackToTheDefault) {
  {
    auto probe = runtime("");
    writeDb(dir.path, lnKey(*probe, 8),
            {timing("r2.t64.v4.p1", 12.0), timing("r1.t2048.v8.p1", 8.0)});
  }
  auto rt = runtime(dir.path);
  Kernel::LastLaunch l = launchLn(*rt, 8);
  EXPECT_EQ(l.config, "r2.t64.v4.p1");
  EXPECT_EQ(l.configFrom, "default (DB config not legal)");
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(TuneDbLaunch, PinnedConfigWinsOverTheDb) {
  {
    auto probe = runtime("");
    writeDb(dir.path, lnKey(*probe, 8),
            {timing("r2.t64.v4.p1", 12.0), timing("r4.t32.v8.p1", 8.0)});
  }
  auto rt = runtime(dir.path);
  auto k = rt->findKernel("ln_modulate", "");
  auto cfg = (*k)->parseConfig("r1.t128.v8.p1");
  ASSERT_TRUE(bool(cfg));
  ASSERT_FALSE(bool((*k)->setConfig(*cfg)));
  Kernel::LastLaunch l = launchLn(*rt, 8);
  EXPECT_EQ(l.config, "r1.t128.v8.p1");
  EXPECT_EQ(l.configFrom, "pinned");
}

TEST_F(TuneDbLaunch, ClassesWithTheSameConfigShareOneModule) {
  {
    auto probe = runtime("");
    autotune::TuneDB db;
    for (int64_t rows : {8, 16})
      db.record(lnKey(*probe, rows), "r2.t64.v4.p1",
                {timing("r2.t64.v4.p1", 12.0), timing("r4.t32.v8.p1", 8.0)});
    ASSERT_FALSE(bool(db.save(dir.path)));
  }
  auto rt = runtime(dir.path);
  int loads = hooks().count("cuModuleLoadData");
  EXPECT_EQ(launchLn(*rt, 8).origin.kind, CacheOrigin::Compiled);
  Kernel::LastLaunch l = launchLn(*rt, 16); // another bucket, same winner
  EXPECT_EQ(l.config, "r4.t32.v8.p1");
  EXPECT_EQ(l.origin.kind, CacheOrigin::Memory);
  EXPECT_EQ(hooks().count("cuModuleLoadData"), loads + 1);
}

TEST_F(TuneDbLaunch, UnreadableDbIsWarnedAboutAndIgnored) {
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(dir.path, ec);
    os << "{ not json";
  }
  auto rt = runtime(dir.path);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("tune DB '" + dir.path + "' not used"),
            std::string::npos)
      << warnings[0];
  Kernel::LastLaunch l = launchLn(*rt, 8);
  EXPECT_EQ(l.configFrom, "default");
  EXPECT_EQ(l.shapeClass, "");
}

TEST_F(TuneDbLaunch, TheRuntimesShapeClassIsTheTunersForDenseTensors) {
  // `bitfold tune` keys results on the dense shape class of the shapes
  // file's shape; the runtime on the tensors it is given. For dense,
  // aligned tensors they must agree, or tuned winners would never be found.
  auto rt = runtime(dir.path);
  auto shape = templates::parseShape("ln_modulate", "1,8,64");
  ASSERT_TRUE(bool(shape)) << llvm::toString(shape.takeError());
  auto k = rt->findKernel("ln_modulate", "");
  auto def = (*k)->defFor(64);
  ASSERT_TRUE(bool(def));
  std::string tuner = autotune::tunedShapeClass(**def, *shape).str();
  EXPECT_EQ(launchLn(*rt, 8).shapeClass, tuner);
}

TEST_F(TuneDbLaunch, WarmLaunchesWithATuneDbDoNotAllocate) {
  auto rt = runtime(dir.path);
  auto k = rt->findKernel("ln_modulate", "");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  const DLTensor *ts[] = {&x.t, &sc.t, &sh.t, &y.t};
  float eps = 1e-6f;
  ASSERT_FALSE(bool((*k)->launch(ts, 4, &eps, 1, nullptr)));
  allocations = 0;
  countAllocations = true;
  for (int i = 0; i < 100; ++i)
    llvm::consumeError((*k)->launch(ts, 4, &eps, 1, nullptr));
  countAllocations = false;
  EXPECT_EQ(allocations.load(), 0);
}

TEST(TuneDbCApi, TheCApiReadsBitfoldTuneDbUnlessToldOtherwise) {
  ASSERT_TRUE(fakeDriver);
  TuneDbDir dir;
  {
    RuntimeOptions o;
    o.compiler = fake::fakeCompiler();
    o.cache.disk = false;
    Runtime probe(std::move(o));
    autotune::TuneDB db;
    db.record(lnKey(probe, 8), "r2.t64.v4.p1",
              {timing("r2.t64.v4.p1", 12.0), timing("r4.t32.v8.p1", 8.0)});
    ASSERT_FALSE(bool(db.save(dir.path)));
  }
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  const DLTensor *ts[] = {&x.t, &sc.t, &sh.t, &y.t};
  float eps = 1e-6f;
  auto configWith = [&](const char *tuneDb) {
    bitfold_runtime_options o;
    bitfold_runtime_options_init(&o);
    o.disk_cache = 0;
    o.tune_db = tuneDb;
    bitfold_runtime *rt = nullptr;
    EXPECT_EQ(bitfold_runtime_create(&o, &rt), BITFOLD_SUCCESS);
    bitfold_kernel *k = nullptr;
    EXPECT_EQ(bitfold_template(rt, "ln_modulate", "", &k), BITFOLD_SUCCESS);
    EXPECT_EQ(bitfold_launch(k, ts, 4, &eps, 1, nullptr), BITFOLD_SUCCESS)
        << bitfold_last_error();
    Kernel::LastLaunch l = unwrapKernel(k)->lastSpecialisation();
    bitfold_cache_stats st{};
    EXPECT_EQ(bitfold_runtime_cache_stats(rt, &st), BITFOLD_SUCCESS);
    EXPECT_EQ(st.compiles, 1u);
    bitfold_runtime_destroy(rt);
    return l.config + " " + l.configFrom;
  };
  ::setenv("BITFOLD_TUNE_DB", dir.path.c_str(), 1);
  EXPECT_EQ(configWith(nullptr), "r4.t32.v8.p1 tune DB");
  EXPECT_EQ(configWith(""), "r2.t64.v4.p1 default");
  ::unsetenv("BITFOLD_TUNE_DB");
  EXPECT_EQ(configWith(nullptr), "r2.t64.v4.p1 default");
  EXPECT_EQ(configWith(dir.path.c_str()), "r4.t32.v8.p1 tune DB");
  EXPECT_EQ(bitfold_runtime_cache_stats(nullptr, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
}

namespace {

/// A config source that answers with a fixed config and counts questions.
struct CountingSource : ConfigSource {
  std::vector<std::string> asked;
  bool buckets = true;
  ConfigAnswer configFor(const ConfigRequest &r) override {
    asked.push_back(r.shapeClass.str() + " " + r.gpuName + " " + r.arch);
    EXPECT_FALSE(bool(r.check(r.defaultConfig)));
    return ConfigAnswer{keys::TileConfig{4, 32, 8, false}, "counting"};
  }
  bool bucketsRows() const override { return buckets; }
};

} // namespace

TEST_F(Launch, AConfigSourceIsAskedOncePerShapeClass) {
  for (bool buckets : {true, false}) {
    auto source = std::make_shared<CountingSource>();
    source->buckets = buckets;
    RuntimeOptions o;
    o.compiler = fake::fakeCompiler();
    o.cache.disk = false;
    o.configSource = source;
    Runtime r(std::move(o));
    auto k = r.findKernel("ln_modulate", "");
    ASSERT_TRUE(bool(k));
    for (int64_t rows : {8, 9, 8, 16}) {
      Tensor x({1, rows, 64}, 0x10000000), sc({1, 64}, 0x20000000),
          sh({1, 64}, 0x30000000), y({1, rows, 64}, 0x40000000);
      const DLTensor *ts[] = {&x.t, &sc.t, &sh.t, &y.t};
      float eps = 1e-6f;
      llvm::Error e = (*k)->launch(ts, 4, &eps, 1, nullptr);
      ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    }
    Kernel::LastLaunch l = (*k)->lastSpecialisation();
    EXPECT_EQ(l.config, "r4.t32.v8.p1");
    EXPECT_EQ(l.configFrom, "counting");
    // Rows 8 and 9 share bucket 8; 16 is a new one. Without buckets, one.
    std::vector<std::string> want =
        buckets ? std::vector<std::string>{"c64.a16-16-16-16.o32/r8 Fake H200 #0 sm_90",
                                           "c64.a16-16-16-16.o32/r16 Fake H200 #0 sm_90"}
                : std::vector<std::string>{"c64.a16-16-16-16.o32 Fake H200 #0 sm_90"};
    EXPECT_EQ(source->asked, want) << "buckets " << buckets;
  }
}

TEST_F(Launch, ByteOffsetsThatWrapTheAddressSpaceAreRejected) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  // data + byte_offset wraps to 0x1000: was accepted as that address.
  x.t.byte_offset = uint64_t(0) - 0x10000000 + 0x1000;
  llvm::Error e = launch(k, {&x, &sc, &sh, &y}, {1e-5f});
  std::string msg;
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("byte_offset"), std::string::npos) << msg;
  // The start fits but the last element does not.
  x.t.byte_offset = uint64_t(0) - 0x10000000 - 64;
  e = launch(k, {&x, &sc, &sh, &y}, {1e-5f});
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("past the end of the address space"), std::string::npos)
      << msg;
}

TEST_F(Launch, CompactStridesThatOverflowAreRejected) {
  // An empty tensor (a 0 dim) whose other dims multiply past int64: its
  // implied strides overflowed (UBSan, found by fuzz.capi).
  Kernel *k = kernel("ln_modulate");
  Tensor x({0, int64_t(1) << 62, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  llvm::Error e = launch(k, {&x, &sc, &sh, &y}, {1e-5f});
  std::string msg;
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_UNSUPPORTED);
  EXPECT_NE(msg.find("compact strides overflow int64"), std::string::npos)
      << msg;
}

TEST_F(Launch, DeviceTypesOutsideTheDLPackEnumAreRejected) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  // Written as raw bytes, as a C caller could: loading it as the enum would
  // be undefined behaviour (UBSan: "not a valid value for type").
  const int32_t bogus = 1000;
  std::memcpy(&sc.t.device.device_type, &bogus, sizeof bogus);
  llvm::Error e = launch(k, {&x, &sc, &sh, &y}, {1e-5f});
  std::string msg;
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_DEVICE);
  EXPECT_NE(msg.find("DLPack device type 1000"), std::string::npos) << msg;
}

TEST_F(Launch, AHugeNdimIsRejectedBeforeAnyShapeIsRead) {
  // rmsnorm_modulate builds its definition per column count, read from the
  // first tensor's shape: with ndim = 2^30 that read was far out of bounds.
  Kernel *k = kernel("rmsnorm_modulate");
  Tensor x({1, 8, 2048}, 0x10000000);
  x.t.ndim = 1 << 30;
  std::vector<Tensor *> ts(k->signature().operands.size(), &x);
  std::vector<float> scalars(k->signature().scalars.size(), 1e-6f);
  llvm::Error e = launch(k, ts, scalars);
  std::string msg;
  EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("1073741824 dimensions"), std::string::npos) << msg;
}

// ---- CUDA graph capture ----------------------------------------------------
//
// A capture in global mode (torch.cuda.graph's default) refuses module
// loads, allocations and the JIT linker on every thread that is not
// relaxed, and the refused call invalidates the capture; the fake driver
// does the same. What bitfold does on a cold launch is never part of a
// graph, so it runs relaxed: a first launch inside a caller's capture, or
// on another thread while one runs, leaves the capture valid.

namespace {

/// A global-mode capture on a thread of its own, from construction until
/// end() (which returns cuStreamEndCapture's result).
class CaptureOnAnotherThread {
public:
  CaptureOnAnotherThread() {
    thread = std::thread([this] {
      CUstream s = hooks().beginCapture(CU_STREAM_CAPTURE_MODE_GLOBAL);
      began.set_value(s != nullptr);
      stop.get_future().wait();
      ended.set_value(s ? hooks().endCapture(s) : CUDA_ERROR_ILLEGAL_STATE);
    });
    ok = began.get_future().get();
  }
  CaptureOnAnotherThread(const CaptureOnAnotherThread &) = delete;
  CaptureOnAnotherThread &operator=(const CaptureOnAnotherThread &) = delete;
  ~CaptureOnAnotherThread() {
    if (thread.joinable()) // a failed assertion left before end()
      end();
  }
  CUresult end() {
    stop.set_value();
    CUresult r = ended.get_future().get();
    thread.join();
    return r;
  }
  bool ok = false;

private:
  std::thread thread;
  std::promise<bool> began;
  std::promise<void> stop;
  std::promise<CUresult> ended;
};

/// Launch's fixture; the suite name puts the threaded cases under TSan
/// (scripts/sanitize.sh, TSAN_TESTS).
class LaunchCaptureConcurrency : public Launch {};

} // namespace

TEST(FakeDriverCaptureConcurrency, AGlobalCaptureRefusesUnsafeCallsOfOtherThreads) {
  // The premise of the tests below: without relaxing, a load fails and
  // breaks the other thread's capture.
  auto ctx = ScopedContext::forDevice(0);
  ASSERT_TRUE(bool(ctx)) << llvm::toString(ctx.takeError());
  int refused = hooks().count("refused in a capture");
  CaptureOnAnotherThread capture;
  ASSERT_TRUE(capture.ok);
  CUmodule m = nullptr;
  EXPECT_EQ(driver()->cuModuleLoadData(&m, "image"),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture.end(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(hooks().count("refused in a capture"), refused + 1);
}

TEST_F(LaunchCaptureConcurrency, AColdLaunchWhileAnotherThreadCapturesLeavesItValid) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  int refused = hooks().count("refused in a capture");
  int loads = hooks().count("cuModuleLoadData");
  CaptureOnAnotherThread capture;
  ASSERT_TRUE(capture.ok);
  llvm::Error e = launch(k, {&x, &sc, &sh, &y}, {1e-5f});
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  EXPECT_EQ(capture.end(), CUDA_SUCCESS);
  EXPECT_EQ(hooks().count("cuModuleLoadData"), loads + 1);
  EXPECT_EQ(hooks().count("refused in a capture"), refused);
  EXPECT_EQ(hooks().captureMode(), CU_STREAM_CAPTURE_MODE_GLOBAL); // restored
}

TEST_F(Launch, AColdLaunchInsideTheCallersCaptureIsCapturedAndTheCaptureValid) {
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  int captured = hooks().count("captured launch");
  int refused = hooks().count("refused in a capture");
  CUstream s = hooks().beginCapture(CU_STREAM_CAPTURE_MODE_GLOBAL);
  ASSERT_NE(s, nullptr);
  llvm::Error e = launch(k, {&x, &sc, &sh, &y}, {1e-5f}, s);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  EXPECT_EQ(hooks().endCapture(s), CUDA_SUCCESS);
  EXPECT_EQ(hooks().count("captured launch"), captured + 1);
  EXPECT_EQ(hooks().count("refused in a capture"), refused);
  EXPECT_EQ(hooks().captureMode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

TEST_F(Launch, WarmLaunchesLeaveTheCaptureModeAlone) {
  // Relaxing costs two driver calls: only cold launches pay them.
  Kernel *k = kernel("ln_modulate");
  Tensor x({1, 8, 64}, 0x10000000), sc({1, 64}, 0x20000000),
      sh({1, 64}, 0x30000000), y({1, 8, 64}, 0x40000000);
  const char *exchange = "cuThreadExchangeStreamCaptureMode";
  int before = hooks().count(exchange);
  ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f})));
  int cold = hooks().count(exchange);
  EXPECT_GT(cold, before);
  for (int i = 0; i < 5; ++i)
    ASSERT_FALSE(bool(launch(k, {&x, &sc, &sh, &y}, {1e-5f})));
  EXPECT_EQ(hooks().count(exchange), cold);
}

TEST(FakeDriverCaptureConcurrency, TheLinkerAndDeviceMemoryRunRelaxedDuringACapture) {
  auto ctx = ScopedContext::forDevice(0);
  ASSERT_TRUE(bool(ctx)) << llvm::toString(ctx.takeError());
  int refused = hooks().count("refused in a capture");
  CaptureOnAnotherThread capture;
  ASSERT_TRUE(capture.ok);
  auto cubin = linkPtxWithDriver(".version 8.0\n", "sm_90");
  EXPECT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
  {
    auto buf = DeviceBuffer::allocate(64);
    EXPECT_TRUE(bool(buf)) << llvm::toString(buf.takeError());
  } // freed here, still during the capture
  EXPECT_EQ(capture.end(), CUDA_SUCCESS);
  EXPECT_EQ(hooks().count("refused in a capture"), refused);
  EXPECT_EQ(hooks().captureMode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
}
