//===- tests/autotune/SearchTest.cpp - The tuning loop with a fake GPU ----===//

#include "TestEnv.h"

#include "autotune/Search.h"
#include "autotune/ShapeClass.h"
#include "autotune/TuneShape.h"
#include "keys/Errors.h"

#include "templates/Problem.h"
#include "templates/Templates.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

using namespace bitfold;
using namespace bitfold::autotune;
using keys::TileConfig;

namespace {

/// A fake GPU: each config has a fixed time (plus a little deterministic
/// jitter) and an output; it records what it was asked to run.
class FakeRunner : public ConfigRunner {
public:
  std::map<std::string, double> timeUs;      ///< by config; default 10.
  std::map<std::string, uint8_t> outputByte; ///< by config; default 7.
  std::vector<std::string> loaded;
  std::map<std::string, int> timedRuns;

  llvm::Error load(const codegen::CompiledKernel &k) override {
    current = k.config.str();
    loaded.push_back(current);
    return llvm::Error::success();
  }
  llvm::Error warmUp(int) override { return llvm::Error::success(); }
  llvm::Expected<std::vector<uint8_t>> outputBytes() override {
    auto it = outputByte.find(current);
    return std::vector<uint8_t>(64, it == outputByte.end() ? 7 : it->second);
  }
  llvm::Expected<double> timeOnceUs() override {
    int n = timedRuns[current]++;
    auto it = timeUs.find(current);
    double base = it == timeUs.end() ? 10.0 : it->second;
    return base + 0.01 * (n % 3);
  }

private:
  std::string current;
};

codegen::CompiledKernel fakeKernel(const TileConfig &c) {
  codegen::CompiledKernel k;
  k.config = c;
  k.entryName = "fake";
  return k;
}

CompileConfigFn fakeCompile() {
  return [](const TileConfig &c) -> llvm::Expected<codegen::CompiledKernel> {
    return fakeKernel(c);
  };
}

std::vector<TileConfig> fakeConfigs() {
  return {{1, 128, 8, false},
          {2, 64, 8, false},
          {4, 32, 8, false},
          {1, 256, 8, true},
          {2, 128, 4, true}};
}

TEST(Search, EveryTimedConfigPassesCheckConfig) {
  auto def = templates::lnModulate();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  for (const char *shapeText : {"1,4096,4096", "2,1024,2240", "1,1,128"}) {
    auto shape = templates::parseShape("ln_modulate", shapeText);
    ASSERT_TRUE(bool(shape));
    keys::ShapeSpec spec = tunedShapeClass(**def, *shape).shapeSpec();
    std::vector<TileConfig> configs = codegen::enumerateConfigs(**def, spec);
    ASSERT_FALSE(configs.empty()) << shapeText;
    FakeRunner runner;
    SearchOptions opts;
    opts.compileThreads = 2;
    auto r = searchConfigs(configs, fakeCompile(), runner, opts);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    EXPECT_EQ(runner.loaded.size(), configs.size());
    for (const std::string &c : runner.loaded) {
      auto parsed = TileConfig::parse(c);
      ASSERT_TRUE(bool(parsed));
      llvm::Error e = codegen::checkConfig(**def, spec, *parsed);
      EXPECT_FALSE(bool(e)) << shapeText << " config " << c << ": "
                            << llvm::toString(std::move(e));
    }
  }
}

TEST(Search, CutsConfigsClearlySlowerThanTheBest) {
  FakeRunner runner;
  runner.timeUs = {{"r1.t128.v8.p1", 10.0},
                   {"r2.t64.v8.p1", 30.0},
                   {"r4.t32.v8.p1", 11.0},
                   {"r1.t256.v8.p2", 9.0},
                   {"r2.t128.v4.p2", 50.0}};
  SearchOptions opts;
  opts.cutAfter = 5;
  opts.cutRatio = 1.3;
  auto r = searchConfigs(fakeConfigs(), fakeCompile(), runner, opts);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->measurements.size(), 5u);
  auto m = [&](const char *c) { return *r->find(c); };
  EXPECT_FALSE(m("r1.t128.v8.p1").cut);
  EXPECT_EQ(m("r1.t128.v8.p1").samples, 20);
  EXPECT_TRUE(m("r2.t64.v8.p1").cut);
  EXPECT_EQ(m("r2.t64.v8.p1").samples, 5);
  EXPECT_FALSE(m("r4.t32.v8.p1").cut); // within 1.3x: fully timed
  EXPECT_EQ(m("r4.t32.v8.p1").samples, 20);
  EXPECT_TRUE(m("r2.t128.v4.p2").cut);
  EXPECT_EQ(r->winner()->config, "r1.t256.v8.p2");
  EXPECT_NEAR(r->winner()->medianUs, 9.01, 1e-9);
}

