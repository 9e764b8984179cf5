//===- codegen/Lowering.h - Row program -> MLIR (private) ---------*- C++ -*-===//
//
// Builds one kernel as an MLIR module (llvm.func with nvvm.kernel, body in
// the arith, scf, llvm and nvvm dialects) from a KernelDef and its Plan.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_LOWERING_H
#define BITFOLD_CODEGEN_LOWERING_H

#include "codegen/Plan.h"

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

/// Registers the dialects the lowering and the pass pipeline use.
void loadCodegenDialects(mlir::MLIRContext &ctx);

/// The kernel as MLIR. Never fails for a plan makePlan accepted.
mlir::OwningOpRef<mlir::ModuleOp>
lowerToMLIR(mlir::MLIRContext &ctx, const dsl::KernelDef &def, const Plan &plan,
            llvm::StringRef entryName, LoweringStats &stats);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_LOWERING_H
