//===- templates/AtenNorms.h - Norms in aten's reduction order ---*- C++ -*-===//
//
// Eager norm modules whose statistics come from aten's generic reduction
// (Reduce.cuh), reproduced with folds::aten_reduce: the Wan VAE RMSNorm +
// SiLU (both eager forms in use) and the HF-style RMSNorm. The order depends
// on the row count only below 16 rows (docs/aten-reduce.md section 2): a
// definition built for `rows` serves its row class (1, 2..3, 4..7, 8..15 or
// every count from 16 on; folds::aten_reduce_row_class).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_ATENNORMS_H
#define BITFOLD_TEMPLATES_ATENNORMS_H

#include "templates/Templates.h"

namespace bitfold::templates {

/// Which eager form of the Wan VAE RMSNorm.
enum class WanNormForm {
  /// SGLang: F.silu(F.normalize(x, dim=1) * scale * gamma + bias), the norm
  /// on x's dtype.
  NormInXDtype,
  /// diffusers 0.42 WanRMS_norm: F.normalize(x.float(), dim=1).to(x.dtype)
  /// * scale * gamma + bias, then nn.SiLU.
  NormInF32,
};

struct WanRmsNormSiluOptions {
  DType dtype = DType::BF16;      ///< x (channels-last, rows = pixels).
  WanNormForm form = WanNormForm::NormInXDtype;
  /// gamma's dtype: x's, or f32 (fp32 weights under bf16 autocast: the
  /// product promotes to f32, and so do the bias add, SiLU and the output).
  DType gammaDtype = DType::BF16;
  bool biasTensor = false; ///< false: bias is the python float 0.
  bool convBias = false;   ///< x = rnd(x + conv_bias) first (aten's add_).
  int64_t cols = 96;       ///< C: 1 <= C <= 1024.
  int64_t rows = 1 << 20;  ///< pixel rows the order is built for.
  /// x and y channels-last (the norm folds a packed row) or channels-first
  /// NC[D]HW (it folds along C, S apart: aten's outer reduction,
  /// docs/aten-reduce.md section 9).
  dsl::Layout layout = dsl::Layout::ChannelsLast;
  /// Channels-first: aten's output_vec_size (S % 4 == 0: 4, S % 2 == 0: 2,
  /// else 1); x must be 4-element aligned so that S alone decides it.
  int outputVec = 4;
};
/// Inputs x, gamma (per column), [bias (gamma's dtype), per column],
/// [conv_bias (x's dtype), per column]; scalar "scale" = f32(C ** 0.5).
llvm::Expected<KernelDefRef>
atenWanRmsNormSilu(const WanRmsNormSiluOptions &options);

struct HfRmsNormOptions {
  DType dtype = DType::BF16; ///< x and the outputs.
  DType weightDtype = DType::BF16;
  bool residual = false; ///< x = rnd(x + residual), also written ("sum").
  bool modulate = false; ///< then rnd(rnd(y * rnd(1 + scale)) + shift).
  int64_t cols = 4096;
  int64_t rows = 4096;
};
/// HF LlamaRMSNorm: h = x.float(); v = h.pow(2).mean(-1, keepdim=True);
/// y = w * (h * torch.rsqrt(v + eps)).to(x.dtype). Inputs x, [residual],
/// weight (per column), [scale, shift per batch of S rows]; scalar eps.
llvm::Expected<KernelDefRef> hfRmsNorm(const HfRmsNormOptions &options);

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_ATENNORMS_H
