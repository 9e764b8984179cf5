//===- templates/Templates.h - The stock kernels -----------------*- C++ -*-===//
//
// The kernels of NUMERICS.md written in the DSL, and a registry that maps a
// template name plus its parameters to a verified KernelDef. Each template
// states its guard: the conditions under which the reference takes the code
// path it copies.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_TEMPLATES_H
#define BITFOLD_TEMPLATES_TEMPLATES_H

#include "dsl/IR.h"

#include <map>

namespace bitfold::templates {

using dsl::DType;
using KernelDefRef = std::shared_ptr<const dsl::KernelDef>;

/// 1. F.layer_norm (no affine) then * (1 + scale) + shift, aten order.
/// Inputs x (rows, D); scale, shift per batch (S rows each). Scalar eps.
llvm::Expected<KernelDefRef> lnModulate(DType dtype = DType::BF16);

/// 2. nn.LayerNorm(D <= 128, no affine) on q and k in one launch (2 groups).
llvm::Expected<KernelDefRef> qkLayerNorm(DType dtype = DType::BF16);

/// 3. Conv bias epilogue: rnd(x + b), or rnd(rnd(x + b) + h) with residual.
/// x channels-last; bias (C,) in x's dtype or f32 (cast to x's dtype first).
llvm::Expected<KernelDefRef> convBias(DType x, DType bias, bool residual);

/// 4. residual + update * gate; gate per element, per batch or global.
enum class GateMap { Full, PerBatch, Global };
llvm::Expected<KernelDefRef> residualGate(DType dtype, GateMap gate);

/// 5. RMSNorm (flashinfer order, threadsPerRow 32 or 64) then
/// * (1 + scale) + shift (aten chain). Inputs x, weight w (per column),
/// scale, shift (per batch). D must be 64 * threadsPerRow.
llvm::Expected<KernelDefRef> rmsNormModulate(int threadsPerRow,
                                             DType dtype = DType::BF16);

/// 6. Wan VAE F.silu(F.normalize(x, dim=1) * C**0.5 * gamma + bias),
/// channels-last rows. NOT bit-exact yet: aten's reduction order for the
/// norm is not derived; this template uses a serial fma order as a stand-in.
llvm::Expected<KernelDefRef> wanRmsNormSilu(DType dtype = DType::BF16);

/// Template parameters as the CLI and the C API name them.
struct TemplateArgs {
  DType dtype = DType::BF16;
  DType biasDtype = DType::BF16; ///< conv_bias
  bool residual = false;         ///< conv_bias
  GateMap gate = GateMap::Full;  ///< residual_gate
  int64_t cols = 0;              ///< needed where the fold order depends on D.
};

struct TemplateInfo {
  std::string name;
  std::string summary;
  bool bitExact; ///< reproduces its reference bit for bit.
  std::function<llvm::Expected<KernelDefRef>(const TemplateArgs &)> build;
};

/// All templates, by name (ln_modulate, qk_layernorm, conv_bias,
/// residual_gate, rmsnorm_modulate, wan_rmsnorm_silu).
const std::vector<TemplateInfo> &allTemplates();
const TemplateInfo *findTemplate(llvm::StringRef name);

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_TEMPLATES_H
