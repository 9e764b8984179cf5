//===- keys/TuneKey.h - What a tuning result is keyed on ---------*- C++ -*-===//
//
// A tune DB entry is keyed on the kernel (hash of its canonical text), its
// shape class (ShapeClass::str(), rows bucketed: "c4096.a16-16-16-16.o32/
// r4096"), the operand dtypes, and the environment it was tuned in (GPU
// name, arch, bitfold, LLVM and PTX -> cubin toolchain versions). An entry
// is only used under the same environment. tuneKeyFor() is the one builder:
// the tuner records under it and the policy (the runtime's config source)
// looks up with it.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_TUNEKEY_H
#define BITFOLD_SPEC_TUNEKEY_H

#include "dsl/IR.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace bitfold::keys {

/// Where a tuning ran: a DB entry is only used under the same environment.
struct TuneEnvironment {
  std::string gpuName;   ///< cuDeviceGetName, e.g. "NVIDIA H200".
  std::string arch;      ///< "sm_90".
  std::string bitfoldVersion;
  std::string llvmVersion;
  std::string toolchain; ///< codegen::toolchainVersion().
  bool operator==(const TuneEnvironment &) const = default;
  /// Empty when equal; else why `this` (the entry's) differs from `current`,
  /// e.g. "tuned on GPU 'NVIDIA A100' (sm_80), this is 'NVIDIA H200' (sm_90)".
  std::string mismatch(const TuneEnvironment &current) const;
};

/// What was tuned, and where.
struct TuneKey {
  std::string kernelName;  ///< for humans; not part of the identity.
  std::string kernelHash;  ///< KernelDef::hash.
  std::string shapeClass;  ///< ShapeClass::str(), rows bucketed.
  std::string dtypes;      ///< "x:bf16,scale:bf16,...", operand order.
  TuneEnvironment env;

  /// The identity without the environment: what a lookup asks for.
  std::string problemText() const;
  /// The full identity, one "field: value" line each (sort order of the DB).
  std::string text() const;
};

/// "x:bf16,scale:bf16,...": the operands' dtypes in KernelDef order.
std::string dtypesText(const dsl::KernelDef &def);

/// The environment a DB entry is tuned under / looked up in on this build:
/// the GPU's name and arch, this bitfold and LLVM, `toolchain`
/// (codegen::toolchainVersion()).
TuneEnvironment currentEnvironment(llvm::StringRef gpuName,
                                   llvm::StringRef arch,
                                   llvm::StringRef toolchain);

/// The tune DB key of `def` in shape class `shapeClass`
/// (ShapeClass::str(), rows bucketed) under `env`.
TuneKey tuneKeyFor(const dsl::KernelDef &def, llvm::StringRef shapeClass,
                   const TuneEnvironment &env);

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_TUNEKEY_H
