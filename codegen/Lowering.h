//===- codegen/Lowering.h - Row program -> MLIR (private) ---------*- C++ -*-===//
//
// Builds one kernel as an MLIR module (llvm.func with nvvm.kernel, body in
// the arith, scf, llvm and nvvm dialects) from a KernelDef, its Plan and the
// fold-knowledge stage's facts (KernelBuilder.h lists the files).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_LOWERING_H
#define BITFOLD_CODEGEN_LOWERING_H

#include "codegen/ExactRewrites.h"
#include "codegen/FoldKnowledge.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace bitfold::codegen {

/// Numbers the lowering reports for the PTX audit.
struct LoweringStats {
  /// fma.rn the lowering emitted (Op::Fma, and inside exp_libdevice), over
  /// all evaluation sites of one thread.
  int64_t fmaWritten = 0;
  /// round(add/sub/mul) emitted as bf16/f16 arithmetic (exact rewrite).
  int64_t narrowArith = 0;
  /// The kernel starts with griddepcontrol.wait (see CompiledKernel).
  bool gridDependencyWait = false;
};

/// What the MLIR-free stages before the lowering found (Codegen.cpp).
struct LoweringFacts {
  Rewrites rewrites;             ///< the "rewrites" stage.
  std::vector<FoldFacts> folds;  ///< the "fold-knowledge" stage, per fold.
};

/// Registers the dialects the lowering and the pass pipeline use.
void loadCodegenDialects(mlir::MLIRContext &ctx);

/// The kernel as MLIR. Never fails for a plan makePlan accepted.
mlir::OwningOpRef<mlir::ModuleOp>
lowerToMLIR(mlir::MLIRContext &ctx, const dsl::KernelDef &def, const Plan &plan,
            const LoweringFacts &facts, llvm::StringRef entryName,
            LoweringStats &stats);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_LOWERING_H
