//===- codegen/PtxAudit.h - Check the bit-exactness rules on PTX --*- C++ -*-===//
//
// The rules of docs/design.md ("Invariants", numerics), checked on PTX text:
//  - every fp32 add/sub/mul is .rn (ptxas never fuses .rn ops);
//  - fma.rn.f32 appears only where the program wrote fma: the PTX holds at
//    most as many as the optimized LLVM IR has llvm.fma calls (the backend
//    may remove one exactly, dead or fma(x, 1, y) -> add, never create
//    one), the optimizer only removed some of the ones the lowering emitted
//    (fmaAfterOpt <= fmaBeforeOpt == fmaWritten), and no fast-math flag or
//    fmuladd exists that would let LLVM create one;
//  - .ftz only on rcp/rsqrt/ex2.approx.ftz.f32 and sub.rn.ftz.f32 (the
//    latter only in programs that wrote sub_ftz);
//  - fp32 div and sqrt are div.rn.f32 / sqrt.rn.f32;
//  - every conversion to bf16/f16 is cvt.rn (no .relu/.sat);
//  - half-precision arithmetic only where the lowering wrote the exact
//    round(add/sub/mul of narrow values) rewrite, and then only add, sub,
//    mul .rn, never .ftz/.sat/.relu.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_PTXAUDIT_H
#define BITFOLD_CODEGEN_PTXAUDIT_H

#include "codegen/Codegen.h"

namespace bitfold::codegen {

struct PtxCounts {
  int64_t instructions = 0;
  int64_t addRn = 0, subRn = 0, mulRn = 0; ///< .rn f32 forms
  int64_t fmaRn = 0;                        ///< fma.rn.f32
  int64_t fmaRm = 0;                        ///< fma.rm.f32 (exp_libdevice)
  int64_t cvtRnHalf = 0;                    ///< cvt.rn.{bf16,f16}[x2].f32
  int64_t shuffles = 0, barriers = 0;
  int64_t vectorLoads = 0, vectorStores = 0; ///< ld/st .global.v2/.v4
};

/// What the program itself allows.
struct PtxAllowances {
  bool subFtz = false;     ///< the program wrote sub_ftz.
  bool expLibdevice = false;
};

PtxCounts countPtx(llvm::StringRef ptx);

/// Every rule above; the error lists each violation with its PTX line.
llvm::Error auditPtx(const CompiledKernel &kernel, const PtxAllowances &allow);

/// What the program's DAG (all bodies included) uses.
PtxAllowances allowancesOf(const dsl::KernelDef &def);

/// Parses ptxas -v output: registers used and spill bytes (stores + loads).
struct PtxasUsage {
  int registers = -1;
  int64_t spillBytes = 0;
  int64_t stackBytes = 0;
};
PtxasUsage parsePtxasLog(llvm::StringRef log);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_PTXAUDIT_H
