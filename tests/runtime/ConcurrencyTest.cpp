//===- tests/runtime/ConcurrencyTest.cpp - Many threads, one runtime ------===//
//
// The runtime's threading guarantees on the fake libcuda (FakeCuda.cpp) and
// the fake compiler (FakeCodegen.cpp): threads racing on the first launch of
// a shape class compile and load it once; threads launching different
// kernels, shapes and devices each get their specialisation; pinning a
// config while others launch; runtimes created and destroyed on many
// threads over one disk cache (C++ and C API); the tune DB policy's
// background worker tuning while launches go on; two policies of one
// process persisting to one tune DB file.
//
// They pass in the plain build; scripts/sanitize.sh tsan runs them (and
// every other test whose name matches its threading pattern) under
// ThreadSanitizer, which is where a data race shows.
//
//===----------------------------------------------------------------------===//

#include "FakeCodegen.h"
#include "FakeCuda.h"

#include "autotune/Policy.h"
#include "capi/Compose.h"
#include "runtime/Runtime.h"
#include "runtime/bitfold.h"
#include "tests/autotune/TestEnv.h" // TempDir

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;
using namespace bitfold::policy;
using bitfold::autotune::test::TempDir;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  return true;
}();

constexpr DLDataType kBF16{kDLBfloat, 16, 1};
constexpr int kThreads = 8;

/// How often the fake driver saw `what` (loading the driver first).
int driverCount(const char *what) {
  static FakeCountFn count = [] {
    auto api = driver();
    EXPECT_TRUE(bool(api)) << llvm::toString(api.takeError());
    void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(lib, nullptr);
    return reinterpret_cast<FakeCountFn>(dlsym(lib, "fake_cuda_count"));
  }();
  return count(what);
}

/// A (rows, cols) bf16 tensor on `device` at a fake, 16-byte aligned
/// address.
struct Tensor2D {
  int64_t shape[2];
  DLTensor t{};
  Tensor2D(int64_t rows, int64_t cols, uintptr_t addr, int device = 0)
      : shape{rows, cols} {
    t.data = reinterpret_cast<void *>(addr);
    t.device = {kDLCUDA, device};
    t.ndim = 2;
    t.dtype = kBF16;
    t.shape = shape;
  }
};

/// residual_gate's four (rows, cols) operands (no scalars).
struct GateArgs {
  Tensor2D r, u, g, y;
  GateArgs(int64_t rows, int64_t cols, int device = 0)
      : r(rows, cols, 0x10000000, device), u(rows, cols, 0x20000000, device),
        g(rows, cols, 0x30000000, device), y(rows, cols, 0x40000000, device) {}
  llvm::Error launch(Kernel &k) const {
    const DLTensor *ts[] = {&r.t, &u.t, &g.t, &y.t};
    return k.launch(ts, 4, nullptr, 0, nullptr);
  }
};

/// ln_modulate's operands: (B, S, D) activations, (B, D) scale and
/// shift; one scalar (eps).
struct ModulateArgs {
  int64_t xShape[3], bShape[2];
  DLTensor x{}, scale{}, shift{}, y{};
  ModulateArgs(int64_t s, int64_t cols, int device = 0)
      : xShape{2, s, cols}, bShape{2, cols} {
    const uintptr_t addr[] = {0x50000000, 0x60000000, 0x70000000, 0x80000000};
    DLTensor *all[] = {&x, &scale, &shift, &y};
    for (int i = 0; i < 4; ++i) {
      all[i]->data = reinterpret_cast<void *>(addr[i]);
      all[i]->device = {kDLCUDA, device};
      all[i]->dtype = kBF16;
      bool perBatch = i == 1 || i == 2;
      all[i]->ndim = perBatch ? 2 : 3;
      all[i]->shape = perBatch ? bShape : xShape;
    }
  }
  llvm::Error launch(Kernel &k) const {
    const DLTensor *ts[] = {&x, &scale, &shift, &y};
    const float eps = 1e-6f;
    return k.launch(ts, 4, &eps, 1, nullptr);
  }
};

RuntimeOptions memoryOnly() {
  RuntimeOptions o;
  o.compiler = fake::fakeCompiler();
  o.cache.disk = false;
  return o;
}

/// Runs body(t) on kThreads threads started together.
template <typename Body> void onThreads(Body body, int n = kThreads) {
  std::barrier start(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  for (std::thread &th : threads)
    th.join();
}

/// Collects failures from worker threads (gtest's EXPECT is thread safe,
/// but a message per thread and launch would flood the log).
struct Failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string &what) {
    std::lock_guard<std::mutex> lock(mu);
    list.push_back(what);
  }
  void check(llvm::Error e, const std::string &what) {
    if (e)
      add(what + ": " + llvm::toString(std::move(e)));
  }
  std::string text() const {
    std::string all;
    for (const std::string &s : list)
      all += s + "\n";
    return all;
  }
};

} // namespace

