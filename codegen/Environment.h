//===- codegen/Environment.h - The variables codegen reads ------*- C++ -*-===//
//
// The one place codegen reads its switches from the environment. Every
// variable read here changes the generated code, so it is also listed in
// keys::codegenEnvVars (keys/CacheKey.cpp), which puts it in every cache key.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_ENVIRONMENT_H
#define BITFOLD_CODEGEN_ENVIRONMENT_H

#include "llvm/ADT/StringRef.h"

#include <cstdlib>
#include <optional>

namespace bitfold::codegen {

/// A switch's setting: "1" on, "0" off; unset or any other value says
/// nothing (the caller's default).
inline std::optional<bool> envSwitch(const char *name) {
  llvm::StringRef v(std::getenv(name));
  if (v == "1")
    return true;
  if (v == "0")
    return false;
  return std::nullopt;
}

/// A switch with a default: only "0" turns a default-on switch off, only "1"
/// turns a default-off one on.
inline bool envFlag(const char *name, bool byDefault) {
  return envSwitch(name).value_or(byDefault);
}

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_ENVIRONMENT_H
