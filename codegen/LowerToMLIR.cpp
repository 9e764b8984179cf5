//===- codegen/LowerToMLIR.cpp - Row program -> MLIR: the kernel ----------===//
//
// The kernel's skeleton and its values. The body is straight-line code in
// one block except the guarded stores (scf.if) and, in a rolled
// channels-first plan, its loops over C (EmitStridedAxis.cpp), in rolled
// rows the loops over a row's chunks (EmitRolledRows.cpp). Per-row values are built
// once (memo by node); per-element values once per element slot of the
// current phase's mapping (memo by node and slot), so a one-pass kernel
// reuses the values its fold loaded. Ops come from the op table
// (EmitOps.cpp), except where an exact rewrite (ExactRewrites.h) applies.
//
// Every op carries a location: the canonical text's name of the DSL node
// it evaluates ("%12", "welford_aten.push.%3"), inside the structure that
// emits it ("row setup", "fold 0", "outputs"), so a dump with locations
// maps back to the program. No debug info is attached: the PTX has no
// .loc/.file lines.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <functional>

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using dsl::DType;
using dsl::ExprNode;
using DOp = dsl::Op;

void codegen::loadCodegenDialects(MLIRContext &ctx) {
  ctx.loadDialect<arith::ArithDialect, scf::SCFDialect, cf::ControlFlowDialect,
                  LLVM::LLVMDialect, NVVM::NVVMDialect>();
}

KernelBuilder::KernelBuilder(MLIRContext &ctx, const dsl::KernelDef &def,
                             const Plan &plan, const LoweringFacts &facts,
                             LoweringStats &stats)
    : ctx(ctx), b(&ctx), loc(UnknownLoc::get(&ctx)),
      structure(UnknownLoc::get(&ctx)), def(def), plan(plan),
      rewrites(facts.rewrites), facts(facts.folds), stats(stats),
      names(dsl::canonicalNodeNames(def)) {
  f32 = b.getF32Type();
  i1 = b.getI1Type();
  i32 = b.getI32Type();
  i64 = b.getI64Type();
  idx = plan.index64 ? i64 : i32;
  ptrGen = LLVM::LLVMPointerType::get(&ctx, 0);
  ptrGlobal = LLVM::LLVMPointerType::get(&ctx, 1);
  ptrShared = LLVM::LLVMPointerType::get(&ctx, 3);
}

// ---------------------------------------------------------------------------
// Small builders and locations.

Value KernelBuilder::toIdx(Value v) { // from i32 or i64 (non-negative)
  if (v.getType() == idx)
    return v;
  if (idx == i64)
    return arith::ExtUIOp::create(b, loc, i64, v);
  return arith::TruncIOp::create(b, loc, i32, v);
}

Value KernelBuilder::intrinsic(StringRef name, ValueRange args, Type result) {
  auto op = LLVM::CallIntrinsicOp::create(b, loc, result ? result : f32,
                                          b.getStringAttr(name), args);
  return op.getResult(0);
}

Value KernelBuilder::andI(Value x, Value y) {
  if (!x)
    return y;
  if (!y)
    return x;
  return arith::AndIOp::create(b, loc, x, y);
}

Type KernelBuilder::storageType(DType t) {
  switch (t) {
  case DType::BF16: return b.getBF16Type();
  case DType::F16: return b.getF16Type();
  case DType::I1: return i1;
  case DType::F8E4M3FN:
  case DType::F8E5M2:
  case DType::I8: return b.getI8Type();
  case DType::I32: return i32;
  default: return f32;
  }
}

Location KernelBuilder::structLoc(const llvm::Twine &what) {
  return NameLoc::get(b.getStringAttr(what));
}

Location KernelBuilder::nodeLoc(const ExprNode *n) {
  auto it = names.find(n);
  if (it == names.end())
    return structure;
  return NameLoc::get(b.getStringAttr(it->second), structure);
}

// ---------------------------------------------------------------------------
// Values.

