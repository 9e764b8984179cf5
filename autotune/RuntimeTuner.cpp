//===- autotune/RuntimeTuner.cpp - Tune-on-miss for the runtime -----------===//
//
// openTuneDbSource(): the runtime's tune DB source (a TunePolicy). With
// tune-on-miss on, a missed shape class is tuned the way `bitfold tune`
// tunes one shape: every legal config of the class is compiled and timed
// on the request's GPU (GpuRunner, its own seeded buffers: the caller's
// tensors are never touched), the default first as the bit reference, for
// at most TuneOnMissOptions::perTuneSeconds.
//
//===----------------------------------------------------------------------===//

#include "autotune/RuntimeTuner.h"

#include "autotune/GpuRunner.h"
#include "autotune/Policy.h"

#include "templates/Problem.h"

#include "llvm/Support/Error.h"

#include <chrono>

using namespace bitfold;
using namespace bitfold::autotune;

namespace {

/// A dense problem of the request's class: its column count and row
/// bucket, one batch.
llvm::Expected<templates::HostProblem>
problemFor(const policy::ConfigRequest &r) {
  templates::ProblemShape shape;
  int64_t rows = r.shapeClass.rowBucket > 0 ? r.shapeClass.rowBucket : 4096;
  shape.cols = r.shapeClass.cols;
  shape.dims = {1, rows, shape.cols};
  shape.rowsPerBatch = rows;
  shape.groupRows.assign(size_t(r.def->groups), rows);
  std::vector<float> scalars;
  for (const dsl::ScalarDecl &s : r.def->scalars)
    scalars.push_back(s.defaultValue.value_or(1.0f));
  return templates::HostProblem::make(*r.def, shape, /*seed=*/0, scalars);
}

llvm::Expected<TuneOutcome> tuneOnGpu(const policy::ConfigRequest &r,
                                      double seconds) {
  const keys::ShapeSpec spec = r.shapeClass.shapeSpec();
  std::vector<keys::TileConfig> configs{r.defaultConfig};
  for (const keys::TileConfig &c : codegen::enumerateConfigs(*r.def, spec)) {
    if (c == r.defaultConfig)
      continue;
    if (llvm::Error e = codegen::checkConfig(*r.def, spec, c))
      llvm::consumeError(std::move(e)); // not legal for this class
    else
      configs.push_back(c);
  }
  auto problem = problemFor(r);
  if (!problem)
    return problem.takeError();
  auto runner = makeGpuRunner(*r.def, *problem, GpuRunnerOptions{r.device});
  if (!runner)
    return runner.takeError();
  if (!r.compile)
    return llvm::createStringError("tune-on-miss needs the runtime's compile");
  // Through the runtime's cache and Compiler: the winner is then a cache
  // hit for the launch.
  CompileConfigFn compile = [&](const keys::TileConfig &c) {
    return r.compile(c);
  };
  SearchOptions so;
  so.compileThreads = 2; // launches keep the other cores
  if (seconds > 0)
    so.deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(seconds));
  auto result = searchConfigs(configs, compile, **runner, so);
  if (!result)
    return result.takeError();
  return TuneOutcome{r.defaultConfig.str(), std::move(result->measurements)};
}

} // namespace

llvm::Expected<std::unique_ptr<policy::ConfigSource>>
autotune::openTuneDbSource(llvm::StringRef path,
                           std::function<void(llvm::StringRef)> warn,
                           const TuneOnMissOptions &tuneOnMiss) {
  PolicyOptions po;
  po.dbPath = path.str();
  po.warn = std::move(warn);
  po.budgetSeconds = tuneOnMiss.budgetSeconds;
  switch (tuneOnMiss.mode) {
  case TuneOnMissOptions::Off:
    po.onMiss = OnMiss::UseDefault; // never tune or stall a launch
    break;
  case TuneOnMissOptions::Background:
    po.onMiss = OnMiss::TuneInBackground;
    break;
  case TuneOnMissOptions::Now:
    po.onMiss = OnMiss::TuneNow;
    break;
  }
  if (po.onMiss != OnMiss::UseDefault)
    po.tuner = [seconds = tuneOnMiss.perTuneSeconds](
                   const policy::ConfigRequest &r) {
      return tuneOnGpu(r, seconds);
    };
  auto p = TunePolicy::open(std::move(po));
  if (!p)
    return p.takeError();
  return std::unique_ptr<policy::ConfigSource>(std::move(*p));
}
