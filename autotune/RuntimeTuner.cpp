//===- autotune/RuntimeTuner.cpp - Tune-on-miss for the runtime -----------===//
//
// openTuneDbSource(): the runtime's tune DB source (a TunePolicy). With
// tune-on-miss on, a missed shape class is tuned by tuneShape(), as
// `bitfold tune` tunes one shape: every legal config of the class is
// compiled and timed on the request's GPU (GpuRunner, its own seeded
// buffers: the caller's tensors are never touched), the default first as
// the bit reference, within TuneOnMissOptions::perTuneSeconds (soft for the
// first measurement).
//
//===----------------------------------------------------------------------===//

#include "autotune/RuntimeTuner.h"

#include "autotune/GpuRunner.h"
#include "autotune/Policy.h"
#include "autotune/TuneShape.h"

#include "keys/Errors.h"

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
  if (!r.compile)
    return keys::usageError("tune-on-miss needs the runtime's compile");
  ShapeTuneRequest t;
  t.def = r.def.get();
  t.spec = r.shapeClass.shapeSpec();
  t.defaultConfig = r.defaultConfig;
  // Through the runtime's cache and Compiler: the winner is then a cache
  // hit for the launch.
  t.compile = r.compile;
  t.makeRunner = [&r]() -> llvm::Expected<std::unique_ptr<ConfigRunner>> {
    auto problem = problemFor(r);
    if (!problem)
      return problem.takeError();
    return makeGpuRunner(*r.def, *problem, GpuRunnerOptions{r.device});
  };
  t.search.compileThreads = 2; // launches keep the other cores
  if (seconds > 0)
    t.search.deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(seconds));
  auto tune = tuneShape(t);
  if (!tune)
    return tune.takeError();
  return std::move(tune->outcome);
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
