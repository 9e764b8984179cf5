//===- tests/runtime/QuickFirstTest.cpp - The quick config serves first ---===//
//
// On the fake libcuda with a fake compiler whose quick config (r1.t32.v4.p1)
// differs from its default (r2.t64.v4.p1): in quick-first mode a new shape
// class launches the quick config, the default compiles in the background
// and then serves; a chosen config found in the disk cache, a pinned
// config and a prewarmed shape compile the chosen config only; an upgrade
// that fails leaves the quick kernel serving and is reported once; async
// mode serves the quick kernel first; a quick config equal to the chosen
// one compiles short then for speed in synchronous mode, once in async
// mode; destroying the runtime joins a running upgrade. Held compiles wait at a gate the test opens.
//
//===----------------------------------------------------------------------===//

#include "FakeCodegen.h"
#include "GatedCompiler.h"

#include "capi/CApiInternal.h"
#include "runtime/Runtime.h"
#include "runtime/Status.h"
#include "runtime/bitfold.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::runtime::fake;

namespace {

constexpr const char *kQuick = "r1.t32.v4.p1";
constexpr const char *kChosen = "r2.t64.v4.p1"; // the fake's default

class QuickFirst : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_TRUE(fakeDriver); }

  struct Setup {
    Gate *gate = nullptr; ///< holds compiles of the chosen config
    bool failChosen = false;
    bool disk = false;
    bool quickFirst = true;
    bool async = false;
    bool quickIsChosen = false; ///< the quick config is the default
    unsigned threads = 2;
  };

  std::unique_ptr<Runtime> makeRuntime(const Setup &s) {
    RuntimeOptions o;
    o.compiler = gatedCompiler(nullptr, 0, &probes);
    auto inner = o.compiler->compile;
    o.compiler->compile = [=, this](const dsl::KernelDef &def,
                                    const keys::ShapeSpec &shape,
                                    const keys::TileConfig &config,
                                    const keys::CompileOptions &options)
        -> llvm::Expected<codegen::CompiledKernel> {
      const bool chosen = config.str() == kChosen;
      {
        std::lock_guard<std::mutex> lock(mu);
        compiled.push_back(config.str());
        how.push_back(howOf(options));
      }
      if (chosen && s.gate)
        s.gate->pass();
      if (chosen && s.failChosen)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "fake codegen refuses the chosen config");
      return inner(def, shape, config, options);
    };
    o.compiler->quickConfig = [q = s.quickIsChosen ? kChosen : kQuick](
                                  const dsl::KernelDef &,
                                  const keys::ShapeSpec &) {
      return *keys::TileConfig::parse(q);
    };
    o.cache.disk = s.disk;
    o.cache.dir = dir.path;
    o.compileThreads = s.threads;
    o.asyncCompile = s.async;
    o.quickFirst = s.quickFirst;
    return std::make_unique<Runtime>(std::move(o));
  }

  std::vector<std::string> compiles() {
    std::lock_guard<std::mutex> lock(mu);
    return compiled;
  }

  TempDir dir;
  std::atomic<int> probes{0};
  std::mutex mu;
  std::vector<std::string> compiled;
  /// "O<ptxas level>" of each compile, in order, "+roll" where it rolls
  /// its rows (CompileOptions::rollRows).
  std::vector<std::string> how;

  static std::string howOf(const keys::CompileOptions &o) {
    return "O" + std::to_string(o.assemblerOptLevel) +
           (o.rollRows ? "+roll" : "");
  }
};

TEST_F(QuickFirst, TheFirstLaunchRunsTheQuickConfigThenTheChosenOneServes) {
  Gate gate;
  Setup s;
  s.gate = &gate;
  auto rt = makeRuntime(s);
  Kernel *k = lnModulate(*rt);
  // The chosen config's compile is held: the launch must not wait for it.
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  Kernel::LastLaunch first = k->lastSpecialisation();
  EXPECT_EQ(first.config, kQuick);
  EXPECT_NE(first.configFrom.find(std::string("quick config while ") + kChosen),
            std::string::npos)
      << first.configFrom;
  EXPECT_EQ(rt->prewarmStatus().pending, 1u);
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kQuick);

  gate.release();
  PrewarmStatus st = rt->waitPrewarm();
  EXPECT_EQ(st.failed, 0u) << st.firstError;
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);
  EXPECT_EQ(k->lastSpecialisation().configFrom, "default");
  EXPECT_EQ(compiles(), (std::vector<std::string>{kQuick, kChosen}));
  // The caller waited for the quick kernel: it is compiled for the
  // shortest compile, rows rolled and at ptxas -O0 (it serves only
  // meanwhile), the chosen one with the launch's options.
  EXPECT_EQ(how, (std::vector<std::string>{"O0+roll", "O3"}));
  // Warm from now on.
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(compiles().size(), 2u);
}

