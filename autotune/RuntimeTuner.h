//===- autotune/RuntimeTuner.h - The tune DB as a runtime config source -*- C++ -*-===//
//
// What a composition root (capi/Compose.h, the CLI's prebuild) calls to
// give a Runtime the tune DB policy: the runtime itself never names
// autotune. Tunes on a miss run through the request's compile (the
// runtime's cache and Compiler) and time configs on the request's GPU
// (GpuRunner over cuda/).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_RUNTIMETUNER_H
#define BITFOLD_AUTOTUNE_RUNTIMETUNER_H

#include "policy/ConfigSource.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>

namespace bitfold::autotune {

/// Tuning of shape classes the tune DB does not have, for the runtime's
/// tune DB source. Off by default. Every config gives the same bits, so
/// tuning changes speed only.
struct TuneOnMissOptions {
  enum Mode {
    Off,        ///< the heuristic default; never tunes.
    Background, ///< the default at once; configs timed on a background
                ///< thread on the same GPU; later launches of the class
                ///< use the winner, which is written to the tune DB file.
    Now,        ///< the first launch of the class tunes, then launches.
  } mode = Off;
  /// Wall time all tunes of a runtime may take together; once spent,
  /// missed classes get the default. <= 0: unlimited.
  double budgetSeconds = 60;
  /// Wall time of one tune (configs not timed by then are skipped).
  double perTuneSeconds = 10;
};

/// A source over the tune DB file `path`: its winner for the launch's
/// kernel, shape class and environment, else the default (one warning per
/// stale or illegal entry through `warn`). With tuneOnMiss off it never
/// tunes or blocks; otherwise missed classes are tuned on the GPU as the
/// mode says, winners persisted to `path` (temp file + rename). Fails when
/// the file exists but cannot be read.
llvm::Expected<std::unique_ptr<policy::ConfigSource>>
openTuneDbSource(llvm::StringRef path,
                 std::function<void(llvm::StringRef)> warn,
                 const TuneOnMissOptions &tuneOnMiss = {});
} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_RUNTIMETUNER_H
