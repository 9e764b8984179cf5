//===- codegen/LinkLibdevice.h - libdevice into the LLVM module --*- C++ -*-===//
//
// The ops nvcc computes with CUDA's libdevice (logf, tanhf, erff) lower to
// calls of its __nv_* functions (EmitOps.cpp); this step links their
// bodies from the bitcode embedded at build time (cmake/Libdevice.cmake)
// into the translated module, before O3. A module that calls none is left
// untouched, so kernels without such ops keep their exact PTX.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_LINKLIBDEVICE_H
#define BITFOLD_CODEGEN_LINKLIBDEVICE_H

#include "codegen/Codegen.h"

#include "llvm/IR/Module.h"

namespace bitfold::codegen {

/// Links the __nv_* functions `m` declares, with nvcc's reflect settings
/// (__CUDA_FTZ=0, __CUDA_PREC_SQRT=1 as module flags, which LLVM's
/// NVVMReflect reads in O3), inlines them at every call and counts their
/// fma.rn into `ir.fmaWritten` (the PTX audit's fma budget).
llvm::Error linkLibdevice(llvm::Module &m, CompiledKernel::IRFacts &ir);

/// The embedded bitcode (libdevice.10.bc of the build's CUDA toolkit).
llvm::StringRef embeddedLibdevice();

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_LINKLIBDEVICE_H
