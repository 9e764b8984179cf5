//===- codegen/Assemble.h - PTX -> cubin tools --------------------*- C++ -*-===//
//
// Public so the runtime can install the driver's linker and tests can ask
// for ptxas by name. Tool choice for compile(): CompileOptions::cubinTool,
// else $BITFOLD_CUBIN_TOOL, else the PTX Compiler API (dlopen
// libbitfold-ptxc.so.0: whole-program, the fewest registers), else nvJitLink
// (dlopen libnvJitLink.so.13), else an installed driver linker, else ptxas
// ($BITFOLD_PTXAS, the CUDA bin dir found at configure time, PATH).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_ASSEMBLE_H
#define BITFOLD_CODEGEN_ASSEMBLE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace bitfold::codegen {

struct AssembledCubin;

/// PTX + arch -> cubin through the CUDA driver (cuLinkCreate ...) at
/// optimisation level `optLevel` (0-3). `log` receives the info log.
using CubinLinker = std::function<llvm::Expected<std::vector<char>>(
    llvm::StringRef ptx, llvm::StringRef arch, int optLevel,
    std::string &log)>;
/// Installs (or, with an empty function, removes) the driver linker.
void setDriverLinker(CubinLinker linker);

/// What toolchainVersion() depends on, found without probing (no dlopen,
/// no process): the build's versions, the environment that picks the
/// tools, and the path, size, mtime and inode of every file nvJitLink's
/// dlopen may load (the configured CUDA library dir, $LD_LIBRARY_PATH, the
/// loader cache, a copy already loaded) and of ptxas. Equal fingerprints
/// give equal toolchainVersion() texts, so the runtime remembers the text
/// per fingerprint and probes only when it changes.
std::string toolchainFingerprint();

/// Path of ptxas, or "" when none is found.
std::string findPtxas();

/// ptxas -v -O`optLevel` as a subprocess.
llvm::Expected<AssembledCubin> assembleWithPtxas(llvm::StringRef ptx,
                                                 llvm::StringRef arch,
                                                 int optLevel = 3);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_ASSEMBLE_H
