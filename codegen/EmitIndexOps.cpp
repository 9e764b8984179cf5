//===- codegen/EmitIndexOps.cpp - Index values and gathers ----------------===//
//
// The index ops of dsl/Ops.def: the column of an element slot, i32
// division with the interpreter's defined results where div.s32/rem.s32
// are not (a zero divisor, INT_MIN / -1), and a gather: one element of an
// input at a computed column, NaN outside the row.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include <cstdint>

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;
using dsl::DType;
using dsl::ExprNode;

Value KernelBuilder::colIndex(const Access &acc, int e) {
  // An access that is never in range has no column; its elements are never
  // stored or pushed, so any value serves.
  if (!acc.col)
    return cI32(0);
  Value col = e ? arith::AddIOp::create(b, loc, acc.col, cIdx(e)) : acc.col;
  if (col.getType() == i32)
    return col;
  return arith::TruncIOp::create(b, loc, i32, col);
}

Value KernelBuilder::intDivRem(bool rem, Value x, Value y) {
  using P = arith::CmpIPredicate;
  // Divide by 1 where the hardware result is undefined; then a zero
  // divisor gives 0 (idiv) or x (irem), and INT_MIN / -1 gives x / 1 =
  // INT_MIN and INT_MIN % -1 gives 0, the interpreter's values.
  Value zero = cmpI(P::eq, y, cI32(0));
  Value overflow = andI(cmpI(P::eq, x, cI32(INT32_MIN)),
                        cmpI(P::eq, y, cI32(-1)));
  Value safe = sel(arith::OrIOp::create(b, loc, zero, overflow), cI32(1), y);
  if (rem)
    return sel(zero, x, arith::RemSIOp::create(b, loc, x, safe));
  return sel(zero, cI32(0), arith::DivSIOp::create(b, loc, x, safe));
}

Value KernelBuilder::emitGather(const ExprNode *n, Value col) {
  // Unsigned compare: negative columns are out of range too. The address
  // is clamped to column 0 so no load leaves the row. A vector(D) input's
  // range is its length D, a launch argument.
  const dsl::OperandDecl &o = def.operands[n->index];
  Value bound = o.map == dsl::IndexMap::Vector
                    ? Value(arith::TruncIOp::create(b, loc, i32,
                                                    dimValues[o.batchDim]))
                    : cI32(int32_t(plan.cols));
  Value in = cmpI(arith::CmpIPredicate::ult, col, bound);
  Value c = toIdx(sel(in, col, cI32(0)));
  DType dt = def.operands[n->index].dtype;
  Value addr = LLVM::GEPOp::create(b, loc, ptrGlobal, storageType(dt),
                                   base[n->index], ValueRange{c});
  Value v = LLVM::LoadOp::create(b, loc, storageType(dt), addr,
                                 dsl::dtypeBytes(dt));
  v = dsl::isByteDType(dt) ? extendByte(dt, v) : emitExtend(v);
  return sel(in, v, cF32Bits(0x7fc00000u));
}
