//===- runtime/Status.cpp - Errors that carry a C API status code ---------===//

#include "runtime/Status.h"

using namespace bitfold::runtime;

char RuntimeError::ID = 0;

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
