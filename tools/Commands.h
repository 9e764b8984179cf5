//===- tools/Commands.h - Subcommands implemented in this folder -*- C++ -*-===//
#ifndef BITFOLD_TOOLS_COMMANDS_H
#define BITFOLD_TOOLS_COMMANDS_H

#include "llvm/Support/raw_ostream.h"

namespace bitfold {
/// Prints the CUDA driver version and each GPU's name and compute
/// capability, or the reason none can be used.
void printDriverInfo(llvm::raw_ostream &out);
} // namespace bitfold

#endif
