//===- capi/Compose.cpp - Build a Runtime with its tune policy -------------===//

#include "capi/Compose.h"

using namespace bitfold;

std::unique_ptr<runtime::Runtime>
capi::makeRuntime(runtime::RuntimeOptions options, const TuneDbOptions &tuneDb) {
  auto warn = runtime::warningSink(options.cache.warn);
  if (!options.configSource && !tuneDb.path.empty()) {
    auto opened =
        autotune::openTuneDbSource(tuneDb.path, warn, tuneDb.tuneOnMiss);
    if (opened)
      options.configSource = std::move(*opened);
    else
      warn("tune DB '" + tuneDb.path + "' not used (every shape class "
           "gets the default config): " + llvm::toString(opened.takeError()));
  }
  if (tuneDb.tuneOnMiss.mode != autotune::TuneOnMissOptions::Off &&
      tuneDb.path.empty())
    warn("tune-on-miss is off: it needs a tune DB file to record winners "
         "in (tune_db or $BITFOLD_TUNE_DB)");
  return std::make_unique<runtime::Runtime>(std::move(options));
}
