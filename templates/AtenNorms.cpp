//===- templates/AtenNorms.cpp - Norms in aten's reduction order ----------===//
//
// Each builder reads like the eager chain: every rounding to the tensor
// dtype is written as round(dt, ...); the statistics fold in aten's order
// (docs/aten-reduce.md).
//
//===----------------------------------------------------------------------===//

#include "templates/AtenNorms.h"

#include "keys/Errors.h"

#include "dsl/Folds.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::dsl;
using namespace bitfold::templates;

namespace {

/// The builders' one error: an option outside what the eager chain allows.
bool isFloat(DType t) {
  return t == DType::BF16 || t == DType::F16 || t == DType::F32;
}

/// Vector width of aten's input-vectorized path for this kernel, when the
/// row takes it: the operand's base must be aligned to it (its head then
/// depends only on the row index).
int vectorGuard(int64_t cols, folds::AtenReduceKernel k) {
  return cols >= 128 ? k.inputVecSize : 0;
}

/// aten's order for a reduction over `rowBytes`-byte rows, in the plain
/// model where it is the same DAG (`sumLike`: each push adds an exact
/// value). One order per row class (folds::aten_reduce_row_class: 1, 2..3,
/// 4..7, 8..15, 16..); the range ends where the reduced tensor reaches
/// 2^31 bytes (aten then splits the launch into 32-bit indexable pieces).
FoldOrder statsOrder(int64_t cols, int64_t rows, folds::AtenReduceKernel k,
                     bool sumLike, int elemBytes) {
  rows = folds::aten_reduce_row_class(std::max<int64_t>(rows, 1));
  std::optional<FoldOrder> plain;
  if (sumLike)
    plain = folds::aten_reduce_plain(cols, rows, k);
  FoldOrder o = plain ? *plain : folds::aten_reduce(cols, rows, k);
  o.maxRows = std::min(o.maxRows, ((int64_t(1) << 31) - 1) / (cols * elemBytes));
  return o;
}

/// aten's order for a reduction over dim 1 of an NC[D]HW tensor (section 9
/// of docs/aten-reduce.md), for `rows` pixels; the range ends where the
/// reduced tensor reaches 2^31 bytes (32-bit indexing splits it).
FoldOrder outerOrder(int64_t cols, int64_t rows, int outputVec,
                     folds::AtenReduceKernel k, int elemBytes) {
  FoldOrder o = folds::aten_reduce_outer(cols, rows, outputVec, k);
  o.maxRows = std::min(o.maxRows, ((int64_t(1) << 31) - 1) / (cols * elemBytes));
  return o;
}

} // namespace

llvm::Expected<KernelDefRef>
templates::atenWanRmsNormSilu(const WanRmsNormSiluOptions &o) {
  const DType dt = o.dtype;
  if (!isFloat(dt) || (o.gammaDtype != dt && o.gammaDtype != DType::F32))
    return keys::usageError(llvm::formatv(
        "wan_rmsnorm_silu: x must be bf16, f16 or f32 and gamma x's "
        "dtype or f32; found x {0}, gamma {1}",
        dtypeName(dt), dtypeName(o.gammaDtype)));
  if (o.cols < 1 || o.cols > 1024)
    return keys::usageError(llvm::formatv(
        "wan_rmsnorm_silu: C must be 1..1024, found {0}", o.cols));
  const DType normDt = o.form == WanNormForm::NormInF32 ? DType::F32 : dt;
  folds::AtenReduceKernel k = folds::aten_norm_kernel(normDt);
  const bool channelsFirst = o.layout == Layout::ChannelsFirst;
  if (channelsFirst && o.outputVec != 1 && o.outputVec != 2 &&
      o.outputVec != 4)
    return keys::usageError(llvm::formatv(
        "wan_rmsnorm_silu: outvec is aten's output_vec_size, 1, 2 or 4; "
        "found {0}",
        o.outputVec));
  RowProgram p("wan_rmsnorm_silu");
  Expr x = p.input("x", dt, o.layout).row();
  Expr gamma =
      p.input("gamma", o.gammaDtype, Layout::RowMajor, IndexMap::PerColumn).row();
  Expr bias = o.biasTensor ? p.input("bias", o.gammaDtype, Layout::RowMajor,
                                     IndexMap::PerColumn)
                                 .row()
                           : Expr(0.0f); // `+ 0.`: turns -0 into +0.
  if (o.convBias)
    x = round(dt, x + p.input("conv_bias", dt, Layout::RowMajor,
                              IndexMap::PerColumn)
                          .row());
  Expr scale = p.scalar("scale"); // f32(C ** 0.5): the mul's float opmath.
  p.guardCols(1, 1, 1024);

  // x.norm(2, dim=1): NormTwoOps over x (or x.float()) in aten's order.
  Expr xf = x.to_f32();
  FoldOrder order = channelsFirst
                        ? outerOrder(o.cols, o.rows, o.outputVec, k,
                                     int(dtypeBytes(normDt)))
                        : statsOrder(o.cols, o.rows, k, dt != DType::F32,
                                     int(dtypeBytes(normDt)));
  State st = p.fold(xf, order, folds::norm_two_aten());
  Expr norm = round(normDt, sqrt_rn(st[0]));
  Expr denom = round(normDt, max_nan(norm, Expr(1e-12f))); // clamp_min
  Expr v = round(dt, div_rn(xf, denom));
  v = round(dt, v * scale);
  const DType outDt = o.gammaDtype; // bf16 * f32 promotes to f32.
  v = round(outDt, v * gamma);
  v = round(outDt, v + bias);
  p.output("y", outDt, o.layout, round(outDt, silu(v)));
  // The form in x's dtype reduces x itself (conv bias added in place): its
  // head depends on x's address where aten vectorizes. x.float() is fresh.
  // Channels-first: aten's output_vec_size tests the reduced tensor's
  // address; with x 4-element aligned, S alone decides it in every form.
  if (channelsFirst)
    p.guardAlign("x", 4);
  else if (int align = vectorGuard(o.cols, k);
           align && o.form == WanNormForm::NormInXDtype)
    p.guardAlign("x", align);
  return p.build();
}

