//===- tests/runtime/PrewarmTest.cpp - Background compiles, lazy toolchain ===//
//
// On the fake libcuda with a fake compiler: prewarm compiles each key once
// however many threads ask; a launch of a compiled shape never waits
// behind a compile; a launch of a shape still compiling waits for it and
// compiles nothing more; creating a runtime probes no toolchain and a
// second process-like runtime reads the remembered toolchain text; a
// provisional config answer is replaced once the source's generation
// moves. Deterministic: slow compiles block on a gate the test opens.
//
//===----------------------------------------------------------------------===//

#include "FakeCodegen.h"
#include "FakeCuda.h"
#include "GatedCompiler.h"

#include "autotune/Policy.h"
#include "autotune/TuneDB.h"
#include "capi/CApiInternal.h"
#include "capi/Compose.h"
#include "runtime/Runtime.h"
#include "runtime/bitfold.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <dlfcn.h>
#include <future>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;
using namespace bitfold::policy;
using namespace bitfold::runtime::fake;

namespace {

class Prewarm : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_TRUE(fakeDriver); }
  std::unique_ptr<Runtime> makeRuntime(Gate *gate = nullptr,
                                       int64_t slowCols = 0,
                                       bool disk = false) {
    RuntimeOptions o;
    o.compiler = gatedCompiler(gate, slowCols, &probes);
    o.cache.disk = disk;
    o.cache.dir = dir.path;
    o.compileThreads = 4;
    return std::make_unique<Runtime>(std::move(o));
  }
  TempDir dir;
  std::atomic<int> probes{0};
};

TEST_F(Prewarm, SixteenThreadsPrewarmingFourKeysCompileFourTimes) {
  auto rt = makeRuntime();
  Kernel *k = lnModulate(*rt);
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 8, 64}, {1, 8, 128}, {1, 8, 192}, {1, 8, 256}};
  int before = fake::fakeCompiles;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      if (llvm::Error e = k->prewarm(shapes, 0))
        ADD_FAILURE() << llvm::toString(std::move(e));
    });
  for (std::thread &t : threads)
    t.join();
  PrewarmStatus st = rt->waitPrewarm();
  EXPECT_EQ(st.pending, 0u);
  EXPECT_EQ(st.failed, 0u) << st.firstError;
  EXPECT_EQ(fake::fakeCompiles - before, 4)
      << "16 threads x 4 shapes (cols 64..256, rows 8) must compile 4 keys "
         "once each";
  EXPECT_EQ(rt->cache().stats().compiles, 4u);
}

TEST_F(Prewarm, LaunchAfterPrewarmCompilesNothingMore) {
  auto rt = makeRuntime();
  Kernel *k = lnModulate(*rt);
  ASSERT_FALSE(bool(k->prewarm({{1, 8, 64}, {2, 100, 512}}, 0)));
  rt->waitPrewarm();
  int compiled = fake::fakeCompiles;
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  ASSERT_FALSE(bool(LnTensors(100, 512).launch(k)));
  EXPECT_EQ(fake::fakeCompiles, compiled)
      << "launches of prewarmed shapes (1x8x64, 1x100x512) compiled again";
  EXPECT_EQ(k->lastSpecialisation().config, "r2.t64.v4.p1");
}

TEST_F(Prewarm, LaunchOfACompiledShapeDoesNotWaitBehindASlowCompile) {
  Gate gate;
  auto rt = makeRuntime(&gate, /*slowCols=*/512);
  Kernel *k = lnModulate(*rt);
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k))); // compiled, not gated
  ASSERT_FALSE(bool(k->prewarm({{1, 8, 512}}, 0)));
  while (gate.waiting.load() == 0)
    std::this_thread::yield(); // the slow compile has started and holds
  // A launch of the slow shape waits for that compile (in its own thread).
  auto slowLaunch = std::async(std::launch::async, [&] {
    return llvm::toString(LnTensors(8, 512).launch(k));
  });
  // The compiled shape launches while the compile is held.
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(slowLaunch.wait_for(std::chrono::milliseconds(20)),
            std::future_status::timeout)
      << "the launch of 1x8x512 did not wait for its compile in flight";
  int compiled = fake::fakeCompiles;
  gate.release();
  EXPECT_EQ(slowLaunch.get(), "");
  EXPECT_EQ(rt->waitPrewarm().failed, 0u);
  EXPECT_EQ(fake::fakeCompiles, compiled + 1)
      << "the launch waiting for the prewarm compiled 1x8x512 a second time";
}