bool KernelBuilder::isElem(const ExprNode *n) {
  auto it = elemMemo.find(n);
  if (it != elemMemo.end())
    return it->second;
  bool e = dsl::variesAlongRow(def, *n);
  if (n->op != DOp::FoldValue)
    for (const dsl::Expr &a : n->args)
      e = e || isElem(a.get());
  elemMemo[n] = e;
  return e;
}

Value KernelBuilder::rowLeaf(const ExprNode *n) {
  switch (n->op) {
  case DOp::Scalar: return scalarValues[n->index];
  case DOp::Dim:
    if (n->type == DType::I32) // dims stay below 2^31
      return n->index == -1
                 ? cI32(int32_t(plan.cols))
                 : arith::TruncIOp::create(b, loc, i32,
                                           n->index == -2
                                               ? groupRowsF
                                               : dimValues[n->index]);
    if (n->index == -1)
      return cF32(float(plan.cols));
    if (n->index == -2)
      return arith::SIToFPOp::create(b, loc, f32, groupRowsF);
    return arith::SIToFPOp::create(b, loc, f32, dimValues[n->index]);
  case DOp::FoldValue: return foldResults[n->index][n->field];
  case DOp::RowIndex: // the row within its group (i32: rows < 2^31)
    return arith::TruncIOp::create(b, loc, i32, rowInGroup);
  case DOp::Load: return rowInputs[n->index]; // a per-row input
  default: return Value();
  }
}

Value KernelBuilder::rowValue(const ExprNode *n) {
  auto it = rowMemo.find(n);
  if (it != rowMemo.end())
    return it->second;
  Value v;
  {
    AtLoc at(*this, nodeLoc(n));
    v = rowLeaf(n);
  }
  if (!v) {
    if (const NarrowArith *m = narrowArith(n)) {
      AtLoc at(*this, nodeLoc(n));
      v = emitNarrowArith(*m, n->roundTo,
                          [&](const ExprNode *x) { return rowValue(x); });
    } else {
      llvm::SmallVector<Value, 3> args;
      for (const dsl::Expr &a : n->args)
        args.push_back(rowValue(a.get()));
      AtLoc at(*this, nodeLoc(n));
      v = emitOp(n, args);
    }
  }
  rowMemo[n] = v;
  return v;
}

Value KernelBuilder::roundPair(const ExprNode *n, const Access &acc, int e) {
  // Elements e and e+1 in one cvt.rn.{bf16,f16}x2.f32 (the same rounding
  // per element), so bf16x2/f16x2 consumers get both halves of one
  // register without a repack.
  Value lo = elemValue(n->args[0].get(), acc, e);
  Value hi = elemValue(n->args[0].get(), acc, e + 1);
  AtLoc at(*this, nodeLoc(n));
  Value pair = cvtRnPair(n->roundTo, hi, lo);
  Value v = LLVM::ExtractElementOp::create(b, loc, pair, cI32(0));
  elemValues[{n, int64_t(acc.id) * 64 + e + 1}] =
      LLVM::ExtractElementOp::create(b, loc, pair, cI32(1));
  return v;
}

Value KernelBuilder::narrowArithPair(const ExprNode *n, const NarrowArith &m,
                                     const Access &acc, int e) {
  // Elements e and e+1 in one bf16x2 op: add/sub/mul.rn.bf16x2 rounds each
  // half as the scalar .rn op does (PTX ISA), and the pair's word then
  // widens without unpacking (widenPairHalf).
  std::pair<Value, Value> ops[2];
  for (int h = 0; h < 2; ++h) {
    AtLoc at(*this, nodeLoc(n));
    ops[h] = narrowOperands(m, n->roundTo, [&](const ExprNode *x) {
      return elemValue(x, acc, e + h);
    });
  }
  AtLoc at(*this, nodeLoc(n));
  auto vecTy = VectorType::get({2}, storageType(n->roundTo));
  auto pack = [&](Value lo, Value hi) {
    Value v = LLVM::PoisonOp::create(b, loc, vecTy);
    v = LLVM::InsertElementOp::create(b, loc, v, lo, cI32(0));
    return LLVM::InsertElementOp::create(b, loc, v, hi, cI32(1));
  };
  Value pair = narrowOp(m.op, pack(ops[0].first, ops[1].first),
                        pack(ops[0].second, ops[1].second));
  Value v = LLVM::ExtractElementOp::create(b, loc, pair, cI32(0));
  elemValues[{n, int64_t(acc.id) * 64 + e}] = v;
  elemValues[{n, int64_t(acc.id) * 64 + e + 1}] =
      LLVM::ExtractElementOp::create(b, loc, pair, cI32(1));
  return v;
}

