//===- templates/UserKernels.h - Programs a user adds at run time -*- C++ -*-===//
//
// The one way a user program (built in C++ or parsed from the kernel text
// format) becomes a registry entry, so the C API, the CLI (--program) and
// tune reach it by name exactly like a stock kernel. A program's name must
// not be a stock kernel's; adding the same program twice (same hash) gives
// the entry already there; a different program under a taken name is an
// error. Nothing is registered for a program that fails to parse or verify.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_USERKERNELS_H
#define BITFOLD_TEMPLATES_USERKERNELS_H

#include "templates/Registry.h"

namespace bitfold::templates {

/// Registers `def` as a user kernel in Registry::global().
llvm::Expected<DescriptorRef> addUserKernel(KernelDefRef def);

/// Parses (dsl::parseKernel: errors carry "NAME:line:column") and
/// registers a program text.
llvm::Expected<DescriptorRef> addUserKernelText(llvm::StringRef text,
                                                llvm::StringRef sourceName);

/// Reads, parses and registers a program file.
llvm::Expected<DescriptorRef> addUserKernelFile(llvm::StringRef path);

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_USERKERNELS_H