TEST_F(Prewarm, PrewarmOfABadShapeQueuesNothing) {
  auto rt = makeRuntime();
  Kernel *k = lnModulate(*rt);
  llvm::Error e = k->prewarm({{1, 8, 64}, {}}, 0);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("cannot prewarm ln_modulate"),
            std::string::npos);
  EXPECT_EQ(rt->prewarmStatus().pending + rt->prewarmStatus().done, 0u);
}

TEST_F(Prewarm, CreatingARuntimeProbesNoToolchain) {
  {
    auto rt = makeRuntime(nullptr, 0, /*disk=*/true);
    EXPECT_EQ(probes.load(), 0) << "Runtime() probed the toolchain";
    Kernel *k = lnModulate(*rt);
    ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
    EXPECT_EQ(probes.load(), 1) << "the first compile needs the toolchain";
  }
  // A later process with the same tools: the disk hit needs the key, whose
  // toolchain text is remembered in the cache directory.
  auto rt = makeRuntime(nullptr, 0, /*disk=*/true);
  Kernel *k = lnModulate(*rt);
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(probes.load(), 1) << "a warm-cache launch probed the toolchain";
  EXPECT_EQ(rt->cache().stats().diskHits, 1u);
  EXPECT_EQ(rt->toolchain(), "fake-toolchain 1.0");
}

TEST_F(Prewarm, AChangedToolchainFingerprintProbesAgain) {
  Compiler c = gatedCompiler(nullptr, 0, &probes);
  EXPECT_EQ(resolveToolchain(c, dir.path), "fake-toolchain 1.0");
  EXPECT_EQ(resolveToolchain(c, dir.path), "fake-toolchain 1.0");
  EXPECT_EQ(probes.load(), 1);
  c.toolchainFingerprint = [] { return std::string("ptxas replaced"); };
  c.toolchainVersion = [this] {
    ++probes;
    return std::string("fake-toolchain 2.0");
  };
  EXPECT_EQ(resolveToolchain(c, dir.path), "fake-toolchain 2.0");
  EXPECT_EQ(probes.load(), 2);
}

TEST_F(Prewarm, CApiPrewarmAndStatus) {
  bitfold_runtime *rt = wrapRuntime(makeRuntime());
  bitfold_kernel *k = nullptr;
  ASSERT_EQ(bitfold_template(rt, "ln_modulate", "", &k), BITFOLD_SUCCESS);
  const int64_t dims[] = {1, 8, 64, 1, 8, 128};
  const int ndims[] = {3, 3};
  int before = fake::fakeCompiles;
  ASSERT_EQ(bitfold_prewarm(k, 2, dims, ndims, 0), BITFOLD_SUCCESS)
      << bitfold_last_error();
  bitfold_prewarm_status st{};
  ASSERT_EQ(bitfold_runtime_prewarm_status(rt, 1, &st), BITFOLD_SUCCESS)
      << bitfold_last_error();
  EXPECT_EQ(st.pending, 0u);
  EXPECT_EQ(st.done, 2u);
  EXPECT_EQ(fake::fakeCompiles - before, 2);
  const int bad[] = {0};
  EXPECT_EQ(bitfold_prewarm(k, 1, dims, bad, 0),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitfold_last_error()).find("ndims[0] is 0"),
            std::string::npos);
  EXPECT_EQ(bitfold_prewarm(k, 1, nullptr, ndims, 0),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  bitfold_runtime_destroy(rt);
}

/// A source that answers `first` provisionally until told the tune is
/// done, then `winner`.
class TuningSource : public ConfigSource {
public:
  ConfigAnswer configFor(const ConfigRequest &r) override {
    ++asked;
    if (gen.load() == 0)
      return {r.defaultConfig, "default (tuning in background)", true};
    keys::TileConfig w = r.defaultConfig;
    w.threadsPerRow = 128;
    return {w, "tune DB", false};
  }
  uint64_t generation() const override { return gen.load(); }
  std::atomic<uint64_t> gen{0};
  std::atomic<int> asked{0};
};