Value KernelBuilder::elemValue(const ExprNode *n, const Access &acc, int e) {
  // An interleaved group's element reads its pixel's row state and loads.
  if (!isElem(n))
    return inCopy(acc.copyOf(e), [&] { return rowValue(n); });
  if (!acc.parts.empty() && (n->op == DOp::Load || n->op == DOp::ColIndex))
    return inCopy(acc.copyOf(e), [&] { // the part's column and its loads
      return elemValue(n, acc.parts[e / acc.pixels], 0);
    });
  auto key = std::make_pair(n, int64_t(acc.id) * 64 + e);
  auto it = elemValues.find(key);
  if (it != elemValues.end())
    return it->second;
  Value v;
  if (n->op == DOp::Load) {
    AtLoc at(*this, nodeLoc(n));
    v = loadAccess(n->index,
                   acc)[pixelVectors(n->index) ? e * copies() + copy : e];
  } else if (n->op == DOp::ColIndex) {
    AtLoc at(*this, nodeLoc(n));
    v = colIndex(acc, e);
  } else if (rewidening && isKeptBf16Extend(n)) {
    Value h = elemValue(n->args[0].get(), acc, e);
    AtLoc at(*this, nodeLoc(n));
    v = rewidenBf16(h);
  } else if (const NarrowArith *m = narrowArith(n)) {
    if (pairsNarrowArith(n) && e % 2 == 0 && e + 1 < acc.width)
      return narrowArithPair(n, *m, acc, e);
    AtLoc at(*this, nodeLoc(n));
    v = emitNarrowArith(*m, n->roundTo, [&](const ExprNode *x) {
      return elemValue(x, acc, e);
    });
  } else if (rewrites.fastSilu.count(n)) {
    // Every element of the access at once (fast values side by side).
    std::vector<Value> y = emitFastSilu(n, acc);
    for (int i = 0; i < acc.width; ++i)
      elemValues[std::make_pair(n, int64_t(acc.id) * 64 + i)] = y[i];
    return y[e];
  } else if (auto rd = rewrites.roundedRowDivision.find(n);
             rd != rewrites.roundedRowDivision.end()) {
    // The division's fast values serve only this rounding: not memoised
    // as the division's own.
    std::vector<Value> q = emitRowDivision(n->args[0].get(), acc, rd->second);
    AtLoc at(*this, nodeLoc(n));
    std::vector<Value> y = roundElements(n, q);
    for (int i = 0; i < acc.width; ++i)
      elemValues[std::make_pair(n, int64_t(acc.id) * 64 + i)] = y[i];
    return y[e];
  } else if (n->op == DOp::Round && !dsl::isByteDType(n->roundTo) &&
             e % 2 == 0 && e + 1 < acc.width) {
    v = roundPair(n, acc, e);
  } else if (rewrites.rowDivision.count(n)) {
    // Every element of the access at once, under one branch.
    std::vector<Value> q = emitRowDivision(n, acc);
    for (int i = 0; i < acc.width; ++i)
      elemValues[std::make_pair(n, int64_t(acc.id) * 64 + i)] = q[i];
    return q[e];
  } else {
    llvm::SmallVector<Value, 3> args;
    for (const dsl::Expr &a : n->args)
      args.push_back(elemValue(a.get(), acc, e));
    AtLoc at(*this, nodeLoc(n));
    v = emitOp(n, args);
  }
  elemValues[key] = v;
  return v;
}

