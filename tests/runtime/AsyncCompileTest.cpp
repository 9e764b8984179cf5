//===- tests/runtime/AsyncCompileTest.cpp - Launches that never wait ------===//
//
// On the fake libcuda with a fake compiler (runtime/AsyncCompile.cpp): a
// first launch returns BITFOLD_STATUS_NOT_READY at once and a later one
// runs; many threads meeting one new shape compile it once and are all
// answered while the compile is held; a failed background compile is
// recorded once and refuses the shape without compiling again; destroying
// the runtime joins the running compile and skips queued ones; turning the
// mode on starts the toolchain's set-up. Slow compiles block on a gate the
// test opens, so nothing depends on timing.
//
//===----------------------------------------------------------------------===//

#include "FakeCodegen.h"
#include "GatedCompiler.h"

#include "capi/CApiInternal.h"
#include "runtime/Runtime.h"
#include "runtime/Status.h"
#include "runtime/bitfold.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::runtime::fake;
using namespace bitfold::cuda;
using namespace bitfold::policy;

namespace {

class AsyncCompile : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_TRUE(fakeDriver); }
  /// Async runtime; compiles of `slowCols` wait at `gate`, compiles of
  /// `failCols` fail (each attempt counted in `failures`).
  std::unique_ptr<Runtime> makeRuntime(Gate *gate = nullptr,
                                       int64_t slowCols = 0,
                                       int64_t failCols = 0,
                                       unsigned threads = 4) {
    RuntimeOptions o;
    o.compiler = gatedCompiler(gate, slowCols, &probes);
    auto inner = o.compiler->compile;
    o.compiler->compile = [=, this](const dsl::KernelDef &def,
                                    const keys::ShapeSpec &shape,
                                    const keys::TileConfig &config,
                                    const keys::CompileOptions &options)
        -> llvm::Expected<codegen::CompiledKernel> {
      if (shape.cols == failCols) {
        ++failures;
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "fake codegen refuses this shape");
      }
      return inner(def, shape, config, options);
    };
    o.compiler->warmUp = [this] { ++warmUps; };
    o.cache.disk = false;
    o.cache.dir = dir.path;
    o.compileThreads = threads;
    o.asyncCompile = true;
    return std::make_unique<Runtime>(std::move(o));
  }
  TempDir dir;
  std::atomic<int> probes{0}, failures{0}, warmUps{0};
};

TEST_F(AsyncCompile, FirstLaunchIsNotReadyAndALaterOneRuns) {
  auto rt = makeRuntime();
  Kernel *k = lnModulate(*rt);
  int before = fake::fakeCompiles;
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_STATUS_NOT_READY);
  PrewarmStatus st = rt->waitPrewarm();
  EXPECT_EQ(st.failed, 0u) << st.firstError;
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(fake::fakeCompiles - before, 1);
  EXPECT_EQ(k->lastSpecialisation().config, "r2.t64.v4.p1");
}

TEST_F(AsyncCompile, ManyThreadsFirstCallingOneShapeCompileItOnce) {
  Gate gate;
  auto rt = makeRuntime(&gate, /*slowCols=*/512);
  Kernel *k = lnModulate(*rt);
  int before = fake::fakeCompiles;
  // 16 threads launch 1x8x512 at once and each expects `want`.
  auto fromSixteenThreads = [&](bitfold_status want) {
    std::vector<std::future<bitfold_status>> calls;
    for (int t = 0; t < 16; ++t)
      calls.push_back(std::async(std::launch::async, [&] {
        return statusOf(LnTensors(8, 512).launch(k));
      }));
    for (auto &f : calls)
      EXPECT_EQ(f.get(), want);
  };
  // The compile is held at the gate: every caller must be answered anyway.
  fromSixteenThreads(BITFOLD_STATUS_NOT_READY);
  gate.release();
  rt->waitPrewarm();
  fromSixteenThreads(BITFOLD_SUCCESS);
  EXPECT_EQ(fake::fakeCompiles - before, 1)
      << "32 launches of 1x8x512 from 16 threads compiled more than once";
}