// ---- One runtime, many launching threads ------------------------------------

TEST(LaunchConcurrency, ThreadsRacingOnTheFirstLaunchOfAShapeCompileAndLoadOnce) {
  ASSERT_TRUE(fakeDriver);
  Runtime rt(memoryOnly());
  auto k = rt.findKernel("residual_gate", "");
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  const int compiles = fake::fakeCompiles;
  const int loads = driverCount("cuModuleLoadData");
  const int launches = driverCount("cuLaunchKernel");
  Failures failures;
  onThreads([&](int t) {
    GateArgs args(4 + t, 320); // one shape class: rows are not keyed
    for (int i = 0; i < 20; ++i)
      failures.check(args.launch(**k), "thread " + std::to_string(t));
  });
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  EXPECT_EQ(fake::fakeCompiles - compiles, 1)
      << "residual_gate (rows, 320) on " << kThreads << " threads";
  // Every thread finds no current context and uses cuda:0's primary one.
  EXPECT_EQ(driverCount("cuModuleLoadData") - loads, 1);
  EXPECT_EQ(driverCount("cuLaunchKernel") - launches, kThreads * 20);
  EXPECT_EQ((*k)->lastSpecialisation().config, "r2.t64.v4.p1");
}

TEST(LaunchConcurrency, ThreadsLaunchingDifferentKernelsShapesAndDevicesEachGetTheirOwn) {
  ASSERT_TRUE(fakeDriver);
  Runtime rt(memoryOnly());
  const int compiles = fake::fakeCompiles;
  const int loads = driverCount("cuModuleLoadData");
  constexpr int kCols = 6;
  Failures failures;
  onThreads([&](int t) {
    // Each thread finds the kernels itself and walks the classes in its
    // own order, on both devices.
    auto gate = rt.findKernel("residual_gate", "");
    auto mod = rt.findKernel("ln_modulate", "");
    if (!gate || !mod) {
      failures.check(gate ? mod.takeError() : gate.takeError(), "findKernel");
      return;
    }
    for (int i = 0; i < 3 * kCols; ++i) {
      int64_t cols = 64 * (1 + (i + t) % kCols);
      int device = (i + t) / kCols % 2; // both devices for every cols
      std::string what = "thread " + std::to_string(t) + " cols " +
                         std::to_string(cols) + " device " +
                         std::to_string(device);
      failures.check(GateArgs(8, cols, device).launch(**gate), what);
      failures.check(ModulateArgs(3, cols, device).launch(**mod), what);
      (void)(*mod)->lastSpecialisation(); // read while others publish
    }
  });
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  // Both devices are sm_90: one compile per (kernel, column count), one
  // module per compile and primary context.
  EXPECT_EQ(fake::fakeCompiles - compiles, 2 * kCols);
  EXPECT_EQ(driverCount("cuModuleLoadData") - loads, 2 * kCols * 2);
}

TEST(LaunchConcurrency, PinningAConfigWhileOtherThreadsLaunch) {
  ASSERT_TRUE(fakeDriver);
  Runtime rt(memoryOnly());
  auto k = rt.findKernel("residual_gate", "");
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  const char *configs[] = {"r1.t128.v4.p1", "r4.t32.v4.p1"};
  std::atomic<bool> pinning{true};
  Failures failures;
  onThreads([&](int t) {
    if (t == 0) {
      for (int i = 0; i < 50; ++i) {
        auto c = (*k)->parseConfig(configs[i % 2]);
        if (!c)
          return failures.check(c.takeError(), "parseConfig");
        failures.check((*k)->setConfig(*c), "setConfig");
      }
      pinning = false;
      return;
    }
    GateArgs args(16, 64 * t);
    do
      failures.check(args.launch(**k), "thread " + std::to_string(t));
    while (pinning);
  });
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  // The last pin holds for the next first launch.
  ASSERT_FALSE(bool(GateArgs(16, 64 * kThreads).launch(**k)));
  EXPECT_EQ((*k)->lastSpecialisation().config, configs[1]);
  EXPECT_EQ((*k)->lastSpecialisation().configFrom, "pinned");
}

// ---- Runtimes created and destroyed concurrently ----------------------------

