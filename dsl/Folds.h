//===- dsl/Folds.h - Stock fold orders and combiners -------------*- C++ -*-===//
//
// The fold orders and combiners of the references bitfold reproduces. Each
// one is data / DSL code; see NUMERICS.md for the reference it copies.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_FOLDS_H
#define BITFOLD_DSL_FOLDS_H

#include "dsl/IR.h"

namespace bitfold::dsl::folds {

/// aten's vectorized_layer_norm_kernel: 128 threads, vec4, shfl.down
/// 16..1 in each warp, then warps (0,2) and (1,3), then (0,1).
FoldOrder aten_vectorized_layer_norm();

/// flashinfer's RMSNormKernel for `threadsPerRow` (32 or 64) threads per
/// row: thread tx owns columns 8*tpr*b + 8*tx + v, butterfly xor 1..16 in
/// the warp, then warp0 + warp1 when tpr is 64.
FoldOrder flashinfer_rmsnorm(int threadsPerRow);

/// A plain serial fold: one lane, left to right.
FoldOrder serial();

/// aten's cuWelfordOnlineSum / cuWelfordCombine (fields n, mean, m2).
std::shared_ptr<const Combiner> welford_aten();

/// acc = acc + x*x (mul.rn then add.rn; never fused).
std::shared_ptr<const Combiner> sum_of_squares();

/// acc = acc + x.
std::shared_ptr<const Combiner> sum();

} // namespace bitfold::dsl::folds

#endif // BITFOLD_DSL_FOLDS_H
