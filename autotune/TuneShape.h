//===- autotune/TuneShape.h - The one tuner of one shape ---------*- C++
//-*-===//
//
// tuneShape() is the tuner: `bitfold tune` (tools/TuneCommand.cpp) calls it
// per shape of a shapes file, tune-on-miss (RuntimeTuner.cpp) per missed
// shape class, and prebuild's config choice is the config source whose
// tunes it runs. One shape, in order:
//
//   configs   shapeConfigs(): the default first (the bit-identity
//             reference), then every other config of codegen's enumeration
//             that codegen::checkConfig accepts for the shape;
//   runner    the caller's makeRunner (GpuRunner on a GPU, a fake in tests):
//             the problem's upload counts against the budget;
//   search    searchConfigs() with the budget as its deadline. The budget
//             is soft for the first measurement: configs are tried past it
//             until one is timed (the default unless it fails), so a tune
//             never ends with a shape unmeasured because it was large;
//   record    into `db` under `key` when given (TuneDB::record(key,
//             outcome)); the tune policy records under its own lock.
//
// The compiler and the GPU are reached only through the request's compile
// (the runtime's cache and Compiler seam) and its ConfigRunner.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_TUNESHAPE_H
#define BITFOLD_AUTOTUNE_TUNESHAPE_H

#include "autotune/Search.h"
#include "autotune/TuneDB.h"

#include "keys/ShapeSpec.h"
#include "keys/TileConfig.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bitfold::autotune {

/// The configs a tune of one shape times.
struct ShapeConfigs {
  keys::TileConfig defaultConfig;
  /// The default first when it is legal, then the enumeration's other
  /// legal configs.
  std::vector<keys::TileConfig> legal;
  /// "CONFIG: why" of each enumerated config that is not legal here.
  std::vector<std::string> rejected;
};

/// The legal configs of `def` at `spec`, `defaultConfig` first.
ShapeConfigs shapeConfigs(const dsl::KernelDef &def,
                          const keys::ShapeSpec &spec,
                          const keys::TileConfig &defaultConfig);

struct ShapeTuneRequest {
  const dsl::KernelDef *def = nullptr;
  keys::ShapeSpec spec;
  /// The runtime's default (Compiler::defaultConfig, ConfigRequest).
  keys::TileConfig defaultConfig;
  /// Compiles one config (through the runtime's cache and Compiler).
  CompileConfigFn compile;
  /// Makes the runner that times the configs (uploads the problem).
  std::function<llvm::Expected<std::unique_ptr<ConfigRunner>>()> makeRunner;
  /// Repetitions, cut ratio, threads, progress; `deadline` is the budget.
  SearchOptions search;
  /// Where the outcome is recorded, when both are set.
  TuneDB *db = nullptr;
  const TuneKey *key = nullptr;
};

struct ShapeTune {
  size_t legalConfigs = 0;
  std::vector<std::string> rejected; ///< as ShapeConfigs::rejected.
  TuneOutcome outcome;               ///< what the DB records.
  /// Configs that failed to compile, load or time, with the error text.
  std::vector<std::pair<std::string, std::string>> failures;
  size_t skipped = 0; ///< not timed: the budget was spent.
};

/// Tunes one shape (see the file comment). Errors: keys::BitsDifferError
/// when two configs give different bits (a codegen bug), keys::TuneError
/// when no config is legal or none could be timed (each config's failure
/// in the message), and the runner's own errors.
llvm::Expected<ShapeTune> tuneShape(const ShapeTuneRequest &request);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_TUNESHAPE_H
