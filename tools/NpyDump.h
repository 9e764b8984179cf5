//===- tools/NpyDump.h - interp --dump: operands as .npy files --*- C++ -*-===//
#ifndef BITFOLD_TOOLS_NPYDUMP_H
#define BITFOLD_TOOLS_NPYDUMP_H

#include "templates/Problem.h"

namespace bitfold::tools {

/// Writes every operand of every group of `problem` as a [rows, cols] .npy
/// file in `dir` (created): NAME.npy, or gG.NAME.npy when the program has
/// several groups. f32 and f16 as themselves, bf16 as uint16 bits.
llvm::Error dumpOperandsAsNpy(const dsl::KernelDef &def,
                              const templates::HostProblem &problem,
                              llvm::StringRef dir);

} // namespace bitfold::tools

#endif // BITFOLD_TOOLS_NPYDUMP_H