TEST(Search, TakesAtLeastTwentyTimedSamples) {
  FakeRunner runner;
  SearchOptions opts;
  opts.repetitions = 3;
  auto r = searchConfigs(fakeConfigs(), fakeCompile(), runner, opts);
  ASSERT_TRUE(bool(r));
  for (const Measurement &m : r->measurements)
    EXPECT_EQ(m.samples, 20) << m.config;
}

TEST(Search, ShortKernelsTakeFiveTimesTheSamples) {
  FakeRunner runner;
  runner.timeUs = {{"r1.t128.v8.p1", 5.0}, {"r2.t64.v8.p1", 7.9},
                   {"r4.t32.v8.p1", 8.5}};
  SearchOptions opts;
  opts.cutRatio = 10; // nothing cut
  auto r = searchConfigs(fakeConfigs(), fakeCompile(), runner, opts);
  ASSERT_TRUE(bool(r));
  EXPECT_EQ(r->find("r1.t128.v8.p1")->samples, 100);
  EXPECT_EQ(r->find("r2.t64.v8.p1")->samples, 100);
  EXPECT_EQ(r->find("r4.t32.v8.p1")->samples, 20);
  EXPECT_EQ(r->find("r1.t256.v8.p2")->samples, 20); // 10 us
}

TEST(Search, SummaryIsMedianAndInterquartileSpread) {
  Measurement m = summarise("c", {5, 1, 4, 2, 3});
  EXPECT_EQ(m.medianUs, 3);
  EXPECT_EQ(m.spreadUs, 2); // p75 4 - p25 2
  EXPECT_EQ(m.minUs, 1);
  EXPECT_EQ(m.maxUs, 5);
  EXPECT_EQ(m.samples, 5);
}

TEST(Search, DifferentOutputBitsFailNamingBothConfigs) {
  FakeRunner runner;
  runner.outputByte["r4.t32.v8.p1"] = 8;
  auto r = searchConfigs(fakeConfigs(), fakeCompile(), runner, {});
  ASSERT_FALSE(bool(r));
  // Callers (bitfold tune's exit 3) branch on the kind, not the text.
  EXPECT_TRUE(r.errorIsA<keys::BitsDifferError>());
  std::string msg = llvm::toString(r.takeError());
  EXPECT_NE(msg.find("r1.t128.v8.p1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("r4.t32.v8.p1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("codegen bug"), std::string::npos) << msg;
}

TEST(Search, CompileFailureSkipsTheConfigAndIsReported) {
  FakeRunner runner;
  CompileConfigFn compile =
      [](const TileConfig &c) -> llvm::Expected<codegen::CompiledKernel> {
    if (c.str() == "r2.t64.v8.p1")
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "ptxas: out of registers");
    return fakeKernel(c);
  };
  auto r = searchConfigs(fakeConfigs(), compile, runner, {});
  ASSERT_TRUE(bool(r));
  EXPECT_EQ(r->measurements.size(), 4u);
  ASSERT_EQ(r->failures.size(), 1u);
  EXPECT_EQ(r->failures[0].first, "r2.t64.v8.p1");
  EXPECT_NE(r->failures[0].second.find("out of registers"), std::string::npos);
  EXPECT_EQ(r->kernels.count("r2.t64.v8.p1"), 0u);
  EXPECT_EQ(r->kernels.count("r1.t128.v8.p1"), 1u);
}

