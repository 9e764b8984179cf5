//===- tests/autotune/PolicyTest.cpp - DB hit, default, tune on first sight -===//

#include "TestEnv.h"

#include "autotune/Policy.h"
#include "autotune/ShapeClass.h"
#include "keys/TuneKey.h"

#include "templates/Templates.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

using namespace bitfold;
using namespace bitfold::autotune;
using namespace bitfold::autotune::test;
using keys::TileConfig;

namespace {

const TileConfig kDefault{1, 128, 8, false};

TuneOutcome outcome() {
  return TuneOutcome{"r1.t128.v8.p1",
                     {meas("r1.t128.v8.p1", 12.0), meas("r4.t32.v8.p1", 8.0),
                      meas("r2.t64.v8.p1", 40.0, 5, 1, true)}};
}

ChooseRequest request(std::function<llvm::Expected<TuneOutcome>()> tune = {}) {
  ChooseRequest r;
  r.key = keyFor("h1", "c4096.a16-16-16-16.o32/r4096");
  r.defaultConfig = kDefault;
  r.tune = std::move(tune);
  return r;
}

struct Warnings {
  std::vector<std::string> list;
  std::function<void(llvm::StringRef)> fn() {
    return [this](llvm::StringRef m) { list.push_back(m.str()); };
  }
};

TEST(Policy, UsesTheDbWinnerOnAHit) {
  TuneDB db;
  db.record(request().key, "r1.t128.v8.p1", outcome().measurements);
  TunePolicy policy({}, db);
  int tunes = 0;
  Choice c = policy.choose(request([&]() -> llvm::Expected<TuneOutcome> {
    ++tunes;
    return outcome();
  }));
  EXPECT_EQ(c.from, Provenance::Database);
  EXPECT_EQ(c.config.str(), "r4.t32.v8.p1");
  EXPECT_EQ(tunes, 0);
}

TEST(Policy, FallsBackToTheDefaultWithoutTuningOrStalling) {
  TunePolicy policy({});
  int tunes = 0;
  Choice c = policy.choose(request([&]() -> llvm::Expected<TuneOutcome> {
    ++tunes;
    return outcome();
  }));
  EXPECT_EQ(c.from, Provenance::Default);
  EXPECT_EQ(c.config, kDefault);
  EXPECT_EQ(tunes, 0);
}

TEST(Policy, StaleEntryIsNotUsedAndWarnsOnce) {
  TuneEnvironment other = h200();
  other.gpuName = "NVIDIA A100-SXM4-80GB";
  other.arch = "sm_80";
  TuneDB db;
  db.record(keyFor("h1", "c4096.a16-16-16-16.o32/r4096", other), "",
            outcome().measurements);
  Warnings w;
  PolicyOptions o;
  o.warn = w.fn();
  TunePolicy policy(o, db);
  Choice c = policy.choose(request());
  EXPECT_EQ(c.from, Provenance::DefaultStale);
  EXPECT_EQ(c.config, kDefault);
  EXPECT_NE(c.detail.find("A100"), std::string::npos);
  policy.choose(request());
  ASSERT_EQ(w.list.size(), 1u);
  EXPECT_NE(w.list[0].find("not used"), std::string::npos) << w.list[0];
}

TEST(Policy, IllegalConfigInTheDbIsNotUsed) {
  TuneDB db;
  db.record(request().key, "", {meas("r4.t32.v8.p1", 1.0)});
  Warnings w;
  PolicyOptions o;
  o.warn = w.fn();
  TunePolicy policy(o, db);
  ChooseRequest r = request();
  r.check = [](const TileConfig &c) -> llvm::Error {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "too many registers");
  };
  Choice c = policy.choose(r);
  EXPECT_EQ(c.from, Provenance::DefaultInvalid);
  EXPECT_EQ(c.config, kDefault);
  EXPECT_EQ(w.list.size(), 1u);
}

