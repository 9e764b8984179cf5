//===- examples/zoo/fused_add_rms_norm.cpp - vLLM fused_add_rms_norm ------===//
//
// fused_add_rms_norm.bfk in C++ (that file says why each rounding is
// there): h = bf16(x + residual) overwrites residual, y = bf16(bf16(s *
// rstd) * w) overwrites x, rstd = rsqrt_cuda(mean(s^2) + eps), the sum of
// squares in flashinfer's order (32 lanes x 8-element vectors, butterfly).
//
//===----------------------------------------------------------------------===//

#include "ZooKernels.h"

#include "dsl/Folds.h"

using namespace bitfold::dsl;

llvm::Expected<zoo::DefRef> zoo::fusedAddRmsNorm() {
  RowProgram p("zoo_fused_add_rms_norm");
  p.guardCols(8, 8, 65536);
  Input x = p.input("x", bf16, Layout::RowMajor);
  Input residual = p.input("residual", bf16, Layout::RowMajor);
  Input w = p.input("w", bf16, Layout::RowMajor, IndexMap::PerColumn);
  Expr eps = p.scalar("eps", 1e-6f);

  Expr s = x.row().to_f32() + residual.row().to_f32();
  p.output("h", bf16, Layout::RowMajor, round(bf16, s));
  Expr sumSq = p.fold(s, folds::warp_butterfly(8), folds::sum_of_squares())[0];
  Expr rstd = rsqrt_cuda(div_rn(sumSq, p.cols().to_f32()) + eps);
  Expr normed = round(bf16, s * rstd).to_f32();
  p.output("y", bf16, Layout::RowMajor, round(bf16, normed * w.row().to_f32()));

  p.inPlace("h", "residual");
  p.inPlace("y", "x");
  return p.build();
}
