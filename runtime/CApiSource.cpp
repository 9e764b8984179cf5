//===- runtime/CApiSource.cpp - Kernels from program text -----------------===//
//
// bitfold_kernel_from_source: the program becomes a registry entry
// (templates/UserKernels.h), then bitfold_template looks it up by name, so
// a user kernel gets the same handle, specialisation and caches as a stock
// one.
//
//===----------------------------------------------------------------------===//

#include "runtime/CApiInternal.h"

#include "templates/UserKernels.h"

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
  auto desc = templates::addUserKernelText(llvm::StringRef(text, length),
                                           "<source>");
  if (!desc)
    return runtime::reportError(BITFOLD_ERROR_INVALID_ARGUMENT,
                                llvm::toString(desc.takeError()).c_str());
  std::string name = (*desc)->name;
  return bitfold_template(runtime, name.c_str(), "", out);
}

} // extern "C"
