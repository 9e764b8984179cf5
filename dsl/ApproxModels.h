//===- dsl/ApproxModels.h - per-arch models of approx instructions -*- C++ -*-===//
//
// Chooses how the interpreter evaluates the approximate hardware
// instructions (rcp/rsqrt/ex2.approx.ftz, and expf built on ex2) for a
// target: on sm_90 the captured tables of ApproxTables.h, bit-exact with
// the H200 over all 2^32 inputs; elsewhere the correctly rounded stand-in
// of Interp.h, with a note saying that results may differ from the GPU in
// the last place. docs/approx-models.md says how to capture another arch.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_APPROXMODELS_H
#define BITFOLD_DSL_APPROXMODELS_H

#include "dsl/ApproxTables.h"
#include "dsl/Interp.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace bitfold::dsl {

/// The approximation model for one target.
struct ApproxChoice {
  const ApproxUnit *unit = nullptr; ///< never null.
  bool exact = false;               ///< bit-exact with the target's hardware.
  std::string note;                 ///< for the user when !exact.
};

/// `arch` is the codegen target ("sm_90", "sm_90a", "sm_100", ...).
ApproxChoice approxForArch(llvm::StringRef arch);

/// The sm_90 model. Fails when the embedded tables do not decode to the
/// captured checksums (or LLVM was built without zstd).
llvm::Expected<const ApproxUnit &> sm90Approx();

/// One decoded sm_90 table (its uint32 entries), loaded on first use.
llvm::Expected<const std::vector<uint32_t> &> sm90Table(approx::Table t);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_APPROXMODELS_H