TEST_F(QuickFirst, AChosenConfigOnDiskIsLaunchedWithoutTheQuickOne) {
  {
    Setup off;
    off.disk = true;
    off.quickFirst = false;
    auto rt = makeRuntime(off);
    ASSERT_EQ(statusOf(LnTensors(8, 64).launch(lnModulate(*rt))),
              BITFOLD_SUCCESS);
  }
  ASSERT_EQ(compiles(), (std::vector<std::string>{kChosen}));
  Setup s;
  s.disk = true;
  auto rt = makeRuntime(s); // a later process, same cache directory
  Kernel *k = lnModulate(*rt);
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);
  EXPECT_EQ(rt->cache().stats().diskHits, 1u);
  EXPECT_EQ(compiles().size(), 1u) << "the quick config compiled anyway";
  EXPECT_EQ(rt->prewarmStatus().done, 0u);
}

TEST_F(QuickFirst, PinnedConfigsAndPrewarmedShapesCompileTheChosenOneOnly) {
  auto rt = makeRuntime(Setup{});
  Kernel *k = lnModulate(*rt);
  ASSERT_FALSE(bool(k->prewarm({{1, 8, 128}}, 0)));
  rt->waitPrewarm();
  EXPECT_EQ(compiles(), (std::vector<std::string>{kChosen}));
  ASSERT_EQ(statusOf(LnTensors(8, 128).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);

  ASSERT_FALSE(bool(k->setConfig(*keys::TileConfig::parse("r4.t64.v4.p1"))));
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, "r4.t64.v4.p1");
  rt->waitPrewarm();
  EXPECT_EQ(compiles(), (std::vector<std::string>{kChosen, "r4.t64.v4.p1"}));
}

TEST_F(QuickFirst, AFailedUpgradeLeavesTheQuickKernelServingAndIsReportedOnce) {
  Setup s;
  s.failChosen = true;
  auto rt = makeRuntime(s);
  Kernel *k = lnModulate(*rt);
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  PrewarmStatus st = rt->waitPrewarm(); // returns: nothing hangs
  EXPECT_EQ(st.failed, 1u);
  EXPECT_NE(st.firstError.find("fake codegen refuses the chosen config"),
            std::string::npos)
      << st.firstError;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
    EXPECT_EQ(k->lastSpecialisation().config, kQuick);
  }
  EXPECT_EQ(compiles(), (std::vector<std::string>{kQuick, kChosen}))
      << "the failed config was compiled again";
  EXPECT_EQ(rt->waitPrewarm().failed, 1u);
}

TEST_F(QuickFirst, AsyncModeServesTheQuickKernelBeforeTheChosenOne) {
  Gate gate;
  Setup s;
  s.gate = &gate;
  s.async = true;
  auto rt = makeRuntime(s);
  Kernel *k = lnModulate(*rt);
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_STATUS_NOT_READY);
  // The quick compile is not held: launches start once it is published,
  // while the chosen config's compile still waits at the gate.
  while (gate.waiting.load() == 0)
    std::this_thread::yield();
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kQuick);
  gate.release();
  rt->waitPrewarm();
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);
  EXPECT_EQ(compiles(), (std::vector<std::string>{kQuick, kChosen}));
  // Nobody waits for the quick compile here (eager serves meanwhile): it is
  // compiled for speed, like the chosen one.
  EXPECT_EQ(how, (std::vector<std::string>{"O3", "O3"}));
}

