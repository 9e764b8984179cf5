//===- examples/zoo/layer_norm_stats2.cpp - LayerNorm, stats packed -------===//
//
// layer_norm_stats2.bfk in C++: aten's native_layer_norm without affine
// (its vectorized kernel's Welford order), y = bf16(rstd * (x - mean)),
// and the row's (mean, rstd) as one [rows, 2] f32 output: a per-row
// output of two values (outputPerRow with a list).
//
//===----------------------------------------------------------------------===//

#include "ZooKernels.h"

#include "dsl/Folds.h"

using namespace bitfold::dsl;

llvm::Expected<zoo::DefRef> zoo::layerNormStats2() {
  RowProgram p("zoo_layer_norm_stats2");
  // aten takes its vectorized kernel only for D % 4 == 0, x and y aligned.
  p.guardCols(4, 4, int64_t(1) << 24);
  Input x = p.input("x", bf16, Layout::RowMajor);
  Expr eps = p.scalar("eps", 1e-5f);

  Expr xf = x.row().to_f32();
  State welford =
      p.fold(xf, folds::aten_vectorized_layer_norm(), folds::welford_aten());
  Expr mean = welford[1], m2 = welford[2];
  Expr rstd = rsqrt_cuda(div_rn(m2, p.cols().to_f32()) + eps);
  p.output("y", bf16, Layout::RowMajor, round(bf16, rstd * (xf - mean)));
  p.outputPerRow("stats", f32, {mean, rstd});

  p.guardAlign("x", 4);
  p.guardAlign("y", 4);
  return p.build();
}