TEST_F(Prewarm, AProvisionalConfigIsReplacedOnceTheTuneRecords) {
  auto source = std::make_shared<TuningSource>();
  RuntimeOptions o;
  o.compiler = gatedCompiler(nullptr, 0, &probes);
  o.cache.disk = false;
  o.configSource = source;
  Runtime rt(std::move(o));
  Kernel *k = lnModulate(rt);
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(k->lastSpecialisation().config, "r2.t64.v4.p1");
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(source->asked.load(), 1) << "asked again before the tune ended";
  source->gen = 1;
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(k->lastSpecialisation().config, "r2.t128.v4.p1");
  EXPECT_EQ(k->lastSpecialisation().configFrom, "tune DB");
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(source->asked.load(), 2) << "a final answer was asked for again";
}

} // namespace

namespace {

TEST(RuntimeOptionsCApi, OutOfRangeOptionsAreRefused) {
  bitfold_runtime_options o;
  bitfold_runtime_options_init(&o);
  EXPECT_EQ(o.tune_on_miss, BITFOLD_TUNE_OFF);
  EXPECT_EQ(o.cache_max_bytes, -1);
  EXPECT_EQ(o.compile_threads, 0);
  o.disk_cache = 0;
  o.tune_on_miss = 7;
  bitfold_runtime *rt = nullptr;
  EXPECT_EQ(bitfold_runtime_create(&o, &rt), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
  EXPECT_NE(std::string(bitfold_last_error()).find("tune_on_miss"),
            std::string::npos);
  o.tune_on_miss = BITFOLD_TUNE_OFF;
  o.cache_max_bytes = -2;
  EXPECT_EQ(bitfold_runtime_create(&o, &rt), BITFOLD_ERROR_INVALID_ARGUMENT);
}

TEST(RuntimeOptionsCApi, TuneOnMissWithoutATuneDbSaysItIsOff) {
  ::unsetenv("BITFOLD_TUNE_DB");
  std::vector<std::string> warnings;
  bitfold_runtime_options o;
  bitfold_runtime_options_init(&o);
  o.disk_cache = 0;
  o.tune_on_miss = BITFOLD_TUNE_BACKGROUND;
  o.warning = [](const char *m, void *user) {
    static_cast<std::vector<std::string> *>(user)->push_back(m);
  };
  o.warning_user = &warnings;
  bitfold_runtime *rt = nullptr;
  ASSERT_EQ(bitfold_runtime_create(&o, &rt), BITFOLD_SUCCESS);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("tune-on-miss is off: it needs a tune DB file"),
            std::string::npos);
  bitfold_runtime_destroy(rt);
}

} // namespace

namespace {

TEST_F(Prewarm, TuneOnMissInBackgroundSwitchesToTheRecordedWinner) {
  const std::string db = dir.path + "/tune-db.json";
  RuntimeOptions o;
  o.compiler = gatedCompiler(nullptr, 0, &probes);
  o.cache.disk = false;
  capi::TuneDbOptions tdb;
  tdb.path = db;
  tdb.tuneOnMiss.mode = autotune::TuneOnMissOptions::Background;
  tdb.tuneOnMiss.perTuneSeconds = 0; // every config (the fake times them fast)
  std::unique_ptr<Runtime> owned = capi::makeRuntime(std::move(o), tdb);
  Runtime &rt = *owned;
  Kernel *k = lnModulate(rt);
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  EXPECT_EQ(k->lastSpecialisation().configFrom,
            "default (tuning in background)");
  auto *policy = dynamic_cast<autotune::TunePolicy *>(rt.configSource());
  ASSERT_NE(policy, nullptr);
  policy->waitIdle(); // the fake GPU times every legal config
  int compiled = fake::fakeCompiles;
  ASSERT_FALSE(bool(LnTensors(8, 64).launch(k)));
  Kernel::LastLaunch l = k->lastSpecialisation();
  EXPECT_EQ(l.configFrom, "tune DB") << "config " << l.config;
  // The fake times every config alike; ties go by config text, so the
  // winner is not the default r2.t64.v4.p1: the class really switched.
  EXPECT_NE(l.config, "r2.t64.v4.p1");
  EXPECT_EQ(fake::fakeCompiles, compiled)
      << "the winner " << l.config << " was compiled again after the tune";
  auto onDisk = autotune::TuneDB::load(db);
  ASSERT_TRUE(bool(onDisk)) << llvm::toString(onDisk.takeError());
  EXPECT_EQ(onDisk->size(), 1u) << "the winner is not in " << db;
}

} // namespace

