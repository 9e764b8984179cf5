//===- dsl/Folds.h - Stock fold orders and combiners -------------*- C++ -*-===//
//
// The fold orders and combiners of the references bitfold reproduces. Each
// one is data / DSL code; see docs/numerics.md for the reference it copies.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_FOLDS_H
#define BITFOLD_DSL_FOLDS_H

#include "dsl/IR.h"

#include <optional>

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

/// One warp's butterfly ("warp_butterfly"): 32 lanes push `vector`-element
/// vectors round-robin, then merge by xor 1, 2, 4, 8, 16 (flashinfer's
/// in-warp order; the zoo's and examples' RMSNorm and softmax folds).
FoldOrder warp_butterfly(int vector);

/// Template arguments of one of aten's reduction kernels (Reduce.cuh):
/// accumulators per thread on the strided path (vt0) and the vector width
/// of the input-vectorized path (input_vec_size).
struct AtenReduceKernel {
  int vt0 = 4;
  int inputVecSize = 4;
};
/// sum and mean (SumOps, MeanOps): (4, 8) for bf16/f16 inputs, else (4, 4).
AtenReduceKernel aten_sum_kernel(DType input);
/// linalg.vector_norm / Tensor.norm (NormTwoOps): (4, 4) for every dtype.
AtenReduceKernel aten_norm_kernel(DType input);

/// setReduceConfig's decisions for a reduction over the innermost,
/// contiguous dimension (`cols` elements, `rows` outputs); docs/aten-reduce.md.
struct AtenReduceConfig {
  int blockWidth = 1;  ///< lanes along the row (block.x).
  int blockHeight = 1; ///< warps on the same row (block.y), 1 if per-row.
  bool vectorized = false; ///< input-vectorized path (cols >= 128).
  int ctas = 1;            ///< CTAs per row (global reduce when > 1).
};
/// The device enters through the split across CTAs only: H200 defaults.
AtenReduceConfig aten_reduce_config(int64_t cols, int64_t rows,
                                    AtenReduceKernel kernel, int numSMs = 132,
                                    int maxThreadsPerSM = 2048);

/// The row class of aten's order for rows of at most 255 * 512 elements:
/// the block shape depends on pow2(rows) below 16 rows and not from 16 on,
/// so the classes are 1, 2 (2..3), 4 (4..7), 8 (8..15) and 16 (16..).
int64_t aten_reduce_row_class(int64_t rows);

/// aten's generic reduction order (Reduce.cuh, torch 2.11) for that shape:
/// valid for every cols >= 1 and rows >= 1 whose input fits 32-bit
/// indexing (fewer than 2^31 bytes), with row r starting at element
/// r * cols of a buffer aligned to the vector (docs/aten-reduce.md). The
/// order's row range is the row class of `rows` (aten_reduce_row_class)
/// when the row is not split across CTAs, else exactly `rows`.
FoldOrder aten_reduce(int64_t cols, int64_t rows, AtenReduceKernel kernel,
                      int numSMs = 132, int maxThreadsPerSM = 2048);

/// The same order in the plain model (FoldOrder::isPlain), where one
/// exists: when every accumulator receives at most one push (the strided
/// path with at most vt0 elements per lane, or the vectorized path with
/// cols % V == 0 and at most one vector per lane), and the combiner is
/// sum-like: push(s, x) = s + g(x) with g(x) exact in f32 (sum; the norm's
/// fma on bf16/f16 inputs, whose squares are exact) and combine a + b.
/// Then aten's serial merge of the accumulators equals one lane pushing in
/// order. The row range is kept. Returns nullopt otherwise.
std::optional<FoldOrder> aten_reduce_plain(int64_t cols, int64_t rows,
                                           AtenReduceKernel kernel,
                                           int numSMs = 132,
                                           int maxThreadsPerSM = 2048);

/// setReduceConfig's decisions when the reduced dim (`cols` elements, of
/// stride S > 1) is not the fastest: `outputs` = N*S outputs, `outputVec`
/// = get_output_vec_size (docs/aten-reduce.md section 9). blockHeight is
/// the block.y threads sharing one output's fold (1 when each folds its
/// own), ctas the CTAs per output; blockWidth is 1 (block.x runs along the
/// outputs: no lanes of one output there).
AtenReduceConfig aten_reduce_outer_config(int64_t cols, int64_t outputs,
                                          int outputVec, int numSMs = 132,
                                          int maxThreadsPerSM = 2048);

/// aten's order for that reduction, as a strided-axis order
/// (FoldOrder::outputVec): lane y + bh*c pushes elements y + bh*c, + L, ...
/// round-robin into vt0 accumulators, then block_y_reduce (and the global
/// reduce when ctas > 1). The row range is `outputs`.. where the block
/// shape stops depending on the output count; below 32 * outputVec,
/// `outputs`'s class (aten_reduce_outer_row_class) where the order is one
/// over it; else exactly `outputs`.
FoldOrder aten_reduce_outer(int64_t cols, int64_t outputs, int outputVec,
                            AtenReduceKernel kernel, int numSMs = 132,
                            int maxThreadsPerSM = 2048);

/// The class of `outputs` pixels within which aten's order for a reduction
/// over a non-fastest dim cannot change: 32 * outputVec for every count
/// from there on (block.x a whole warp; the order's own row range then
/// says where CTA splits start), else lastPow2(outputs / outputVec) *
/// outputVec (block.x threads, which set block.y's). Its smallest count.
int64_t aten_reduce_outer_row_class(int64_t outputs, int outputVec);

/// aten's output_vec_size for S spatial positions of a base aligned to 4
/// elements (the largest of 4, 2, 1 dividing S).
int aten_output_vec_size(int64_t spatial);

/// aten's NormTwoOps with float accumulation: acc = fma(x, x, acc) (nvcc
/// contracts acc + x*x; the H200 probe confirms), combine a + b.
std::shared_ptr<const Combiner> norm_two_aten();

/// aten's cuWelfordOnlineSum / cuWelfordCombine (fields n, mean, m2).
std::shared_ptr<const Combiner> welford_aten();

/// acc = acc + x*x (mul.rn then add.rn; never fused).
std::shared_ptr<const Combiner> sum_of_squares();

/// acc = acc + x.
std::shared_ptr<const Combiner> sum();

} // namespace bitfold::dsl::folds

#endif // BITFOLD_DSL_FOLDS_H
