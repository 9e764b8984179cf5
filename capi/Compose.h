//===- capi/Compose.h - Build a Runtime with its tune policy -----*- C++ -*-===//
//
// The composition root: the one place that joins the runtime (which knows
// only policy::ConfigSource) with autotune's tune DB policy. The C API's
// bitfold_runtime_create calls it; tests that want the C API's behaviour
// with a fake compiler call it too.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CAPI_COMPOSE_H
#define BITFOLD_CAPI_COMPOSE_H

#include "autotune/RuntimeTuner.h"
#include "runtime/Runtime.h"

#include <memory>
#include <string>

namespace bitfold::capi {

struct TuneDbOptions {
  /// Tune DB file (`bitfold tune`'s tune-db.json) whose winners first
  /// launches use. Empty: none, every shape class gets the default. A
  /// missing file is an empty DB; an unreadable one is warned about once
  /// and ignored. The C API fills it from $BITFOLD_TUNE_DB.
  std::string path;
  /// Tune-on-miss for that DB: off by default; needs a path.
  autotune::TuneOnMissOptions tuneOnMiss;
};

/// A Runtime over `options`; unless options.configSource is set, its
/// config source is the tune DB policy over tuneDb.path (none when empty).
/// Warnings (an unreadable DB, tune-on-miss without a DB) go to the
/// options' warning sink.
std::unique_ptr<runtime::Runtime> makeRuntime(runtime::RuntimeOptions options,
                                              const TuneDbOptions &tuneDb);

} // namespace bitfold::capi

#endif // BITFOLD_CAPI_COMPOSE_H