TEST_F(QuickFirst, DestroyingTheRuntimeJoinsARunningUpgrade) {
  Gate gate;
  Setup s;
  s.gate = &gate;
  s.threads = 1;
  auto rt = makeRuntime(s);
  Kernel *k = lnModulate(*rt);
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  ASSERT_EQ(statusOf(LnTensors(8, 128).launch(k)), BITFOLD_SUCCESS);
  while (gate.waiting.load() == 0)
    std::this_thread::yield(); // the first upgrade holds the only thread
  auto destroyed = std::async(std::launch::async, [&] { rt.reset(); });
  EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(20)),
            std::future_status::timeout)
      << "the runtime was destroyed under a running compile";
  gate.release();
  destroyed.get();
  // Two quick compiles and the running upgrade (in either order: the
  // second launch's quick compile races the pool thread's); the queued
  // upgrade was skipped.
  std::vector<std::string> ran = compiles();
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, (std::vector<std::string>{kQuick, kQuick, kChosen}));
}

// Where the quick config is the chosen one, a synchronous first launch
// still waits only for the short compile (rows rolled, ptxas -O0); the
// same config then compiles for speed and replaces it.
TEST_F(QuickFirst, AQuickConfigEqualToTheChosenOneCompilesShortThenForSpeed) {
  Setup s;
  s.quickIsChosen = true;
  auto rt = makeRuntime(s);
  Kernel *k = lnModulate(*rt);
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);
  EXPECT_NE(k->lastSpecialisation().configFrom.find("quick config while"),
            std::string::npos)
      << k->lastSpecialisation().configFrom;
  PrewarmStatus st = rt->waitPrewarm();
  EXPECT_EQ(st.done, 1u);
  EXPECT_EQ(st.failed, 0u) << st.firstError;
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);
  EXPECT_EQ(k->lastSpecialisation().configFrom, "default");
  EXPECT_EQ(compiles(), (std::vector<std::string>{kChosen, kChosen}));
  EXPECT_EQ(how, (std::vector<std::string>{"O0+roll", "O3"}));
}

// In async mode the quick build of the chosen config would be the same
// kernel (eager serves meanwhile either way): it compiles once.
TEST_F(QuickFirst, InAsyncModeAQuickConfigEqualToTheChosenOneCompilesOnce) {
  Setup s;
  s.quickIsChosen = true;
  s.async = true;
  auto rt = makeRuntime(s);
  Kernel *k = lnModulate(*rt);
  EXPECT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_STATUS_NOT_READY);
  EXPECT_EQ(rt->waitPrewarm().failed, 0u);
  ASSERT_EQ(statusOf(LnTensors(8, 64).launch(k)), BITFOLD_SUCCESS);
  EXPECT_EQ(k->lastSpecialisation().config, kChosen);
  EXPECT_EQ(k->lastSpecialisation().configFrom, "default");
  EXPECT_EQ(compiles(), (std::vector<std::string>{kChosen}));
  EXPECT_EQ(how, (std::vector<std::string>{"O3"}));
}

TEST_F(QuickFirst, TurningItOnStartsTheToolchainSetUp) {
  std::atomic<int> warmUps{0};
  RuntimeOptions o;
  o.compiler = fake::fakeCompiler();
  o.compiler->warmUp = [&] { ++warmUps; };
  o.cache.disk = false;
  Runtime rt(std::move(o));
  EXPECT_EQ(warmUps.load(), 0) << "set up before the mode was asked for";
  rt.setQuickFirst(true);
  for (int i = 0; i < 2000 && warmUps.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(warmUps.load(), 1);
  rt.setQuickFirst(false);
  rt.setQuickFirst(true);
  rt.setAsyncCompile(true);
  rt.waitPrewarm();
  EXPECT_EQ(warmUps.load(), 1) << "the set-up ran twice";
}

TEST_F(QuickFirst, CApiTurnsItOnAndRejectsNull) {
  RuntimeOptions o;
  o.compiler = fake::fakeCompiler();
  o.cache.disk = false;
  bitfold_runtime *rt = wrapRuntime(std::make_unique<Runtime>(std::move(o)));
  EXPECT_EQ(bitfold_runtime_set_quick_first(rt, 1), BITFOLD_SUCCESS);
  EXPECT_TRUE(unwrapRuntime(rt)->quickFirst());
  EXPECT_EQ(bitfold_runtime_set_quick_first(rt, 0), BITFOLD_SUCCESS);
  EXPECT_FALSE(unwrapRuntime(rt)->quickFirst());
  EXPECT_EQ(bitfold_runtime_set_quick_first(nullptr, 1),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  bitfold_runtime_destroy(rt);
}

} // namespace