TEST(RuntimeConcurrency, RuntimesCreatedAndDestroyedOnManyThreadsCompileOnceThroughTheDiskCache) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  const int compiles = fake::fakeCompiles;
  Failures failures;
  std::atomic<int> diskHits{0};
  onThreads([&](int t) {
    for (int round = 0; round < 4; ++round) {
      RuntimeOptions o;
      o.compiler = fake::fakeCompiler();
      o.cache.dir = dir.path.str().str();
      o.cache.warn = [&](llvm::StringRef m) { failures.add("warning: " + m.str()); };
      Runtime rt(std::move(o));
      auto k = rt.findKernel("residual_gate", "");
      if (!k)
        return failures.check(k.takeError(), "findKernel");
      failures.check(GateArgs(8, 448).launch(**k),
                     "thread " + std::to_string(t) + " round " +
                         std::to_string(round));
      diskHits += int(rt.cache().stats().diskHits);
    }
  });
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  // One runtime compiles; every other one waits for its lock and reads
  // the entry it published.
  EXPECT_EQ(fake::fakeCompiles - compiles, 1) << "cache dir " << dir.path.str().str();
  EXPECT_EQ(diskHits.load(), kThreads * 4 - 1);
}

TEST(RuntimeConcurrency, CApiRuntimesCreatedAndDestroyedOnManyThreads) {
  ASSERT_TRUE(fakeDriver);
  Failures failures;
  onThreads([&](int t) {
    for (int round = 0; round < 4; ++round) {
      bitfold_runtime_options o;
      bitfold_runtime_options_init(&o);
      o.disk_cache = 0;
      o.tune_db = "";
      bitfold_runtime *rt = nullptr;
      bitfold_kernel *k = nullptr;
      if (bitfold_runtime_create(&o, &rt) != BITFOLD_SUCCESS ||
          bitfold_template(rt, "residual_gate", "", &k) != BITFOLD_SUCCESS) {
        failures.add(bitfold_last_error());
        bitfold_runtime_destroy(rt);
        return;
      }
      GateArgs args(4, 64 * (1 + t % 4));
      const DLTensor *ts[] = {&args.r.t, &args.u.t, &args.g.t, &args.y.t};
      if (bitfold_launch(k, ts, 4, nullptr, 0, nullptr) != BITFOLD_SUCCESS)
        failures.add(bitfold_last_error());
      // A bad call's message stays on this thread.
      if (bitfold_launch(k, ts, 3, nullptr, 0, nullptr) == BITFOLD_SUCCESS ||
          !std::strstr(bitfold_last_error(), "residual_gate"))
        failures.add("thread " + std::to_string(t) + ": last error '" +
                     bitfold_last_error() + "'");
      bitfold_runtime_destroy(rt);
    }
  });
  EXPECT_TRUE(failures.list.empty()) << failures.text();
}

// ---- The tune DB policy's background worker ---------------------------------

namespace {

constexpr const char *kTunedWinner = "r4.t32.v4.p1";

autotune::TuneOutcome tunedOutcome(const ConfigRequest &r) {
  autotune::Measurement fast, slow;
  fast.config = kTunedWinner;
  slow.config = r.defaultConfig.str();
  for (auto [m, us] : {std::pair{&fast, 5.0}, std::pair{&slow, 9.0}}) {
    m->medianUs = us;
    m->minUs = us - 0.5;
    m->maxUs = us + 1;
    m->spreadUs = 0.5;
    m->samples = 20;
  }
  return {r.defaultConfig.str(), {fast, slow}};
}

std::shared_ptr<autotune::TunePolicy>
backgroundPolicy(const std::string &dbPath, std::atomic<int> &tunes,
                 Failures &failures) {
  autotune::PolicyOptions o;
  o.onMiss = autotune::OnMiss::TuneInBackground;
  o.dbPath = dbPath;
  o.warn = [&](llvm::StringRef m) { failures.add("warning: " + m.str()); };
  o.tuner = [&](const ConfigRequest &r) -> llvm::Expected<autotune::TuneOutcome> {
    ++tunes;
    std::this_thread::sleep_for(std::chrono::milliseconds(2)); // "timing"
    return tunedOutcome(r);
  };
  return std::make_shared<autotune::TunePolicy>(std::move(o));
}

} // namespace