std::vector<Value> KernelBuilder::evalBody(const dsl::State &body,
                                           ArrayRef<Value> args) {
  llvm::DenseMap<const ExprNode *, Value> memo;
  std::function<Value(const ExprNode *)> eval = [&](const ExprNode *n) {
    auto it = memo.find(n);
    if (it != memo.end())
      return it->second;
    Value v;
    if (n->op == DOp::Placeholder) {
      v = args[n->index];
    } else {
      llvm::SmallVector<Value, 3> a;
      for (const dsl::Expr &e : n->args)
        a.push_back(eval(e.get()));
      AtLoc at(*this, nodeLoc(n));
      v = emitOp(n, a);
    }
    memo[n] = v;
    return v;
  };
  std::vector<Value> out;
  for (const dsl::Expr &e : body.fields)
    out.push_back(eval(e.get()));
  return out;
}

// ---------------------------------------------------------------------------
// Kernel structure.

void KernelBuilder::swapCopyState(CopyState &s) {
  std::swap(rowMemo, s.rowMemo);
  std::swap(rowReciprocals, s.rowReciprocals);
  std::swap(elemValues, s.elemValues);
  std::swap(foldResults, s.foldResults);
  std::swap(rowInGroup, s.rowInGroup);
  std::swap(slotRow, s.slotRow);
}

void KernelBuilder::selectCopy(int q) {
  if (q == copy)
    return;
  swapCopyState(otherCopies[copy]);
  swapCopyState(otherCopies[q]);
  copy = q;
}

Value KernelBuilder::inCopy(int q, llvm::function_ref<Value()> f) {
  if (q < 0 || q == copy)
    return f();
  const int was = copy;
  selectCopy(q);
  Value v = f();
  selectCopy(was);
  return v;
}