TEST(Policy, TunesSynchronouslyOnFirstSightAndPersists) {
  TempDir dir;
  PolicyOptions o;
  o.onMiss = OnMiss::TuneNow;
  o.dbPath = dir.file("tune-db.json");
  auto policy = TunePolicy::open(o);
  ASSERT_TRUE(bool(policy));
  int tunes = 0;
  auto tune = [&]() -> llvm::Expected<TuneOutcome> {
    ++tunes;
    return outcome();
  };
  Choice c = (*policy)->choose(request(tune));
  EXPECT_EQ(c.from, Provenance::TunedNow);
  EXPECT_EQ(c.config.str(), "r4.t32.v8.p1");
  Choice again = (*policy)->choose(request(tune));
  EXPECT_EQ(again.from, Provenance::Database);
  EXPECT_EQ(tunes, 1);

  // A new process sees the persisted result.
  PolicyOptions fresh;
  fresh.dbPath = o.dbPath;
  auto reopened = TunePolicy::open(fresh);
  ASSERT_TRUE(bool(reopened));
  Choice hit = (*reopened)->choose(request());
  EXPECT_EQ(hit.from, Provenance::Database);
  EXPECT_EQ(hit.config.str(), "r4.t32.v8.p1");
}

TEST(Policy, FailedSyncTuneFallsBackToDefault) {
  PolicyOptions o;
  o.onMiss = OnMiss::TuneNow;
  Warnings w;
  o.warn = w.fn();
  TunePolicy policy(o);
  Choice c = policy.choose(request([]() -> llvm::Expected<TuneOutcome> {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "no GPU");
  }));
  EXPECT_EQ(c.from, Provenance::DefaultTuneFailed);
  EXPECT_EQ(c.config, kDefault);
  EXPECT_NE(c.detail.find("no GPU"), std::string::npos);
}

TEST(Policy, TunesInBackgroundWithoutStallingAndPersists) {
  TempDir dir;
  PolicyOptions o;
  o.onMiss = OnMiss::TuneInBackground;
  o.dbPath = dir.file("tune-db.json");
  TunePolicy policy(o);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> tunes{0};
  auto tune = [gate, &tunes]() -> llvm::Expected<TuneOutcome> {
    ++tunes;
    gate.wait(); // the "GPU" is busy until the test releases it
    return outcome();
  };
  // While the tune is blocked, choose() answers at once with the default,
  // and a second call for the same key does not queue another tune.
  Choice first = policy.choose(request(tune));
  EXPECT_EQ(first.from, Provenance::DefaultTuning);
  EXPECT_EQ(first.config, kDefault);
  Choice second = policy.choose(request(tune));
  EXPECT_EQ(second.from, Provenance::DefaultTuning);
  release.set_value();
  policy.waitIdle();
  EXPECT_EQ(tunes.load(), 1);
  Choice hit = policy.choose(request(tune));
  EXPECT_EQ(hit.from, Provenance::Database);
  EXPECT_EQ(hit.config.str(), "r4.t32.v8.p1");

  auto onDisk = TuneDB::load(o.dbPath);
  ASSERT_TRUE(bool(onDisk)) << llvm::toString(onDisk.takeError());
  EXPECT_EQ(onDisk->lookup(request().key).kind, Lookup::Hit);
}

TEST(Policy, PersistingMergesWithWhatOtherProcessesWrote) {
  TempDir dir;
  std::string path = dir.file("tune-db.json");
  TuneDB theirs;
  theirs.record(keyFor("h2", "c128.a16-16.o32/r1"), "",
                {meas("r8.t32.v4.p1", 3.0)});
  ASSERT_FALSE(bool(theirs.save(path)));
  PolicyOptions o;
  o.onMiss = OnMiss::TuneNow;
  o.dbPath = path;
  TunePolicy policy(o); // opened before "their" write would be seen
  policy.choose(request([]() -> llvm::Expected<TuneOutcome> {
    return outcome();
  }));
  auto onDisk = TuneDB::load(path);
  ASSERT_TRUE(bool(onDisk));
  EXPECT_EQ(onDisk->size(), 2u);
}

} // namespace

namespace {

/// The runtime's request for ln_modulate, `cols` x `rows` dense.
policy::ConfigRequest runtimeRequest(int64_t cols, int64_t rows = 4096) {
  auto def = templates::lnModulate();
  EXPECT_TRUE(bool(def)) << llvm::toString(def.takeError());
  policy::ConfigRequest req;
  req.def = *def;
  req.shapeClass = keys::denseShapeClass(**def, cols, {rows}, rows, true);
  req.gpuName = "NVIDIA H200";
  req.arch = "sm_90";
  req.toolchain = "tc 1";
  req.defaultConfig = kDefault;
  req.check = [](const TileConfig &) { return llvm::Error::success(); };
  return req;
}

} // namespace

