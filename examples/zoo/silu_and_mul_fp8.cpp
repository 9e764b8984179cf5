//===- examples/zoo/silu_and_mul_fp8.cpp - SiluAndMul + fp8 quant ---------===//
//
// silu_and_mul_fp8.bfk in C++: y = bf16(bf16(silu(g)) * u) as vLLM's
// SiluAndMul, then q = fp8_e4m3fn(clamp(y / scale, -448, 448)), the
// static per-tensor quant (scale a launch scalar).
//
//===----------------------------------------------------------------------===//

#include "ZooKernels.h"

using namespace bitfold::dsl;

llvm::Expected<zoo::DefRef> zoo::siluAndMulFp8() {
  RowProgram p("zoo_silu_and_mul_fp8");
  Input g = p.input("g", bf16, Layout::RowMajor);
  Input u = p.input("u", bf16, Layout::RowMajor);
  Expr scale = p.scalar("scale");

  Expr act = round(bf16, silu(g.row().to_f32())).to_f32();
  Expr y = round(bf16, act * u.row().to_f32()).to_f32();
  Expr clamped = max_nan(min_nan(div_rn(y, scale), 448.0f), -448.0f);
  p.output("q", DType::F8E4M3FN, Layout::RowMajor,
           round(DType::F8E4M3FN, clamped));
  return p.build();
}