void KernelBuilder::newPhase() {
  elemValues.clear();
  for (CopyState &s : otherCopies)
    s.elemValues.clear();
  loads.clear();
  // Keep the re-read: an empty asm that clobbers memory stops LLVM from
  // forwarding the first pass's loads into the second.
  LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{}, "",
                            "~{memory}", /*has_side_effects=*/true,
                            /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

Value KernelBuilder::twoLevelOffset(Value r, Value inner,
                                    llvm::function_ref<Value()> outer,
                                    Value step) {
  Value n = arith::DivUIOp::create(b, loc, r, inner);
  Value group = arith::MulIOp::create(b, loc, n, outer());
  Value in = arith::RemUIOp::create(b, loc, r, inner);
  if (step)
    in = arith::MulIOp::create(b, loc, in, step);
  return arith::AddIOp::create(b, loc, group, in);
}

Value KernelBuilder::rowBase(const dsl::OperandDecl &o, keys::RowLevels lv,
                             Value ptr, Value stride, Value local) {
  Value g1 = LLVM::AddrSpaceCastOp::create(b, loc, ptrGlobal, ptr);
  Value rowOff;
  switch (o.map) {
  case dsl::IndexMap::PerElement:
    if (o.layout == dsl::Layout::ChannelsFirst) {
      // Pixel r of an N C S tensor: two-level rows, (r / S) * C * S + r % S;
      // the ABI's row-stride slot holds S (keys/KernelABI.h). Operands
      // given the same S value (ShapeSpec::oneSpatial) share the offset.
      if (stride != spatialStride || local != spatialLocal) {
        Value s = toIdx(stride);
        spatialStride = stride;
        spatialLocal = local;
        spatialOffset = twoLevelOffset(
            toIdx(local), s,
            [&] { return arith::MulIOp::create(b, loc, s, cIdx(plan.cols)); },
            Value());
      }
      rowOff = spatialOffset;
      break;
    }
    if (lv.inner > 0) { // keys::RowLevels: constants of the shape class
      rowOff = twoLevelOffset(
          toIdx(local), cIdx(lv.inner), [&] { return cIdx(lv.outer); },
          toIdx(stride));
      break;
    }
    rowOff = arith::MulIOp::create(b, loc, toIdx(local), toIdx(stride));
    break;
  case dsl::IndexMap::PerBatch: {
    Value batch = arith::DivUIOp::create(b, loc, local, dimValues[o.batchDim]);
    rowOff = arith::MulIOp::create(b, loc, toIdx(batch), toIdx(stride));
    break;
  }
  case dsl::IndexMap::PerColumn:
  case dsl::IndexMap::Vector: rowOff = cIdx(0); break;
  case dsl::IndexMap::PerRow: // one element per row, `stride` apart
    rowOff = arith::MulIOp::create(b, loc, toIdx(local), toIdx(stride));
    break;
  }
  return LLVM::GEPOp::create(b, loc, ptrGlobal, storageType(o.dtype), g1,
                             ValueRange{rowOff});
}

Value KernelBuilder::threadFirstRow() {
  const TileConfig &c = plan.config;
  tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value cta = NVVM::BlockIdXOp::create(b, loc, i32);
  int logP = std::countr_zero(unsigned(c.threadsPerRow));
  if (plan.lanesAcrossWarps) {
    // Thread p of a pixel a warp apart: warp w holds lane w % P of the
    // pixels 32 * (w / P) + [0, 32), so each access reads 32 adjacent ones.
    Value warp = arith::ShRUIOp::create(b, loc, tid, cI32(5));
    laneInRow = arith::AndIOp::create(b, loc, warp, cI32(c.threadsPerRow - 1));
    rowInCta = arith::OrIOp::create(
        b, loc, arith::AndIOp::create(b, loc, tid, cI32(31)),
        arith::ShLIOp::create(
            b, loc, arith::ShRUIOp::create(b, loc, warp, cI32(logP)), cI32(5)));
  } else {
    laneInRow = arith::AndIOp::create(b, loc, tid, cI32(c.threadsPerRow - 1));
    rowInCta = arith::ShRUIOp::create(b, loc, tid, cI32(logP));
  }
  pIdx = toIdx(laneInRow);
  // With o pixels per thread, the thread's first pixel: o * its row.
  const int o = c.pixelsPerThread;
  Value firstInCta = rowInCta;
  if (o > 1)
    firstInCta = arith::ShLIOp::create(b, loc, rowInCta,
                                       cI32(std::countr_zero(unsigned(o))));
  return arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i64, cta),
                            cI64(c.rowsPerCta)),
      arith::ExtUIOp::create(b, loc, i64, firstInCta));
}