TEST_F(AsyncCompile, AFailedCompileIsReportedOnceAndRefusesTheShape) {
  auto rt = makeRuntime(nullptr, 0, /*failCols=*/128);
  Kernel *k = lnModulate(*rt);
  EXPECT_EQ(statusOf(LnTensors(8, 128).launch(k)), BITFOLD_STATUS_NOT_READY);
  PrewarmStatus st = rt->waitPrewarm(); // returns: nothing hangs
  EXPECT_EQ(st.failed, 1u);
  EXPECT_NE(st.firstError.find("fake codegen refuses this shape"),
            std::string::npos)
      << st.firstError;
  for (int i = 0; i < 3; ++i) {
    llvm::Error e = LnTensors(8, 128).launch(k);
    std::string msg;
    EXPECT_EQ(takeStatus(std::move(e), msg), BITFOLD_ERROR_COMPILE);
    EXPECT_NE(msg.find("fake codegen refuses this shape"), std::string::npos);
  }
  EXPECT_EQ(failures.load(), 1) << "the refused shape was compiled again";
  EXPECT_EQ(rt->waitPrewarm().failed, 1u) << "the failure counted twice";
  // Other shapes still compile.
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_STATUS_NOT_READY);
  rt->waitPrewarm();
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
}

TEST_F(AsyncCompile, DestroyingTheRuntimeJoinsTheRunningCompileAndSkipsQueued) {
  Gate gate;
  // One compile thread: the held compile runs, the others queue behind it.
  auto rt = makeRuntime(&gate, /*slowCols=*/512, 0, /*threads=*/1);
  Kernel *k = lnModulate(*rt);
  int before = fake::fakeCompiles;
  EXPECT_EQ(statusOf(LnTensors(8, 512).launch(k)), BITFOLD_STATUS_NOT_READY);
  while (gate.waiting.load() == 0)
    std::this_thread::yield(); // the held compile has started
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_STATUS_NOT_READY);
  EXPECT_EQ(statusOf(LnTensors(8, 128).launch(k)), BITFOLD_STATUS_NOT_READY);
  auto destroyed = std::async(std::launch::async, [&] { rt.reset(); });
  EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(20)),
            std::future_status::timeout)
      << "the runtime was destroyed under a running compile";
  gate.release();
  destroyed.get();
  EXPECT_EQ(fake::fakeCompiles - before, 1)
      << "compiles queued before the runtime's destruction still ran";
}

TEST_F(AsyncCompile, TurningItOnStartsTheToolchainSetUp) {
  auto rt = makeRuntime();
  // The set-up runs on a compile thread; wait for it, bounded.
  for (int i = 0; i < 2000 && warmUps.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(warmUps.load(), 1);
  EXPECT_EQ(probes.load(), 1) << "the toolchain was not probed ahead";
  rt->setAsyncCompile(false);
  rt->setAsyncCompile(true);
  rt->waitPrewarm();
  EXPECT_EQ(warmUps.load(), 1) << "the set-up ran twice";
}

TEST_F(AsyncCompile, OffTheFirstLaunchWaitsForItsCompile) {
  auto rt = makeRuntime();
  rt->setAsyncCompile(false);
  Kernel *k = lnModulate(*rt);
  EXPECT_EQ(statusOf(LnTensors(8, 256).launch(k)), BITFOLD_SUCCESS);
}

TEST_F(AsyncCompile, CApiReturnsNotReadyByName) {
  RuntimeOptions o;
  o.compiler = fake::fakeCompiler();
  o.cache.disk = false;
  bitfold_runtime *rt = wrapRuntime(std::make_unique<Runtime>(std::move(o)));
  ASSERT_EQ(bitfold_runtime_set_async_compile(rt, 1), BITFOLD_SUCCESS);
  bitfold_kernel *k = nullptr;
  ASSERT_EQ(bitfold_template(rt, "ln_modulate", "", &k), BITFOLD_SUCCESS);
  LnTensors t(8, 192);
  const DLTensor *ts[] = {&t.t[0], &t.t[1], &t.t[2], &t.t[3]};
  float eps = 1e-6f;
  EXPECT_EQ(bitfold_launch(k, ts, 4, &eps, 1, nullptr),
            BITFOLD_STATUS_NOT_READY);
  EXPECT_NE(std::string(bitfold_last_error()).find("compiling in the background"),
            std::string::npos);
  EXPECT_STREQ(bitfold_status_name(BITFOLD_STATUS_NOT_READY),
               "BITFOLD_STATUS_NOT_READY");
  bitfold_prewarm_status st{};
  ASSERT_EQ(bitfold_runtime_prewarm_status(rt, 1, &st), BITFOLD_SUCCESS);
  EXPECT_EQ(bitfold_launch(k, ts, 4, &eps, 1, nullptr), BITFOLD_SUCCESS)
      << bitfold_last_error();
  EXPECT_EQ(bitfold_runtime_set_async_compile(nullptr, 1),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  bitfold_runtime_destroy(rt);
}

} // namespace