TEST(TunePolicyConcurrency, BackgroundTunesRaceWithLaunchesAndLaterRuntimesUseTheWinners) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  const std::string db = dir.file("tune-db.json");
  constexpr int kCols = 6;
  std::atomic<int> tunes{0};
  Failures failures;
  {
    auto policy = backgroundPolicy(db, tunes, failures);
    RuntimeOptions o = memoryOnly();
    o.configSource = policy;
    Runtime rt(std::move(o));
    auto k = rt.findKernel("residual_gate", "");
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    onThreads([&](int t) {
      for (int i = 0; i < kCols; ++i)
        failures.check(GateArgs(8, 64 * (1 + (i + t) % kCols)).launch(**k),
                       "thread " + std::to_string(t));
    });
    // Launches never waited for a tune: the policy still tunes (or has
    // tuned) each class once, on its own thread.
    policy->waitIdle();
  } // the runtime and the policy go while nothing is queued
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  EXPECT_EQ(tunes.load(), kCols);

  // A later runtime reads the persisted winners.
  RuntimeOptions o = memoryOnly();
  o.cache.warn = [&](llvm::StringRef m) { failures.add("warning: " + m.str()); };
  capi::TuneDbOptions tdb;
  tdb.path = db;
  std::unique_ptr<Runtime> laterOwned = capi::makeRuntime(std::move(o), tdb);
  Runtime &later = *laterOwned;
  auto k = later.findKernel("residual_gate", "");
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  for (int i = 0; i < kCols; ++i) {
    ASSERT_FALSE(bool(GateArgs(8, 64 * (1 + i)).launch(**k)));
    EXPECT_EQ((*k)->lastSpecialisation().config, kTunedWinner) << "cols " << 64 * (1 + i);
    EXPECT_EQ((*k)->lastSpecialisation().configFrom, "tune DB");
  }
  EXPECT_TRUE(failures.list.empty()) << failures.text();
}

TEST(TunePolicyConcurrency, ARuntimeDestroyedWhileTunesAreQueuedWaitsForThem) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  const std::string db = dir.file("tune-db.json");
  std::atomic<int> tunes{0};
  Failures failures;
  {
    RuntimeOptions o = memoryOnly();
    o.configSource = backgroundPolicy(db, tunes, failures);
    Runtime rt(std::move(o));
    auto k = rt.findKernel("residual_gate", "");
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    onThreads([&](int t) {
      failures.check(GateArgs(8, 64 * (1 + t)).launch(**k),
                     "thread " + std::to_string(t));
    });
  } // destroyed at once: the policy's worker drains its queue first
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  EXPECT_EQ(tunes.load(), kThreads);
  auto onDisk = autotune::TuneDB::load(db);
  ASSERT_TRUE(bool(onDisk)) << llvm::toString(onDisk.takeError());
  EXPECT_EQ(onDisk->size(), size_t(kThreads));
}

TEST(TunePolicyConcurrency, TwoPoliciesOfOneProcessPersistingToOneFileNeverCorruptIt) {
  TempDir dir;
  const std::string db = dir.file("tune-db.json");
  Failures failures;
  std::shared_ptr<autotune::TunePolicy> policies[2];
  for (auto &p : policies) {
    autotune::PolicyOptions o;
    o.onMiss = autotune::OnMiss::TuneNow;
    o.dbPath = db;
    o.warn = [&](llvm::StringRef m) { failures.add("warning: " + m.str()); };
    p = std::make_shared<autotune::TunePolicy>(std::move(o));
  }
  constexpr int kKeys = 25;
  onThreads(
      [&](int t) {
        for (int i = 0; i < kKeys; ++i) {
          autotune::ChooseRequest req;
          req.key = autotune::TuneKey{
              "residual_gate", "h" + std::to_string(t),
              "c" + std::to_string(64 * (i + 1)), "r:bf16",
              {"Fake H200", "sm_90", "0.1.0", "22", "fake"}};
          req.defaultConfig = keys::TileConfig{2, 64, 4, false};
          req.tune = [] {
            ConfigRequest r;
            r.defaultConfig = keys::TileConfig{2, 64, 4, false};
            return llvm::Expected<autotune::TuneOutcome>(tunedOutcome(r));
          };
          autotune::Choice c = policies[t % 2]->choose(req);
          if (c.from != autotune::Provenance::TunedNow)
            failures.add("thread " + std::to_string(t) + " key " +
                         std::to_string(i) + ": " +
                         autotune::provenanceName(c.from).str() + " " +
                         c.detail);
        }
      },
      4);
  EXPECT_TRUE(failures.list.empty()) << failures.text();
  // Every persist is a whole file (a concurrent writer may drop another's
  // last entries, never corrupt the file).
  auto onDisk = autotune::TuneDB::load(db);
  ASSERT_TRUE(bool(onDisk)) << llvm::toString(onDisk.takeError());
  EXPECT_GE(onDisk->size(), size_t(kKeys));
}