void KernelBuilder::setupRow(LLVM::LLVMFuncOp fn) {
  AtLoc at(*this, structLoc("row setup"), /*structure=*/true);
  Block *entry = &fn.getBody().front();
  const int G = def.groups, N = int(def.operands.size());
  const TileConfig &c = plan.config;
  auto arg = [&](int i) { return entry->getArgument(i); };
  const keys::KernelABI abi = keys::KernelABI::of(def);

  Value row = threadFirstRow();
  const int o = c.pixelsPerThread;

  // Groups: rows of group 0 first.
  std::vector<Value> groupStart{cI64(0)};
  Value total = arg(abi.groupRows(0));
  for (int g = 1; g < G; ++g) {
    groupStart.push_back(total);
    total = arith::AddIOp::create(b, loc, total, arg(abi.groupRows(g)));
  }
  rowValid = cmpI(arith::CmpIPredicate::slt, row, total);
  // Rows past the end compute on the last row (never stored), so every
  // thread reaches every barrier and shuffle. With o pixels per thread
  // every group's row count is a multiple of o (checkPixelsPerThread): a
  // thread's pixels are all valid or all past the end, the last o.
  Value last = arith::SubIOp::create(b, loc, total, cI64(o));
  Value rowC = sel(rowValid, row, last);
  std::vector<Value> inGroup(G);
  for (int g = 1; g < G; ++g)
    inGroup[g] = cmpI(arith::CmpIPredicate::sge, rowC, groupStart[g]);
  auto pick = [&](auto valueOf) {
    Value v = valueOf(0);
    for (int g = 1; g < G; ++g)
      v = sel(inGroup[g], valueOf(g), v);
    return v;
  };
  Value start = pick([&](int g) { return groupStart[g]; });
  Value local = arith::SubIOp::create(b, loc, rowC, start);
  rowInGroup = local;
  slotRow = rowInCta;
  otherCopies.assign(o, CopyState());
  for (int q = 1; q < o; ++q) {
    otherCopies[q].rowInGroup = arith::AddIOp::create(b, loc, local, cI64(q));
    otherCopies[q].slotRow = arith::AddIOp::create(
        b, loc, rowInCta, cI32(int64_t(q) * (c.rowsPerCta / o)));
  }
  groupRowsF = pick([&](int g) { return arg(abi.groupRows(g)); });
  for (size_t d = 0; d < def.dims.size(); ++d)
    dimValues.push_back(arg(abi.dim(int(d))));
  for (size_t s = 0; s < def.scalars.size(); ++s)
    scalarValues.push_back(arg(abi.scalar(int(s))));
  // ShapeSpec::oneSpatial: every channels-first operand's pixel offset is
  // the first one's (one division). Their column strides stay their own S
  // arguments: one value would let LLVM share each column's offset between
  // the loads and the stores, and ptxas keep them all live in between.
  Value sharedS;
  for (int i = 0; i < N; ++i) {
    const bool cf = def.operands[i].layout == dsl::Layout::ChannelsFirst;
    Value ptr = pick([&](int g) { return arg(abi.pointer(g, i)); });
    Value stride = pick([&](int g) { return arg(abi.rowStride(g, i)); });
    if (cf && plan.oneSpatial && !sharedS)
      sharedS = stride;
    const keys::RowLevels lv =
        size_t(i) < plan.rowLevels.size() ? plan.rowLevels[i] : keys::RowLevels();
    base.push_back(rowBase(def.operands[i], lv, ptr,
                           cf && sharedS ? sharedS : stride, local));
    // Rows past the end read the last row (rowC), so this load is in
    // bounds for every thread.
    const dsl::OperandDecl &o = def.operands[i];
    rowInputs.push_back(
        !o.isOutput && o.map == dsl::IndexMap::PerRow
            ? Value(LLVM::LoadOp::create(b, loc, storageType(o.dtype),
                                         base.back(), dsl::dtypeBytes(o.dtype)))
            : Value());
    colStride.push_back(cf ? toIdx(stride) : Value());
  }
}

LLVM::LLVMFuncOp KernelBuilder::declareKernel(StringRef entryName) {
  // The parameter list of keys/KernelABI.h.
  const keys::KernelABI abi = keys::KernelABI::of(def);
  llvm::SmallVector<Type> params;
  for (int p = 0; p < int(abi.paramCount()); ++p) {
    keys::KernelABI::Param kind = abi.kindOf(p);
    params.push_back(kind == keys::KernelABI::Param::Pointer  ? Type(ptrGen)
                     : kind == keys::KernelABI::Param::Scalar ? Type(f32)
                                                              : Type(i64));
  }
  auto fnTy = LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(&ctx), params);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, entryName, fnTy);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({plan.config.ctaThreads(), 1, 1}));
  // .minnctapersm: given .maxntid alone, whole-program ptxas (the PTX
  // Compiler API) aims at an occupancy of its own and spills to reach it
  // (hf_rmsnorm at 1001 columns: 56 registers and 46 spilled bytes, 142
  // and none with 1); the plan chooses the occupancy here (1, or a packed
  // row's, Plan::minCtasPerSm).
  fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
              b.getI32IntegerAttr(plan.minCtasPerSm));
  return fn;
}

