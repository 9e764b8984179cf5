//===- capi/CApiInternal.h - C handles <-> C++ runtime --------*- C++ -*-===//
//
// For tests and tools inside bitfold: wrap a C++ Runtime (e.g. one with a
// fake compiler) in a C handle, and get the C++ objects behind handles.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_CAPIINTERNAL_H
#define BITFOLD_RUNTIME_CAPIINTERNAL_H

#include "runtime/bitfold.h"

#include "keys/Errors.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace bitfold::runtime {

class Runtime;
class Kernel;

/// A C handle owning `runtime` (free it with bitfold_runtime_destroy).
bitfold_runtime *wrapRuntime(std::unique_ptr<Runtime> runtime);
Runtime *unwrapRuntime(bitfold_runtime *runtime);
Kernel *unwrapKernel(bitfold_kernel *kernel);

/// The C status of an error kind (keys/Errors.h), the C API's one map:
/// usage -> INVALID_ARGUMENT, compile -> COMPILE, driver -> CUDA, bits
/// differ / cache / tune -> INTERNAL.
bitfold_status statusFor(keys::ErrorKind kind);
/// Consumes `e`: statusFor its first typed error, else the code of a
/// RuntimeError (runtime/Status.h), else INTERNAL; its message goes to
/// `message`. Every entry point's failure goes through it.
bitfold_status takeCStatus(llvm::Error e, std::string &message);

/// Sets the calling thread's bitfold_last_error() and returns `code`, for C
/// entry points defined outside CApi.cpp.
bitfold_status reportError(bitfold_status code, const char *message);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_CAPIINTERNAL_H
