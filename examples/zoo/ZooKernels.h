//===- examples/zoo/ZooKernels.h - Zoo kernels in the C++ DSL ---*- C++ -*-===//
//
// A few zoo kernels written with the C++ DSL (dsl/IR.h) instead of the
// text format. Each builds the same kernel as its .bfk file: the same
// canonical text, so the same hash, PTX and cache entries
// (tests/dsl/ZooCppTest.cpp checks; the install test builds one of them
// against the installed package).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_EXAMPLES_ZOO_ZOOKERNELS_H
#define BITFOLD_EXAMPLES_ZOO_ZOOKERNELS_H

#include "dsl/IR.h"

#include <memory>

namespace zoo {

using DefRef = std::shared_ptr<const bitfold::dsl::KernelDef>;

/// fused_add_rms_norm.bfk: vLLM's fused_add_rms_norm, in place.
llvm::Expected<DefRef> fusedAddRmsNorm();
/// silu_and_mul_fp8.bfk: SiluAndMul, then static per-tensor fp8 quant.
llvm::Expected<DefRef> siluAndMulFp8();
/// rope_interleaved.bfk: GPT-J (interleaved) rotary embedding.
llvm::Expected<DefRef> ropeInterleaved();
/// layer_norm_stats2.bfk: LayerNorm with (mean, rstd) as one [rows, 2].
llvm::Expected<DefRef> layerNormStats2();

} // namespace zoo

#endif // BITFOLD_EXAMPLES_ZOO_ZOOKERNELS_H
