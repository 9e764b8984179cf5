//===- tests/tools/RunTest.cpp - `run` and `tune` on the fake driver ------===//
//
// The fake libcuda accepts every call and runs nothing, so the outputs keep
// their poison: `run` must bind every operand (channels-last strides,
// per-batch and per-column tensors, two groups), launch, and report the
// difference from the interpreter with the "results differ" code, 3.
// `tune` runs its whole path (configs compiled through the cache, the GPU
// runner's upload and timing loop, the tune DB written): a budget spent
// before the first measurement still leaves the shape measured (its
// default config) and recorded. Steady samples replay launches captured
// once per config into a graph; flushed ones launch from the host.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "autotune/TuneDB.h"

#include "../runtime/FakeCuda.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::tools::test;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

TEST(Run, ReportsUnwrittenOutputsAsResultsDiffer) {
  ASSERT_TRUE(fakeDriver);
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> compared;
  } cases[] = {
      {{"qk_layernorm", "--shape", "1,4,2,128"},
       {"compare y[0]: 1024 elements, 1024 differ",
        "compare y[1]: 1024 elements, 1024 differ"}},
      {{"conv_bias", "--shape", "1,8,2,4,4", "--params",
        "residual=1,bias_dtype=f32"},
       {"compare y: 256 elements, 256 differ"}},
      {{"residual_gate", "--shape", "2,4,64", "--params", "gate=per_batch"},
       {"compare y: 512 elements, 512 differ"}},
  };
  for (const Case &c : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--iters", "0"});
    Output o = cli(args);
    EXPECT_EQ(o.status, 3) << joined(args) << "\n" << o.out << o.err;
    for (const std::string &line : c.compared)
      EXPECT_NE(o.out.find(line), std::string::npos)
          << joined(args) << "\n" << o.out;
    EXPECT_NE(o.out.find("NOT bit-exact vs the interpreter"),
              std::string::npos)
        << o.out;
  }
}

TEST(Tune, BudgetSpentBeforeTheFirstMeasurementStillRecordsTheDefault) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  std::string shapes = dir.write(
      "shapes.json", R"([{"template": "conv_bias", "shape": "1,8,2,4,4",
                          "params": {"dtype": "bf16"}}])");
  std::string out = dir.file("out");
  std::vector<std::string> args = {"tune",  "--shapes",   shapes,
                                   "--out", out,          "--devices",
                                   "0",     "--budget-s", "0.000001"};
  Output o = cli(args);
  ASSERT_EQ(o.status, 0) << joined(args) << "\n" << o.out << o.err;
  EXPECT_NE(o.out.find("(1 entries)"), std::string::npos) << o.out;
  auto db = autotune::TuneDB::load(out + "/tune-db.json");
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  ASSERT_EQ(db->size(), 1u);
  const autotune::TuneEntry *e = db->all().front();
  ASSERT_EQ(e->measurements.size(), 1u);
  EXPECT_EQ(e->measurements[0].config, e->defaultConfig);
  EXPECT_NE(o.out.find("skipped (budget)"), std::string::npos) << o.out;
}

/// A fake driver counter; 0 before the driver is first loaded.
int fakeCount(const char *what) {
  void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!lib)
    return 0;
  auto count = reinterpret_cast<FakeCountFn>(dlsym(lib, "fake_cuda_count"));
  EXPECT_NE(count, nullptr);
  return count ? count(what) : 0;
}

TEST(Tune, SteadySamplesReplayACapturedGraphFlushedOnesDoNot) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  std::string shapes = dir.write(
      "shapes.json", R"([{"template": "residual_gate", "shape": "2,4,64",
                          "params": {"dtype": "bf16"}}])");
  auto tune = [&](const char *timing) {
    std::vector<std::string> args = {"tune",     "--shapes", shapes,
                                     "--out",    dir.file(timing),
                                     "--devices", "0",       "--timing",
                                     timing,     "--repetitions", "20"};
    Output o = cli(args);
    EXPECT_EQ(o.status, 0) << joined(args) << "\n" << o.out << o.err;
    auto db = autotune::TuneDB::load(dir.file(timing) + "/tune-db.json");
    EXPECT_TRUE(bool(db)) << llvm::toString(db.takeError());
    return db ? db->all().front()->measurements.size() : size_t(0);
  };
  int graphs = fakeCount("cuGraphLaunch"), captured = fakeCount("captured launch");
  int replayed = fakeCount("replayed launch"), made = fakeCount("cuGraphExecDestroy");
  size_t configs = tune("steady");
  ASSERT_GT(configs, 1u);
  int newGraphs = fakeCount("cuGraphLaunch") - graphs;
  int newMade = fakeCount("cuGraphExecDestroy") - made;
  // One graph per config timed, at least 8 launches in it, one replay per
  // sample (20 repetitions); every stream made (the graphs' and the
  // runner's own) is destroyed again.
  EXPECT_GE(newMade, int(configs));
  EXPECT_GE(newGraphs, 20 * int(configs));
  EXPECT_GE(fakeCount("captured launch") - captured, 8 * newMade);
  EXPECT_GE(fakeCount("replayed launch") - replayed, 8 * newGraphs);
  EXPECT_EQ(fakeCount("cuStreamDestroy"), fakeCount("cuStreamCreate"));

  graphs = fakeCount("cuGraphLaunch");
  made = fakeCount("cuGraphExecDestroy");
  EXPECT_GT(tune("flushed"), 1u);
  EXPECT_EQ(fakeCount("cuGraphLaunch"), graphs);
  EXPECT_EQ(fakeCount("cuGraphExecDestroy"), made);
}

} // namespace
