//===- keys/Errors.h - Error kinds a caller branches on ----------*- C++ -*-===//
//
// Errors are types, not strings: a caller that must tell failures apart
// checks the kind (`E.errorIsA<BitsDifferError>()`, llvm::handleErrors),
// never the message text. Each kind is an llvm::ErrorInfo subclass of
// BitfoldError carrying its message; one place maps kinds to the CLI's exit
// codes (tools/) and one to the C API's status codes (runtime/Status.h).
// In keys/, the lowest folder every layer includes.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_ERRORS_H
#define BITFOLD_SPEC_ERRORS_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace bitfold::keys {

enum class ErrorKind {
  Usage,      ///< the caller's input is wrong (CLI exit 2).
  BitsDiffer, ///< two configs (or a kernel and its reference) gave
              ///< different bits (CLI exit 3): a codegen bug.
  Compile,    ///< codegen failed.
  Driver,     ///< the CUDA driver is missing or refused.
  Cache,      ///< a cache or tune DB file cannot be read or written.
};

/// The base of every kind: the message, as written.
class BitfoldError : public llvm::ErrorInfo<BitfoldError> {
public:
  static inline char ID = 0;
  explicit BitfoldError(std::string message) : message(std::move(message)) {}
  virtual ErrorKind kind() const = 0;
  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
  std::string message;
};

template <ErrorKind K>
class KindError : public llvm::ErrorInfo<KindError<K>, BitfoldError> {
public:
  static inline char ID = 0;
  using llvm::ErrorInfo<KindError<K>, BitfoldError>::ErrorInfo;
  ErrorKind kind() const override { return K; }
};

using UsageError = KindError<ErrorKind::Usage>;
using BitsDifferError = KindError<ErrorKind::BitsDiffer>;
using CompileError = KindError<ErrorKind::Compile>;
using DriverError = KindError<ErrorKind::Driver>;
using CacheError = KindError<ErrorKind::Cache>;

/// An error of kind `K` saying `message`.
template <ErrorKind K> llvm::Error makeError(const llvm::Twine &message) {
  return llvm::make_error<KindError<K>>(message.str());
}

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_ERRORS_H