llvm::Expected<KernelDefRef> templates::hfRmsNorm(const HfRmsNormOptions &o) {
  const DType dt = o.dtype;
  if (!isFloat(dt) || (o.weightDtype != dt && o.weightDtype != DType::F32))
    return keys::usageError(llvm::formatv(
        "hf_rmsnorm: x must be bf16, f16 or f32 and the weight x's dtype or "
        "f32; found x {0}, weight {1}",
        dtypeName(dt), dtypeName(o.weightDtype)));
  if (o.cols < 1 || o.cols > 130560)
    return keys::usageError(llvm::formatv(
        "hf_rmsnorm: D must be 1..130560 (longer rows split across CTAs "
        "depending on the row count), found {0}",
        o.cols));
  folds::AtenReduceKernel k = folds::aten_sum_kernel(DType::F32);
  RowProgram p("hf_rmsnorm");
  // Inputs first: operand order is the kernel's argument order.
  Expr x = p.input("x", dt, Layout::RowMajor).row();
  Expr res = o.residual ? p.input("residual", dt, Layout::RowMajor).row() : x;
  Expr w = p.input("weight", o.weightDtype, Layout::RowMajor,
                   IndexMap::PerColumn)
               .row();
  Expr scale = x, shift = x;
  if (o.modulate) {
    Dim S = p.dim("S");
    scale = p.input("scale", dt, Layout::RowMajor, IndexMap::PerBatch, S).row();
    shift = p.input("shift", dt, Layout::RowMajor, IndexMap::PerBatch, S).row();
  }
  if (o.residual) {
    x = round(dt, x + res);
    p.output("sum", dt, Layout::RowMajor, x);
  }
  Expr eps = p.scalar("eps", 1e-6f);
  p.guardCols(1, 1, 130560);

  // h.pow(2).mean(-1): MeanOps (acc + v) over the fresh f32 tensor h*h;
  // project multiplies by factor = f32(R) / f32(R * D).
  Expr h = x.to_f32();
  State st = p.fold(h * h,
                    statsOrder(o.cols, o.rows, k, true, 4),
                    folds::sum());
  Expr rows = p.rows().to_f32();
  Expr factor = div_rn(rows, rows * p.cols().to_f32());
  Expr r = rsqrt_cuda(st[0] * factor + eps);
  Expr y = round(dt, h * r);
  const DType outDt = o.weightDtype; // w (f32) * bf16 promotes to f32.
  y = round(outDt, w * y);
  if (o.modulate)
    y = round(outDt, round(outDt, y * round(dt, Expr(1.0f) + scale)) + shift);
  p.output("y", outDt, Layout::RowMajor, y);
  return p.build();
}