TEST(Policy, AsTheRuntimesConfigSourceItKeysTheRequestAndTunesThroughItsTuner) {
  policy::ConfigRequest req = runtimeRequest(4096, 4359);
  const std::shared_ptr<const dsl::KernelDef> &def = req.def;

  PolicyOptions o;
  o.onMiss = OnMiss::TuneNow;
  std::vector<std::string> asked;
  o.tuner = [&](const policy::ConfigRequest &r) -> llvm::Expected<TuneOutcome> {
    asked.push_back(r.shapeClass.str());
    return outcome();
  };
  TunePolicy policy(o);
  policy::ConfigSource &source = policy;
  policy::ConfigAnswer a = source.configFor(req);
  EXPECT_EQ(a.config.str(), "r4.t32.v8.p1");
  EXPECT_EQ(a.from, "tuned now");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], "c4096.a16-16-16-16.o32/r4096");
  // Recorded under the key the tuner would use for this class.
  TuneKey key = keys::tuneKeyFor(*def, asked[0],
                           keys::currentEnvironment("NVIDIA H200", "sm_90", "tc 1"));
  EXPECT_EQ(policy.snapshot().lookup(key).kind, Lookup::Hit);
  EXPECT_EQ(source.configFor(req).from, "tune DB");
  EXPECT_EQ(asked.size(), 1u);
}


TEST(Policy, BackgroundAnswersAreProvisionalUntilTheGenerationMoves) {
  TempDir dir;
  PolicyOptions o;
  o.onMiss = OnMiss::TuneInBackground;
  o.dbPath = dir.file("tune-db.json");
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  o.tuner = [gate](const policy::ConfigRequest &) -> llvm::Expected<TuneOutcome> {
    gate.wait();
    return outcome();
  };
  TunePolicy policy(o);
  policy::ConfigSource &source = policy;
  uint64_t g0 = source.generation();
  policy::ConfigAnswer a = source.configFor(runtimeRequest(4096));
  EXPECT_TRUE(a.provisional) << a.from;
  EXPECT_EQ(a.config, kDefault);
  EXPECT_EQ(source.generation(), g0) << "moved before the tune recorded";
  release.set_value();
  policy.waitIdle();
  EXPECT_EQ(source.generation(), g0 + 1);
  policy::ConfigAnswer b = source.configFor(runtimeRequest(4096));
  EXPECT_FALSE(b.provisional);
  EXPECT_EQ(b.from, "tune DB");
  EXPECT_EQ(b.config.str(), "r4.t32.v8.p1");
  // The winner reached the file, written whole (temp file + rename).
  auto onDisk = TuneDB::load(o.dbPath);
  ASSERT_TRUE(bool(onDisk)) << llvm::toString(onDisk.takeError());
  EXPECT_EQ(onDisk->size(), 1u);
}

TEST(Policy, ASpentBudgetStopsTuningAndGivesTheDefault) {
  PolicyOptions o;
  o.onMiss = OnMiss::TuneNow;
  o.budgetSeconds = 0.05;
  std::atomic<int> tunes{0};
  o.tuner = [&](const policy::ConfigRequest &) -> llvm::Expected<TuneOutcome> {
    ++tunes;
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    return outcome();
  };
  TunePolicy policy(o);
  EXPECT_EQ(policy.configFor(runtimeRequest(4096)).from, "tuned now");
  policy::ConfigAnswer second = policy.configFor(runtimeRequest(2048));
  EXPECT_EQ(second.from, "default (tuning budget spent)");
  EXPECT_EQ(second.config, kDefault);
  EXPECT_EQ(tunes.load(), 1) << "tuned after 80 ms of a 50 ms budget";
}

TEST(Policy, AFailedBackgroundTuneIsNotRetried) {
  PolicyOptions o;
  o.onMiss = OnMiss::TuneInBackground;
  Warnings w;
  o.warn = w.fn();
  std::atomic<int> tunes{0};
  o.tuner = [&](const policy::ConfigRequest &) -> llvm::Expected<TuneOutcome> {
    ++tunes;
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "no GPU");
  };
  TunePolicy policy(o);
  EXPECT_TRUE(policy.configFor(runtimeRequest(4096)).provisional);
  policy.waitIdle();
  policy::ConfigAnswer again = policy.configFor(runtimeRequest(4096));
  EXPECT_FALSE(again.provisional);
  EXPECT_EQ(again.from, "default (tuning failed)");
  policy.waitIdle();
  EXPECT_EQ(tunes.load(), 1);
  ASSERT_EQ(w.list.size(), 1u);
  EXPECT_NE(w.list[0].find("no GPU"), std::string::npos);
}
