//===- dsl/Limits.h - What a program's header admits ------------*- C++ -*-===//
//
// The tensor-group limit the verifier enforces (the launch structures are
// fixed size: keys::KernelABI asserts it agrees) and the column guard
// check every consumer of a shape applies (the interpreter's host problems,
// codegen's plan).
//
//===----------------------------------------------------------------------===//

#ifndef BITFOLD_DSL_LIMITS_H
#define BITFOLD_DSL_LIMITS_H

#include "llvm/Support/Error.h"

#include <cstdint>

namespace bitfold::dsl {

struct KernelDef;

/// Most tensor groups one launch serves.
constexpr int kMaxTensorGroups = 4;

/// Whether `cols` passes the program's column guard (cols % m == 0 and
/// min <= cols <= max); the error states the guard and the count.
llvm::Error checkColumnGuard(const KernelDef &def, int64_t cols);

} // namespace bitfold::dsl

#endif