void KernelBuilder::emitGridDependencyControl() {
  if (!plan.gridDependencyControl || plan.smVersion < 90)
    return;
  // Programmatic dependent launch (sm_90+): launched that way, the kernel
  // may start while its predecessor on the stream finishes; it waits here,
  // before touching memory, for the predecessor to complete and flush,
  // then lets its own successor's CTAs be scheduled as SMs free up.
  // Launched normally, both are no-ops.
  NVVM::GriddepcontrolOp::create(b, loc, NVVM::GridDepActionKind::wait);
  NVVM::GriddepcontrolOp::create(b, loc,
                                 NVVM::GridDepActionKind::launch_dependents);
  stats.gridDependencyWait = true;
}

OwningOpRef<ModuleOp> KernelBuilder::build(StringRef entryName) {
  OwningOpRef<ModuleOp> owned = ModuleOp::create(structLoc(def.name));
  module = *owned;
  b.setInsertionPointToEnd(module.getBody());
  LLVM::LLVMFuncOp fn;
  {
    AtLoc at(*this, structLoc("kernel " + def.name), /*structure=*/true);
    fn = declareKernel(entryName);
    b.setInsertionPointToStart(fn.addEntryBlock(b));
    emitGridDependencyControl();
  }
  setupRow(fn);
  foldResults.resize(def.folds.size());
  for (CopyState &s : otherCopies)
    s.foldResults.resize(def.folds.size());
  if (plan.rolled) {
    for (size_t f = 0; f < def.folds.size(); ++f) {
      AtLoc at(*this, structLoc("fold " + llvm::Twine(f)), /*structure=*/true);
      emitRolledFold(f);
    }
    AtLoc at(*this, structLoc("outputs"), /*structure=*/true);
    emitRolledOutputs();
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    return owned;
  }
  stageColumnTables();
  std::vector<Access> mapping;
  if (plan.config.sharedRow) {
    stagedOperands = sharedRowOperands(def);
    rowStage = RowStage::Store;
  }
  for (size_t f = 0; f < def.folds.size(); ++f) {
    AtLoc at(*this, structLoc("fold " + llvm::Twine(f)), /*structure=*/true);
    if (f == 0 || plan.config.twoPass || plan.rolledRows) {
      if (f > 0)
        newPhase();
      if (plan.rolledRows) { // EmitRolledRows.cpp
        emitRolledRowFold(f);
        continue;
      }
      mapping = foldAccesses(plan.folds[f], 0, plan.folds[f].reps);
    }
    emitFold(f, mapping);
  }
  AtLoc at(*this, structLoc("outputs"), /*structure=*/true);
  if (plan.rolledRows) {
    if (!def.folds.empty())
      newPhase();
    emitRolledRowOutputs();
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    return owned;
  }
  if (plan.config.sharedRow) {
    // The staged operands read back from shared memory: in one pass each
    // thread its own columns (no barrier), in two passes the output
    // mapping's, which other threads stored (a barrier). newPhase's memory
    // clobber keeps LLVM from forwarding the stored values.
    newPhase();
    if (plan.config.twoPass)
      barrier();
    rowStage = RowStage::Load;
  }
  if (!plan.outputUsesFoldMapping) {
    if (!def.folds.empty() && !plan.config.sharedRow)
      newPhase();
    mapping = outputAccesses(0, plan.outChunks);
  }
  columnTablesReady = true; // behind the folds' barrier (lanesAcrossWarps)
  if (plan.packedRow)
    startRewidening();
  emitOutputs(gatherOutputs(mapping));
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return owned;
}

OwningOpRef<ModuleOp> codegen::lowerToMLIR(MLIRContext &ctx,
                                           const dsl::KernelDef &def,
                                           const Plan &plan,
                                           const LoweringFacts &facts,
                                           StringRef entryName,
                                           LoweringStats &stats) {
  KernelBuilder kb(ctx, def, plan, facts, stats);
  return kb.build(entryName);
}
