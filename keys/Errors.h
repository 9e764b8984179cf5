//===- keys/Errors.h - Error kinds a caller branches on --------*- C++ -*-===//
//
// Errors are types, not strings: a caller that must tell failures apart
// checks the kind (`E.errorIsA<BitsDifferError>()`, llvm::handleErrors),
// never the message text. Each kind is an llvm::ErrorInfo subclass of
// BitfoldError carrying its message; one place maps kinds to the CLI's exit
// codes (tools/Cli.cpp: exitCodeFor) and one to the C API's status codes
// (capi/CApi.cpp: statusFor).
// In keys/, the lowest folder every layer includes.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_KEYS_ERRORS_H
#define BITFOLD_KEYS_ERRORS_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace bitfold::keys {

enum class ErrorKind {
  Usage,      ///< the caller's input is wrong (CLI exit 2).
  BitsDiffer, ///< two configs (or a kernel and its reference) gave
              ///< different bits (CLI exit 3): a codegen bug.
  Compile,    ///< codegen failed.
  Driver,     ///< the CUDA driver is missing or refused.
  Cache,      ///< a cache or tune DB file cannot be read or written.
  Tune,       ///< a tune timed no config (each config's failure named).
};

/// "usage", "bits differ", ...: for messages and tests.
inline const char *errorKindName(ErrorKind k) {
  switch (k) {
  case ErrorKind::Usage:
    return "usage";
  case ErrorKind::BitsDiffer:
    return "bits differ";
  case ErrorKind::Compile:
    return "compile";
  case ErrorKind::Driver:
    return "driver";
  case ErrorKind::Cache:
    return "cache";
  case ErrorKind::Tune:
    return "tune";
  }
  return "unknown";
}

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
using TuneError = KindError<ErrorKind::Tune>;

/// An error of kind `K` saying `message`.
template <ErrorKind K> llvm::Error makeError(const llvm::Twine &message) {
  return llvm::make_error<KindError<K>>(message.str());
}

/// One constructor per kind, for call sites.
inline llvm::Error usageError(const llvm::Twine &m) {
  return makeError<ErrorKind::Usage>(m);
}
inline llvm::Error bitsDifferError(const llvm::Twine &m) {
  return makeError<ErrorKind::BitsDiffer>(m);
}
inline llvm::Error compileError(const llvm::Twine &m) {
  return makeError<ErrorKind::Compile>(m);
}
inline llvm::Error driverError(const llvm::Twine &m) {
  return makeError<ErrorKind::Driver>(m);
}
inline llvm::Error cacheError(const llvm::Twine &m) {
  return makeError<ErrorKind::Cache>(m);
}
inline llvm::Error tuneError(const llvm::Twine &m) {
  return makeError<ErrorKind::Tune>(m);
}

/// The kind of `e`'s first typed error (nullopt when none is typed).
/// Consumes `e`, appending its whole message to `message` (one line per
/// error). What the CLI's exit-code map and the C API's status map read.
inline std::optional<ErrorKind> takeErrorKind(llvm::Error e,
                                              std::string &message) {
  std::optional<ErrorKind> kind;
  llvm::handleAllErrors(std::move(e), [&](const llvm::ErrorInfoBase &info) {
    if (!message.empty())
      message += "\n";
    message += info.message();
    if (!kind && info.isA<BitfoldError>())
      kind = static_cast<const BitfoldError &>(info).kind();
  });
  return kind;
}

} // namespace bitfold::keys

#endif // BITFOLD_KEYS_ERRORS_H
