//===- templates/Templates.h - The stock kernels -----------------*- C++ -*-===//
//
// The kernels of docs/numerics.md written in the DSL. Each template states its
// guard: the conditions under which the reference takes the code path it
// copies. Each is registered by name, with its parameters and seed shapes,
// as one descriptor in Templates.cpp (stockKernels(), Registry.h).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_TEMPLATES_H
#define BITFOLD_TEMPLATES_TEMPLATES_H

#include "templates/Registry.h"

#include <optional>

namespace bitfold::templates {

/// 1. F.layer_norm (no affine) then * (1 + scale) + shift, aten order.
/// Inputs x (rows, D); scale, shift per batch (S rows each). Scalar eps.
llvm::Expected<KernelDefRef> lnModulate(DType dtype = DType::BF16);

/// 2. nn.LayerNorm(D <= 128, no affine) on q and k in one launch (2 groups).
llvm::Expected<KernelDefRef> qkLayerNorm(DType dtype = DType::BF16);

/// 3. Conv bias epilogue: rnd(x + b), or rnd(rnd(x + b) + h) with residual.
/// x channels-last (or `layout` channels-first, NC[D]HW); bias (C,) in x's
/// dtype or f32 (cast to x's dtype first); h in x's layout, or channels-
/// first under a channels-last x (`residualLayout`).
llvm::Expected<KernelDefRef>
convBias(DType x, DType bias, bool residual,
         dsl::Layout layout = dsl::Layout::ChannelsLast,
         std::optional<dsl::Layout> residualLayout = std::nullopt);

/// 4. residual + update * gate; gate per element, per batch or global.
enum class GateMap { Full, PerBatch, Global };
llvm::Expected<KernelDefRef> residualGate(DType dtype, GateMap gate);

/// 5. RMSNorm (flashinfer order, threadsPerRow 32 or 64) then
/// * (1 + scale) + shift (aten chain). Inputs x, weight w (per column),
/// scale, shift (per batch). D must be 64 * threadsPerRow.
llvm::Expected<KernelDefRef> rmsNormModulate(int threadsPerRow,
                                             DType dtype = DType::BF16);

/// 6. Wan VAE RMSNorm + SiLU and 7. HF-style RMSNorm: AtenNorms.h.

/// The stock templates' parameters as C++ values, for tests that build
/// many variants; every name-based path uses the registry's text
/// parameters instead.
struct TemplateArgs {
  DType dtype = DType::BF16;
  std::optional<DType> biasDtype; ///< conv_bias; default: dtype.
  bool residual = false;          ///< conv_bias
  GateMap gate = GateMap::Full;   ///< residual_gate
  int64_t cols = 0;               ///< where the definition depends on D.
};
/// Builds stock kernel `name` through its registry descriptor.
llvm::Expected<KernelDefRef> buildStock(llvm::StringRef name,
                                        const TemplateArgs &args);

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_TEMPLATES_H