// ---- Tunes during a caller's CUDA graph capture ----------------------------
//
// With tune-on-miss, a first launch of a class may be timed while the
// caller captures a graph: on the tuner's thread while the caller's thread
// captures (background), or on the capturing thread itself (now). The fake
// driver refuses synchronisation, synchronous copies and other unsafe calls
// of a thread that is not relaxed during a global capture (and the refusal
// invalidates the capture), and counts work on the legacy stream during any
// capture. The suite name puts these cases under TSan (scripts/sanitize.sh).

namespace {

struct FakeHooks {
  FakeCountFn count = nullptr;
  FakeBeginCaptureFn beginCapture = nullptr;
  FakeEndCaptureFn endCapture = nullptr;
  FakeCapturedOnFn capturedOn = nullptr;
};

const FakeHooks &fakeHooks() {
  static FakeHooks h = [] {
    FakeHooks f;
    auto api = driver(); // loads the fake first
    EXPECT_TRUE(bool(api)) << llvm::toString(api.takeError());
    void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(lib, nullptr);
    if (!lib)
      return f;
    f.count = (FakeCountFn)dlsym(lib, "fake_cuda_count");
    f.beginCapture = (FakeBeginCaptureFn)dlsym(lib, "fake_cuda_begin_capture");
    f.endCapture = (FakeEndCaptureFn)dlsym(lib, "fake_cuda_end_capture");
    f.capturedOn = (FakeCapturedOnFn)dlsym(lib, "fake_cuda_captured_on");
    return f;
  }();
  return h;
}

class TuneCaptureConcurrency : public Prewarm {
protected:
  std::unique_ptr<Runtime> tuningRuntime(autotune::TuneOnMissOptions::Mode mode) {
    RuntimeOptions o;
    o.compiler = gatedCompiler(nullptr, 0, &probes);
    o.cache.disk = false;
    capi::TuneDbOptions tdb;
    tdb.path = dir.path + "/tune-db.json";
    tdb.tuneOnMiss.mode = mode;
    tdb.tuneOnMiss.perTuneSeconds = 0; // every config (the fake times them fast)
    return capi::makeRuntime(std::move(o), tdb);
  }
  /// A first launch of ln_modulate inside a global-mode capture on this
  /// thread, `during` still inside it; the capture must stay valid, hold the
  /// launch alone, and the tune must record its winner.
  void captureAFirstLaunch(Runtime &rt, llvm::function_ref<void()> during) {
    const FakeHooks &h = fakeHooks();
    ASSERT_TRUE(h.count && h.beginCapture && h.endCapture && h.capturedOn);
    int refused = h.count("refused in a capture");
    int legacy = h.count("legacy stream in a capture");
    CUstream s = h.beginCapture(CU_STREAM_CAPTURE_MODE_GLOBAL);
    ASSERT_NE(s, nullptr);
    llvm::Error e = LnTensors(8, 64).launch(lnModulate(rt), s);
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    during();
    EXPECT_EQ(h.capturedOn(s), 1); // the caller's launch, none of the tune's
    EXPECT_EQ(h.endCapture(s), CUDA_SUCCESS);
    EXPECT_EQ(h.count("refused in a capture"), refused);
    EXPECT_EQ(h.count("legacy stream in a capture"), legacy);
    EXPECT_EQ(tunedClasses(), 1u) << "the tune did not record a winner";
  }
  size_t tunedClasses() {
    auto db = autotune::TuneDB::load(dir.path + "/tune-db.json");
    EXPECT_TRUE(bool(db)) << llvm::toString(db.takeError());
    return db ? db->size() : 0;
  }
};

TEST_F(TuneCaptureConcurrency, ABackgroundTuneKeepsTheCallersCaptureValid) {
  auto rt = tuningRuntime(autotune::TuneOnMissOptions::Background);
  captureAFirstLaunch(*rt, [&] {
    auto *policy = dynamic_cast<autotune::TunePolicy *>(rt->configSource());
    ASSERT_NE(policy, nullptr);
    policy->waitIdle(); // the whole tune ran during the capture
  });
}

TEST_F(TuneCaptureConcurrency, ATuneOnTheCapturingThreadKeepsTheCaptureValid) {
  auto rt = tuningRuntime(autotune::TuneOnMissOptions::Now);
  captureAFirstLaunch(*rt, [&] {
    EXPECT_EQ(lnModulate(*rt)->lastSpecialisation().configFrom, "tuned now");
  });
}

} // namespace
