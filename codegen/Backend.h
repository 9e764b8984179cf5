//===- codegen/Backend.h - LLVM IR -> PTX -> cubin (private) -----*- C++ -*-===//
//
// LLVM-only and process-only stages of the driver, kept out of the MLIR
// translation units.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_BACKEND_H
#define BITFOLD_CODEGEN_BACKEND_H

#include "codegen/Codegen.h"

#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"

#include <functional>
#include <memory>

namespace bitfold::codegen {

/// NVPTX target machine for `arch` (sm_80, sm_90, sm_100 ...): IEEE
/// denormals, FP contraction off (FPOpFusion::Strict), O3.
llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createNVPTXTargetMachine(llvm::StringRef arch);

/// LLVM's default O3 pipeline with the NVPTX target's own passes.
void optimizeModule(llvm::Module &m, llvm::TargetMachine &tm);

/// NVPTX code generation to PTX text.
llvm::Expected<std::string> emitPTX(llvm::Module &m, llvm::TargetMachine &tm);

/// What the PTX audit needs to know about an LLVM module.
/// fmaFoldable: fma calls with at least two constant-like operands, which
/// the NVPTX backend may fold exactly (fma(1, 1, -1) = 0 ...).
void countIRFacts(const llvm::Module &m, int64_t &fmaCalls,
                  int64_t &fmaFoldable, bool &contractionAllowed);

struct AssembledCubin {
  std::vector<char> cubin;
  std::string tool; ///< "ptxcompiler", "nvJitLink", "driver" or "ptxas".
  std::string log;  ///< the assembler's verbose output (ptxas -v).
};

/// PTX -> cubin. `tool` empty: the PTX Compiler API when
/// libbitfold-ptxc.so.0 loads, else nvJitLink when libnvJitLink.so.13 loads,
/// else the driver hook when set, else ptxas. `optLevel`: ptxas -O (0-3).
llvm::Expected<AssembledCubin> assemble(llvm::StringRef ptx,
                                        llvm::StringRef arch,
                                        llvm::StringRef tool,
                                        int optLevel = 3);

/// Every tool found, the default first: "PTX Compiler API 13.0 (<its
/// build>); nvJitLink 13.0; ptxas <version line>" (cached).
std::string assemblerVersion();

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_BACKEND_H
