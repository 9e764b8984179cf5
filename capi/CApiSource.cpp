//===- capi/CApiSource.cpp - Kernels from program text -----------------===//
//
// bitfold_kernel_from_source: the program becomes a registry entry
// (templates/UserKernels.h), then bitfold_kernel_from_registry looks it up by
// name, so a user kernel gets the same handle, specialisation and caches as a
// stock one.
//
//===----------------------------------------------------------------------===//

#include "capi/CApiInternal.h"

#include "templates/UserKernels.h"

#include <new>
#include <string>

using namespace bitfold;

extern "C" {

BITFOLD_API bitfold_status bitfold_kernel_from_source(bitfold_runtime *runtime,
                                                      const char *text,
                                                      size_t length,
                                                      bitfold_kernel **out) {
  if (out)
    *out = nullptr;
  const char *missing = !runtime ? "runtime" : !text ? "text" : !out ? "out"
                                                                     : nullptr;
  if (missing)
    return runtime::reportError(
        BITFOLD_ERROR_INVALID_ARGUMENT,
        (std::string("bitfold_kernel_from_source: ") + missing + " is NULL")
            .c_str());
  std::string name, error;
  try { // nothing may cross the C ABI (the registry lookup guards itself)
    auto desc = templates::addUserKernelText(llvm::StringRef(text, length),
                                             "<source>");
    if (desc)
      name = (*desc)->name;
    else
      error = llvm::toString(desc.takeError());
  } catch (const std::bad_alloc &) {
    return runtime::reportError(BITFOLD_ERROR_INTERNAL,
                                "bitfold_kernel_from_source: out of memory");
  } catch (...) {
    return runtime::reportError(BITFOLD_ERROR_INTERNAL,
                                "bitfold_kernel_from_source: unexpected "
                                "exception");
  }
  if (!error.empty())
    return runtime::reportError(BITFOLD_ERROR_INVALID_ARGUMENT, error.c_str());
  return bitfold_kernel_from_registry(runtime, name.c_str(), "", out);
}

} // extern "C"
