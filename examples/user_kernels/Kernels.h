//===- examples/user_kernels/Kernels.h - Four kernels outside templates/ -===//
//
// Each builds the same program as its text file (NAME.bfk): the same
// canonical text, so the same hash, cache entries and kernel.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_EXAMPLES_USER_KERNELS_KERNELS_H
#define BITFOLD_EXAMPLES_USER_KERNELS_KERNELS_H

#include "dsl/IR.h"

namespace user_kernels {

using DefRef = std::shared_ptr<const bitfold::dsl::KernelDef>;

/// h = bf16(x + r); y = bf16(bf16(h * rsqrt(mean(h^2) + eps)) * w).
llvm::Expected<DefRef> addRmsNorm();
/// y = gelu_tanh(bf16(x + bias)): F.gelu(x + bias, approximate="tanh").
llvm::Expected<DefRef> biasGeluTanh();
/// y = gelu_erf(bf16(x + bias)): F.gelu(x + bias).
llvm::Expected<DefRef> biasGeluErf();
/// y = exp(x - max) / sum(exp(x - max)): two dependent folds.
llvm::Expected<DefRef> softmax();

} // namespace user_kernels

#endif