TEST(Search, CompilesInParallelThreads) {
  std::atomic<int> running{0}, peak{0};
  CompileConfigFn compile =
      [&](const TileConfig &c) -> llvm::Expected<codegen::CompiledKernel> {
    int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    --running;
    return fakeKernel(c);
  };
  FakeRunner runner;
  SearchOptions opts;
  opts.compileThreads = 4;
  auto r = searchConfigs(fakeConfigs(), compile, runner, opts);
  ASSERT_TRUE(bool(r));
  EXPECT_GE(peak.load(), 2);
}

TEST(Search, BudgetSpentBeforeTheFirstMeasurementStillTimesTheDefault) {
  // What failed `bitfold tune --budget-s 6` for large conv_bias shapes on
  // the H200: the upload and the first compile outlasted the budget, every
  // config was skipped, and the tune ended with "0 entries".
  FakeRunner runner;
  SearchOptions opts;
  opts.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  auto r = searchConfigs(fakeConfigs(), fakeCompile(), runner, opts);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->measurements.size(), 1u);
  EXPECT_EQ(r->measurements[0].config, "r1.t128.v8.p1"); // the default
  EXPECT_EQ(r->measurements[0].samples, 20);
  EXPECT_EQ(r->skipped, 4u);
}

TEST(Search, BudgetStaysSoftUntilAConfigIsTimed) {
  // The default fails to compile past the budget: the next config is
  // tried, then the budget binds.
  FakeRunner runner;
  CompileConfigFn compile =
      [](const TileConfig &c) -> llvm::Expected<codegen::CompiledKernel> {
    if (c.str() == "r1.t128.v8.p1")
      return keys::compileError("ptxas: out of registers");
    return fakeKernel(c);
  };
  SearchOptions opts;
  opts.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  auto r = searchConfigs(fakeConfigs(), compile, runner, opts);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->measurements.size(), 1u);
  EXPECT_EQ(r->measurements[0].config, "r2.t64.v8.p1");
  EXPECT_EQ(r->failures.size(), 1u);
  EXPECT_EQ(r->skipped, 3u);
}

TEST(Search, NoConfigTimedIsATuneErrorNamingEachFailure) {
  FakeRunner runner;
  CompileConfigFn compile =
      [](const TileConfig &c) -> llvm::Expected<codegen::CompiledKernel> {
    return keys::compileError("ptxas failed for " + c.str());
  };
  auto r = searchConfigs(fakeConfigs(), compile, runner, {});
  ASSERT_FALSE(bool(r));
  EXPECT_TRUE(r.errorIsA<keys::TuneError>());
  std::string msg = llvm::toString(r.takeError());
  EXPECT_NE(msg.find("5 failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ptxas failed for r2.t64.v8.p1"), std::string::npos)
      << msg;
}

TEST(Search, ReportsProgressPerConfig) {
  FakeRunner runner;
  std::vector<size_t> done;
  SearchOptions opts;
  opts.progress = [&](size_t d, size_t total, llvm::StringRef best, double) {
    EXPECT_EQ(total, 5u);
    EXPECT_FALSE(best.empty());
    done.push_back(d);
  };
  ASSERT_TRUE(bool(searchConfigs(fakeConfigs(), fakeCompile(), runner, opts)));
  EXPECT_EQ(done, (std::vector<size_t>{1, 2, 3, 4, 5}));
}

/// Lends a test's FakeRunner to tuneShape (which owns its runner).
class LentRunner : public ConfigRunner {
public:
  explicit LentRunner(FakeRunner &r) : r(r) {}
  llvm::Error load(const codegen::CompiledKernel &k) override {
    return r.load(k);
  }
  llvm::Error warmUp(int n) override { return r.warmUp(n); }
  llvm::Expected<std::vector<uint8_t>> outputBytes() override {
    return r.outputBytes();
  }
  llvm::Expected<double> timeOnceUs() override { return r.timeOnceUs(); }

private:
  FakeRunner &r;
};

