//===- runtime/Status.h - Errors that carry a C API status code -*- C++ -*-===//
//
// Inside the runtime, failures are llvm::Error. A RuntimeError also carries
// the bitfold_status the C API returns for it; any other llvm::Error maps to
// BITFOLD_ERROR_INTERNAL.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_STATUS_H
#define BITFOLD_RUNTIME_STATUS_H

#include "runtime/bitfold.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace bitfold::runtime {

class RuntimeError : public llvm::ErrorInfo<RuntimeError> {
public:
  static char ID;
  RuntimeError(bitfold_status code, std::string message)
      : code(code), message(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
  bitfold_status code;
  std::string message;
};

inline llvm::Error runtimeError(bitfold_status code, const llvm::Twine &msg) {
  return llvm::make_error<RuntimeError>(code, msg.str());
}

/// Prefixes the message of `e` (keeping its code).
llvm::Error withContext(llvm::Error e, const llvm::Twine &prefix);

/// Installs LLVM's fatal-error and bad-alloc handlers, once per process
/// (bitfold_runtime_create calls it). LLVM does not allow recovery from
/// either: after the fatal-error handler returns LLVM exits(1); the
/// bad-alloc handler must not return, so it aborts itself; and throwing
/// through LLVM's frames is unsafe. So
/// the handlers only make the end explicit and attributable: "bitfold:
/// fatal error in LLVM: <reason>" on stderr, instead of a bare abort. The
/// runtime's real defence is never to reach them: inputs LLVM would die on
/// (a GPU below the minimum compute capability, a bad arch) are refused
/// before codegen with a status.
void installLlvmErrorHandlers();

/// Consumes `e`; returns its code and stores its message in `message`.
bitfold_status takeStatus(llvm::Error e, std::string &message);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_STATUS_H
