//===- capi/CApiInternal.h - C handles <-> C++ runtime --------*- C++ -*-===//
//
// For tests and tools inside bitfold: wrap a C++ Runtime (e.g. one with a
// fake compiler) in a C handle, and get the C++ objects behind handles.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_CAPIINTERNAL_H
#define BITFOLD_RUNTIME_CAPIINTERNAL_H

#include "runtime/bitfold.h"

#include <memory>

namespace bitfold::runtime {

class Runtime;
class Kernel;

/// A C handle owning `runtime` (free it with bitfold_runtime_destroy).
bitfold_runtime *wrapRuntime(std::unique_ptr<Runtime> runtime);
Runtime *unwrapRuntime(bitfold_runtime *runtime);
Kernel *unwrapKernel(bitfold_kernel *kernel);

/// Sets the calling thread's bitfold_last_error() and returns `code`, for C
/// entry points defined outside CApi.cpp.
bitfold_status reportError(bitfold_status code, const char *message);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_CAPIINTERNAL_H
