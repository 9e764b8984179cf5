//===- dsl/Folds.cpp - Stock fold orders and combiners --------------------===//

#include "dsl/Folds.h"

using namespace bitfold::dsl;

FoldOrder folds::aten_vectorized_layer_norm() {
  FoldOrder o;
  o.name = "aten_vectorized_layer_norm";
  o.threads = 128;
  o.vector = 4;
  for (int off : {16, 8, 4, 2, 1})
    o.stages.push_back({TreeStage::ShuffleDown, off});
  // Warps (0,2) and (1,3) are lanes 0+64 and 32+96; then (0,1) is 0+32.
  o.stages.push_back({TreeStage::CrossWarp, 64});
  o.stages.push_back({TreeStage::CrossWarp, 32});
  return o;
}

FoldOrder folds::flashinfer_rmsnorm(int threadsPerRow) {
  FoldOrder o;
  o.name = "flashinfer_rmsnorm_tpr" + std::to_string(threadsPerRow);
  o.threads = threadsPerRow;
  o.vector = 8;
  for (int off : {1, 2, 4, 8, 16})
    if (off < threadsPerRow)
      o.stages.push_back({TreeStage::ButterflyXor, off});
  for (int off = 32; off < threadsPerRow; off *= 2)
    o.stages.push_back({TreeStage::CrossWarp, off});
  return o;
}

FoldOrder folds::serial() {
  FoldOrder o;
  o.name = "serial";
  o.threads = 1;
  o.vector = 1;
  return o;
}

std::shared_ptr<const Combiner> folds::welford_aten() {
  auto push = [](const State &s, const Expr &x) {
    // delta = x - mean; n' = n + 1; mean' = fma(delta, 1/n', mean);
    // m2' = fma(delta, x - mean', m2)   (nvcc contracts both).
    Expr n = s[0] + Expr(1.0f);
    Expr delta = x - s[1];
    Expr mean = fma(delta, rcp_nvcc(n), s[1]);
    Expr m2 = fma(delta, x - mean, s[2]);
    return State{{n, mean, m2}};
  };
  auto combine = [](const State &b, const State &a) {
    // self = B (lower lane), other = A (upper lane), as cuWelfordCombine.
    Expr n = a[0] + b[0];
    Expr c = rcp_nvcc(n);
    Expr delta = b[1] - a[1];
    Expr wB = c * b[0];
    Expr wA = a[0] * c;
    Expr mean = fma(a[1], wA, wB * b[1]);
    Expr m2 = fma(wB, a[0] * (delta * delta), a[2] + b[2]);
    // "if not n > 0" the result is (0, 0, n): both sides are computed and
    // the select is exact.
    Expr nonEmpty = n > Expr(0.0f);
    return State{{n, select(nonEmpty, mean, Expr(0.0f)),
                  select(nonEmpty, m2, Expr(0.0f))}};
  };
  return std::make_shared<Combiner>(
      "welford_aten", std::vector<std::string>{"n", "mean", "m2"},
      std::vector<float>{0.0f, 0.0f, 0.0f}, push, combine);
}

std::shared_ptr<const Combiner> folds::sum_of_squares() {
  return std::make_shared<Combiner>(
      "sum_of_squares", std::vector<std::string>{"acc"},
      std::vector<float>{0.0f},
      [](const State &s, const Expr &x) { return State{{s[0] + x * x}}; },
      [](const State &self, const State &other) {
        return State{{self[0] + other[0]}};
      });
}

std::shared_ptr<const Combiner> folds::sum() {
  return std::make_shared<Combiner>(
      "sum", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [](const State &s, const Expr &x) { return State{{s[0] + x}}; },
      [](const State &self, const State &other) {
        return State{{self[0] + other[0]}};
      });
}
