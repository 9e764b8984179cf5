//===- runtime/Status.cpp - Errors that carry a C API status code ---------===//

#include "runtime/Status.h"

#include "llvm/Support/ErrorHandling.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

using namespace bitfold::runtime;

char RuntimeError::ID = 0;

namespace {

void report(const char *kind, const char *reason) {
  // No allocation: the heap may be what failed.
  std::fprintf(stderr, "bitfold: %s in LLVM: %s\n", kind,
               reason ? reason : "(no reason given)");
  std::fflush(stderr);
}

void onFatalError(void *, const char *reason, bool) {
  report("fatal error", reason);
}

// LLVM treats a returning bad-alloc handler as unreachable (LLVM 22 traps
// right after the call), so this one ends the process itself, as LLVM does
// without a handler.
[[noreturn]] void onBadAlloc(void *, const char *reason, bool) {
  report("out of memory", reason);
  std::abort();
}

} // namespace

void bitfold::runtime::installLlvmErrorHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::install_fatal_error_handler(onFatalError);
    llvm::install_bad_alloc_error_handler(onBadAlloc);
  });
}

llvm::Error bitfold::runtime::withContext(llvm::Error e,
                                          const llvm::Twine &prefix) {
  std::string msg;
  bitfold_status code = takeStatus(std::move(e), msg);
  return runtimeError(code, prefix + msg);
}

bitfold_status bitfold::runtime::takeStatus(llvm::Error e,
                                            std::string &message) {
  if (!e) {
    message.clear();
    return BITFOLD_SUCCESS;
  }
  bitfold_status code = BITFOLD_ERROR_INTERNAL;
  message.clear();
  llvm::handleAllErrors(
      std::move(e),
      [&](const RuntimeError &r) {
        if (!message.empty())
          message += "\n";
        message += r.message;
        code = r.code;
      },
      [&](const llvm::ErrorInfoBase &other) {
        if (!message.empty())
          message += "\n";
        message += other.message();
      });
  return code;
}
