//===- examples/user_kernels/Kernels.cpp - The programs in C++ ------------===//

#include "Kernels.h"

#include "dsl/Folds.h"

#include <limits>

using namespace bitfold::dsl;

namespace {

std::shared_ptr<const Combiner> sumOf(const char *name, bool squares) {
  return std::make_shared<Combiner>(
      name, std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [squares](const State &s, const Expr &v) {
        return State{{s[0] + (squares ? v * v : v)}};
      },
      [](const State &a, const State &b) { return State{{a[0] + b[0]}}; });
}

std::shared_ptr<const Combiner> rowMax() {
  return std::make_shared<Combiner>(
      "row_max", std::vector<std::string>{"m"},
      std::vector<float>{-std::numeric_limits<float>::infinity()},
      [](const State &s, const Expr &v) { return State{{max_nan(s[0], v)}}; },
      [](const State &a, const State &b) {
        return State{{max_nan(a[0], b[0])}};
      });
}

} // namespace

llvm::Expected<user_kernels::DefRef> user_kernels::addRmsNorm() {
  RowProgram p("user_add_rmsnorm");
  p.guardCols(8, 8, 8192);
  Input x = p.input("x", bf16, Layout::RowMajor);
  Input r = p.input("r", bf16, Layout::RowMajor);
  Input w = p.input("w", bf16, Layout::RowMajor, IndexMap::PerColumn);
  Expr eps = p.scalar("eps", 1e-6f);
  Expr h = round(bf16, x.row() + r.row());
  Expr hf = h.to_f32();
  Expr ss =
      p.fold(hf, folds::warp_butterfly(8), sumOf("sum_of_squares", true))[0];
  Expr rstd = rsqrt_approx_ftz(div_rn(ss, p.cols().to_f32()) + eps);
  Expr xb = round(bf16, hf * rstd);
  p.output("h", bf16, Layout::RowMajor, h);
  p.output("y", bf16, Layout::RowMajor, round(bf16, xb * w.row()));
  return p.build();
}

llvm::Expected<user_kernels::DefRef> user_kernels::biasGeluTanh() {
  RowProgram p("user_bias_gelu_tanh");
  Input x = p.input("x", bf16, Layout::RowMajor);
  Input bias = p.input("bias", bf16, Layout::RowMajor, IndexMap::PerColumn);
  // Eager's add rounds to bf16 first (its own op); gelu_tanh is ATen's
  // f32 formula as nvcc compiles it, with libdevice's tanhf.
  Expr v = round(bf16, x.row() + bias.row()).to_f32();
  p.output("y", bf16, Layout::RowMajor, round(bf16, gelu_tanh(v)));
  return p.build();
}

llvm::Expected<user_kernels::DefRef> user_kernels::biasGeluErf() {
  RowProgram p("user_bias_gelu_erf");
  Input x = p.input("x", bf16, Layout::RowMajor);
  Input bias = p.input("bias", bf16, Layout::RowMajor, IndexMap::PerColumn);
  Expr v = round(bf16, x.row() + bias.row()).to_f32();
  p.output("y", bf16, Layout::RowMajor, round(bf16, gelu_erf(v)));
  return p.build();
}

llvm::Expected<user_kernels::DefRef> user_kernels::softmax() {
  RowProgram p("user_softmax");
  p.guardCols(8, 8, 8192);
  Input x = p.input("x", bf16, Layout::RowMajor);
  Expr xf = x.row().to_f32();
  Expr max = p.fold(xf, folds::warp_butterfly(8), rowMax())[0];
  Expr e = exp_libdevice(xf - max);
  Expr sum = p.fold(e, folds::warp_butterfly(8), sumOf("sum", false))[0];
  p.output("y", bf16, Layout::RowMajor, round(bf16, div_rn(e, sum)));
  return p.build();
}