/// A tune request for `def` at `shapeText` on `runner`, whose making takes
/// `delay` (the upload of a large problem).
ShapeTuneRequest fakeTune(const dsl::KernelDef &def, const char *kernel,
                          const char *shapeText, FakeRunner &runner,
                          std::chrono::milliseconds delay = {}) {
  auto shape = templates::parseShape(kernel, shapeText);
  EXPECT_TRUE(bool(shape)) << llvm::toString(shape.takeError());
  ShapeTuneRequest r;
  r.def = &def;
  r.spec = tunedShapeClass(def, *shape).shapeSpec();
  r.defaultConfig = codegen::defaultConfig(def, r.spec);
  r.compile = fakeCompile();
  r.makeRunner = [&runner,
                  delay]() -> llvm::Expected<std::unique_ptr<ConfigRunner>> {
    std::this_thread::sleep_for(delay);
    return std::make_unique<LentRunner>(runner);
  };
  r.search.compileThreads = 2;
  return r;
}

TEST(TuneShape, TimesTheDefaultFirstThenEveryLegalConfig) {
  auto def = templates::lnModulate();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  FakeRunner runner;
  ShapeTuneRequest r = fakeTune(**def, "ln_modulate", "2,1024,2240", runner);
  ShapeConfigs space = shapeConfigs(**def, r.spec, r.defaultConfig);
  auto tune = tuneShape(r);
  ASSERT_TRUE(bool(tune)) << llvm::toString(tune.takeError());
  ASSERT_FALSE(space.legal.empty());
  EXPECT_EQ(space.legal.front(), r.defaultConfig);
  EXPECT_EQ(tune->legalConfigs, space.legal.size());
  EXPECT_EQ(tune->outcome.defaultConfig, r.defaultConfig.str());
  ASSERT_EQ(runner.loaded.size(), space.legal.size());
  EXPECT_EQ(runner.loaded.front(), r.defaultConfig.str());
  EXPECT_EQ(tune->outcome.measurements.size(), space.legal.size());
}

TEST(TuneShape, LargeConvBiasShapeOutlastingTheBudgetIsRecordedWithItsDefault) {
  // The H200 fleet's failing tasks: conv_bias 4,96,480,832 under a budget
  // shorter than its upload. The default is still timed and recorded.
  auto def = templates::convBias(dsl::DType::BF16, dsl::DType::BF16,
                                 /*residual=*/false);
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  for (const char *shape : {"4,96,480,832", "1,96,4,480,832"}) {
    FakeRunner runner;
    ShapeTuneRequest r = fakeTune(**def, "conv_bias", shape, runner,
                                  std::chrono::milliseconds(50));
    r.search.deadline = std::chrono::steady_clock::now();
    TuneDB db;
    TuneKey key = test::keyFor("h", shape);
    r.db = &db;
    r.key = &key;
    auto tune = tuneShape(r);
    ASSERT_TRUE(bool(tune))
        << shape << ": " << llvm::toString(tune.takeError());
    ASSERT_EQ(tune->outcome.measurements.size(), 1u) << shape;
    EXPECT_EQ(tune->outcome.measurements[0].config, r.defaultConfig.str());
    EXPECT_EQ(tune->skipped, tune->legalConfigs - 1) << shape;
    ASSERT_EQ(db.size(), 1u) << shape;
    const TuneEntry *e = db.lookup(key).entry;
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->defaultConfig, r.defaultConfig.str());
    ASSERT_NE(e->winner(), nullptr);
    EXPECT_EQ(e->winner()->config, r.defaultConfig.str());
  }
}

TEST(TuneShape, RunnerFailureIsReturnedNotRecorded) {
  auto def = templates::lnModulate();
  ASSERT_TRUE(bool(def));
  FakeRunner runner;
  ShapeTuneRequest r = fakeTune(**def, "ln_modulate", "1,4096,4096", runner);
  r.makeRunner = []() -> llvm::Expected<std::unique_ptr<ConfigRunner>> {
    return keys::driverError("no CUDA device");
  };
  TuneDB db;
  TuneKey key = test::keyFor("h", "c");
  r.db = &db;
  r.key = &key;
  auto tune = tuneShape(r);
  ASSERT_FALSE(bool(tune));
  EXPECT_TRUE(tune.errorIsA<keys::DriverError>());
  llvm::consumeError(tune.takeError());
  EXPECT_EQ(db.size(), 0u);
}

} // namespace
