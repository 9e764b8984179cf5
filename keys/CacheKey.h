//===- keys/CacheKey.h - Everything that determines a cubin ------*- C++ -*-===//
//
// The kernel cache's key: the program (name, hash of its canonical text),
// the ShapeSpec, the TileConfig, the target arch, every CompileOptions field
// (CompileOptions::keyText), the bitfold and LLVM versions, the PTX -> cubin
// toolchain, the CUDA libdevice bitcode codegen embeds, and the environment
// variables that change generated code (an explicit allow-list:
// codegenEnvVars()). makeCacheKey() is the one place that builds it;
// launchCompile() wraps it with the options a launch compiles with
// (launchOptions()), and the runtime's launch path, `bitfold tune` and
// `bitfold prebuild` (a GPU-less offline cache build) all use those, so a
// cubin they write is the entry a later launch looks up.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_CACHEKEY_H
#define BITFOLD_SPEC_CACHEKEY_H

#include "keys/CompileOptions.h"
#include "keys/ShapeSpec.h"
#include "keys/TileConfig.h"

#include "dsl/IR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace bitfold::keys {

/// Version of the key text (its first line); bumped when the text changes.
constexpr int kCacheKeyFormat = 3;

struct CacheKey {
  std::string kernelName;  ///< for humans (`bitfold cache ls`).
  std::string kernelHash;  ///< KernelDef::hash (SHA-256 of canonical text).
  std::string shape;       ///< ShapeSpec::str().
  std::string config;      ///< TileConfig::str().
  std::string arch;        ///< "sm_90".
  std::string options;     ///< CompileOptions::keyText().
  std::string bitfoldVersion;
  std::string codegenRevision; ///< codegenRevision(): this build's codegen.
  std::string llvmVersion;
  std::string toolchain;   ///< codegen::toolchainVersion().
  std::string libdevice;   ///< libdeviceIdentity().
  std::string environment; ///< codegenEnvironment().

  /// The full key text, one "field: value" line each; stored in entries.
  std::string text() const;
  /// Hex SHA-256 of text(): the entry's file name.
  std::string hash() const;
};

/// The key of `def` compiled for `shape` under `config` and `options` by
/// `toolchain` (codegen::toolchainVersion()) in this environment.
CacheKey makeCacheKey(const dsl::KernelDef &def, const ShapeSpec &shape,
                      const TileConfig &config, const CompileOptions &options,
                      llvm::StringRef toolchain);

/// This build's codegen: the first 16 hex digits of a SHA-256 over every
/// source under codegen/, dsl/ and keys/ (cmake/CodegenRevision.cmake).
/// In every key, so that another build of the same version never serves
/// its kernels from a shared cache.
llvm::StringRef codegenRevision();

/// The CUDA libdevice bitcode codegen links for logf/tanhf/erff
/// (codegen/LinkLibdevice.h): "sha256:<hex>" of the file embedded at build
/// time. In every key, whether or not the program calls libdevice.
llvm::StringRef libdeviceIdentity();

/// The options a launch on a GPU of `arch` compiles with: the arch and
/// programmatic dependent launch when `pdl`; every other field default.
/// `fastCompile`: the shortest compile, same bits: rows rolled into loops
/// (CompileOptions::rollRows) and assembled at ptxas -O0 (about a third less
/// assembler time, kernels 2-9x slower on an H200): the runtime's
/// quick-first kernels in synchronous mode, whose caller waits for that
/// compile and which serve only while the chosen config compiles
/// (runtime/README.md).
CompileOptions launchOptions(llvm::StringRef arch, bool pdl,
                             bool fastCompile = false);

/// What a launch of shape class `cls` compiles and looks up.
struct LaunchCompile {
  ShapeSpec shape;        ///< cls.shapeSpec(): rows never enter the key.
  CompileOptions options; ///< the arch and PDL; every other field default.
  CacheKey key;
};

/// The compile (and its key) of `def` for a launch of shape class `cls`
/// with `config` on a GPU of `arch`, with programmatic dependent launch
/// when `pdl`, by `toolchain`. The runtime calls it on a launch's first
/// miss; `bitfold tune` and `bitfold prebuild` call it to write the entries
/// such a launch finds.
LaunchCompile launchCompile(const dsl::KernelDef &def, const ShapeClass &cls,
                            const TileConfig &config, llvm::StringRef arch,
                            bool pdl, llvm::StringRef toolchain);

/// The environment variables that change generated code (codegen reads
/// them): the only ones that enter cache keys. Every other variable, the
/// runtime's own (BITFOLD_CACHE_DIR, BITFOLD_QUIET, BITFOLD_TUNE_DB...) and
/// the bindings' (BITFOLD_LIB) included, stays out.
llvm::ArrayRef<const char *> codegenEnvVars();

/// "NAME=value\n" for each set variable of codegenEnvVars(), in list order.
std::string codegenEnvironment();

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_CACHEKEY_H
