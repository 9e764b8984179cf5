//===- examples/zoo/rope_interleaved.cpp - GPT-J rotary embedding ---------===//
//
// rope_interleaved.bfk in C++: pairs are adjacent columns (2i, 2i + 1);
// each element reads its partner by `gather` at col +- 1. Even columns
// get a*cos - b*sin, odd ones a*cos + b*sin, each product rounded to bf16
// as the native torch chain does. cos/sin hold one row per position,
// shared by the H heads of a token (per_batch(H)).
//
//===----------------------------------------------------------------------===//

#include "ZooKernels.h"

using namespace bitfold::dsl;

llvm::Expected<zoo::DefRef> zoo::ropeInterleaved() {
  RowProgram p("zoo_rope_interleaved");
  p.guardCols(2, 2, 65536);
  Dim H = p.dim("H");
  Input x = p.input("x", bf16, Layout::RowMajor);
  Input cos = p.input("cos", bf16, Layout::RowMajor, IndexMap::PerBatch, H);
  Input sin = p.input("sin", bf16, Layout::RowMajor, IndexMap::PerBatch, H);

  Expr col = col_index(), one = iconst(1);
  Expr even = icmp(Op::ICmpEQ, irem(col, iconst(2)), iconst(0));
  Expr partner = iselect(even, iadd(col, one), isub(col, one));
  Expr a = x.row().to_f32(), b = gather(x.row(), partner);
  Expr ac = round(bf16, a * cos.row().to_f32()).to_f32();
  Expr bs = round(bf16, b * sin.row().to_f32()).to_f32();
  p.output("o", bf16, Layout::RowMajor,
           round(bf16, select(even, ac - bs, ac + bs)));
  return p.build();
}
