//===- policy/ConfigSource.h - Where a launch's config comes from -*- C++ -*-===//
//
// The seam between the runtime and tuning. On the first launch of a shape
// class without a pinned config, the runtime asks its ConfigSource for the
// TileConfig; the answer becomes part of the specialisation, so later
// launches of the class never ask again (the warm path stays one hash
// lookup). autotune's TunePolicy (autotune/Policy.h) implements it over a
// tune DB; the runtime includes and links nothing from autotune/: whoever
// builds a Runtime (the C API, capi/Compose.h; the CLI) passes the source
// in RuntimeOptions::configSource.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_POLICY_CONFIGSOURCE_H
#define BITFOLD_POLICY_CONFIGSOURCE_H

#include "keys/ShapeSpec.h"
#include "keys/TileConfig.h"

#include "codegen/Codegen.h"

#include "dsl/IR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>

namespace bitfold::policy {

/// What the runtime knows when a shape class needs a config.
struct ConfigRequest {
  std::shared_ptr<const dsl::KernelDef> def;
  keys::ShapeClass shapeClass; ///< rows bucketed (bucketsRows() was true).
  std::string gpuName;         ///< "NVIDIA H200".
  int device = 0;              ///< CUDA ordinal of the launch.
  std::string arch;            ///< "sm_90".
  std::string toolchain;       ///< codegen::toolchainVersion().
  keys::TileConfig defaultConfig;
  /// Why a config is not legal for this shape (codegen::checkConfig), or
  /// success. Valid during configFor() only.
  std::function<llvm::Error(const keys::TileConfig &)> check;
  /// Compiles a config for this kernel and class through the runtime's
  /// cache, with the key a launch of it uses. Owns what it needs: valid
  /// after configFor() returns, while the runtime lives (a tuner runs it
  /// on its own threads).
  std::function<llvm::Expected<codegen::CompiledKernel>(
      const keys::TileConfig &)>
      compile;
};

struct ConfigAnswer {
  keys::TileConfig config;
  /// Where it came from, for logs: "tune DB", "default (stale DB entry)"...
  std::string from;
  /// The answer may change: a background tune of this class is running.
  /// The runtime asks again once generation() has moved.
  bool provisional = false;
};

class ConfigSource {
public:
  virtual ~ConfigSource() = default;
  /// Thread safe. Never fails: a source without an answer returns the
  /// request's default.
  virtual ConfigAnswer configFor(const ConfigRequest &request) = 0;
  /// Whether answers depend on the row count (then the runtime keys
  /// specialisations by row bucket too).
  virtual bool bucketsRows() const { return true; }
  /// Moves whenever an earlier provisional answer may have changed (a
  /// background tune recorded its winner). Thread safe, cheap.
  virtual uint64_t generation() const { return 0; }
};

} // namespace bitfold::policy

#endif // BITFOLD_POLICY_CONFIGSOURCE_H
