//===- codegen/VectorAccess.cpp - Which columns a thread touches ----------===//
//
// The accesses of a phase (fold or output mapping) and their loads and
// stores: pieces of at most 16 bytes, bf16 pairs as 32-bit words (loaded,
// and widened from a paired op's word, or again from the loaded word for
// a packed row's outputs).
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;
using dsl::DType;
using DOp = dsl::Op;

Access KernelBuilder::makeAccess(int id, int width, Value col, int64_t maxCol,
                                 bool threadsIdle, Value threadActive,
                                 int64_t reach) {
  Access a;
  a.id = id;
  a.width = width;
  const int64_t D = plan.cols;
  if (maxCol + reach < D && !threadsIdle) {
    a.col = col;
    return a;
  }
  Value last = reach ? arith::AddIOp::create(b, loc, col, cIdx(reach)) : col;
  Value in = cmpI(arith::CmpIPredicate::ult, last, cIdx(D));
  if (threadsIdle)
    in = andI(in, threadActive);
  a.inRange = in;
  a.unclamped = col;
  a.col = sel(in, col, cIdx(0));
  return a;
}

std::vector<Access> KernelBuilder::foldAccesses(const FoldPlan &fp,
                                                int64_t mBegin, int64_t mEnd,
                                                Value shift, int64_t maxShift) {
  // Chunk (hi, m): columns (A * (p + Pf * hi) + T * m) * V + [0, A * V),
  // plus `shift` (a rolled loop's column, at most maxShift). A head/tail
  // fold (A = 1) adds the row's head h < V and counts an access only where
  // its whole vector lies in the row (`reach`: the vector's last column).
  std::vector<Access> accs;
  const int64_t D = plan.cols;
  const int chunk = fp.A * fp.V, perChunk = chunk / fp.access;
  bool idle = plan.config.threadsPerRow > fp.Pf;
  Value active;
  if (idle)
    active = cmpI(arith::CmpIPredicate::ult, pIdx, cIdx(fp.Pf));
  Value pCol = arith::MulIOp::create(b, loc, pIdx, cIdx(chunk));
  if (shift)
    pCol = arith::AddIOp::create(b, loc, pCol, shift);
  if (fp.headTail)
    pCol = arith::AddIOp::create(b, loc, pCol, rowHead(fp.V));
  const int64_t maxHead = fp.headTail ? fp.V - 1 : 0;
  for (int hi = 0; hi < fp.k / fp.A; ++hi)
    for (int64_t m = mBegin; m < mEnd; ++m)
      for (int j = 0; j < perChunk; ++j) {
        int id = int((hi * (mEnd - mBegin) + m - mBegin) * perChunk + j);
        int64_t cs = (int64_t(fp.A) * fp.Pf * hi + fp.T * m) * fp.V +
                     int64_t(j) * fp.access;
        int64_t reach = fp.headTail ? fp.V - 1 - int64_t(j) * fp.access : 0;
        if (cs + maxShift + reach >= D) {
          accs.push_back(Access{id, 0, Value(), Value()}); // never in range
          continue;
        }
        Value col = arith::AddIOp::create(b, loc, pCol, cIdx(cs));
        accs.push_back(
            makeAccess(id, fp.access, col,
                       cs + maxShift + maxHead + int64_t(chunk) * (fp.Pf - 1),
                       idle, active, reach));
        if (chunk == 1 && !shift && !fp.headTail)
          accs.back().laneOffset = cs;
      }
  return accs;
}

Value KernelBuilder::rowHead(int V) {
  // h = -(r * C) mod V (V a power of two): the columns before the row's
  // first V-aligned element (aten's head; docs/aten-reduce.md section 3).
  assert(V > 0 && !(V & (V - 1)) && "aligned vectors: a power of two");
  Value rc =
      arith::MulIOp::create(b, loc, toIdx(rowInGroup), cIdx(plan.cols % V));
  return arith::AndIOp::create(
      b, loc, arith::SubIOp::create(b, loc, cIdx(0), rc), cIdx(V - 1));
}

std::vector<Access> KernelBuilder::outputAccesses(int64_t jBegin, int64_t jEnd,
                                                  Value shift,
                                                  int64_t maxShift) {
  // Chunk j: columns (p + P * j) * W + [0, W), plus `shift` as above.
  std::vector<Access> accs;
  const int64_t D = plan.cols;
  const int P = plan.config.threadsPerRow, W = plan.outVectorElems;
  Value pCol = arith::MulIOp::create(b, loc, pIdx, cIdx(W));
  if (shift)
    pCol = arith::AddIOp::create(b, loc, pCol, shift);
  for (int64_t j = jBegin; j < jEnd; ++j) {
    int64_t cs = int64_t(P) * W * j;
    if (cs + maxShift >= D)
      continue;
    Value col = arith::AddIOp::create(b, loc, pCol, cIdx(cs));
    accs.push_back(makeAccess(int(j - jBegin), W, col,
                              cs + maxShift + int64_t(W) * (P - 1), false,
                              Value()));
    if (W == 1 && !shift)
      accs.back().laneOffset = cs;
  }
  return accs;
}

Value KernelBuilder::pieceAddr(int operand, const Access &acc, int start) {
  Value col =
      start ? arith::AddIOp::create(b, loc, acc.col, cIdx(start)) : acc.col;
  if (Value s = colStride[operand])
    col = arith::MulIOp::create(b, loc, col, s);
  return LLVM::GEPOp::create(b, loc, ptrGlobal,
                             storageType(def.operands[operand].dtype),
                             base[operand], ValueRange{col});
}

Value KernelBuilder::sharedRowAddr(int operand, const Access &acc, int start,
                                   bool unclamped) {
  Type elemTy = storageType(def.operands[operand].dtype);
  const std::string name = "bf_row_" + std::to_string(operand);
  const int64_t D = plan.cols;
  if (!module.lookupSymbol(name)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    auto arrTy =
        LLVM::LLVMArrayType::get(elemTy, plan.config.rowsPerCta * D);
    LLVM::GlobalOp::create(b, loc, arrTy, /*isConstant=*/false,
                           LLVM::Linkage::Internal, name, Attribute(),
                           /*alignment=*/16, /*addrSpace=*/3);
  }
  Value buf = LLVM::AddressOfOp::create(b, loc, ptrShared, name);
  Value col = unclamped ? acc.unclamped : acc.col;
  if (start)
    col = arith::AddIOp::create(b, loc, col, cIdx(start));
  Value at = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, toIdx(rowInCta), cIdx(D)), col);
  return LLVM::GEPOp::create(b, loc, ptrShared, elemTy, buf, ValueRange{at});
}

void KernelBuilder::stageColumnTables() {
  // Column c at (c % P) * J + c / P: thread p's columns p + P * j are then
  // adjacent, so LLVM loads a gathered group's channels as one vector.
  // Threads past C store nothing; reads come after the fold's barrier.
  columnTables = columnTableOperands(def, plan);
  if (columnTables.empty())
    return;
  AtLoc at(*this, structLoc("column tables"), /*structure=*/true);
  const int64_t P = plan.config.threadsPerRow, C = plan.cols;
  const int64_t J = (C + P - 1) / P, threads = plan.config.ctaThreads();
  const int logP = std::countr_zero(uint64_t(P));
  for (int op : columnTables) {
    Type elemTy = storageType(def.operands[op].dtype);
    const std::string name = "bf_cols_" + std::to_string(op);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module.getBody());
      LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(elemTy, P * J),
                             /*isConstant=*/false, LLVM::Linkage::Internal,
                             name, Attribute(), /*alignment=*/16,
                             /*addrSpace=*/3);
    }
  }
  for (int64_t first = 0; first < C; first += threads) {
    Value c = toIdx(arith::AddIOp::create(b, loc, tid, cI32(first)));
    OpBuilder::InsertionGuard guard(b);
    if (first + threads > C) {
      auto in = scf::IfOp::create(
          b, loc, cmpI(arith::CmpIPredicate::ult, c, cIdx(C)), false);
      b.setInsertionPoint(in.thenBlock()->getTerminator());
    }
    Value slot = arith::AddIOp::create(
        b, loc,
        arith::MulIOp::create(
            b, loc, arith::AndIOp::create(b, loc, c, cIdx(P - 1)), cIdx(J)),
        arith::ShRUIOp::create(b, loc, c, cIdx(logP)));
    for (int op : columnTables) {
      const dsl::DType t = def.operands[op].dtype;
      Type elemTy = storageType(t);
      const int bytes = int(dsl::dtypeBytes(t));
      Value from = LLVM::GEPOp::create(b, loc, ptrGlobal, elemTy, base[op],
                                       ValueRange{c});
      Value buf = LLVM::AddressOfOp::create(b, loc, ptrShared,
                                            "bf_cols_" + std::to_string(op));
      Value to =
          LLVM::GEPOp::create(b, loc, ptrShared, elemTy, buf, ValueRange{slot});
      LLVM::StoreOp::create(
          b, loc, LLVM::LoadOp::create(b, loc, elemTy, from, bytes), to, bytes);
    }
  }
}

Value KernelBuilder::columnTableAddr(int operand, const Access &acc) {
  const int64_t P = plan.config.threadsPerRow;
  if (!columnTablesReady || !columnTables.count(operand) || acc.width != 1 ||
      acc.inRange || acc.laneOffset < 0 || acc.laneOffset % P)
    return Value();
  const int64_t J = (plan.cols + P - 1) / P;
  Type elemTy = storageType(def.operands[operand].dtype);
  Value buf = LLVM::AddressOfOp::create(b, loc, ptrShared,
                                        "bf_cols_" + std::to_string(operand));
  Value at = arith::AddIOp::create(b, loc,
                                   arith::MulIOp::create(b, loc, pIdx, cIdx(J)),
                                   cIdx(acc.laneOffset / P));
  return LLVM::GEPOp::create(b, loc, ptrShared, elemTy, buf, ValueRange{at});
}

Value KernelBuilder::loadStaged(Type t, Value addr, int bytes, Value stageAt,
                               Value when) {
  Value v = LLVM::LoadOp::create(b, loc, t, addr, bytes);
  if (!stageAt)
    return v;
  OpBuilder::InsertionGuard guard(b);
  if (when) {
    auto ifOp = scf::IfOp::create(b, loc, when, /*withElseRegion=*/false);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  }
  LLVM::StoreOp::create(b, loc, v, stageAt, bytes);
  return v;
}

void KernelBuilder::loadBf16Words(Value addr, int piece,
                                  std::vector<Value> &out, Value stageAt,
                                  Value when) {
  // bf16 pairs as 32-bit words; widening is then one shl (low half) or one
  // and (high half), where extracting the high half first costs a prmt.
  // Both are exact: the bf16 bits become the f32's upper half.
  Type elemTy = b.getBF16Type();
  auto wordsTy = VectorType::get({piece / 2}, i32);
  Value words = loadStaged(wordsTy, addr, piece * 2, stageAt, when);
  for (int e = 0; e < piece; ++e) {
    Value w = LLVM::ExtractElementOp::create(b, loc, words, cI32(e / 2));
    Value hi16 = w;
    if (e % 2)
      hi16 = arith::ShRUIOp::create(b, loc, w, cI32(16));
    Value v = arith::BitcastOp::create(
        b, loc, elemTy, arith::TruncIOp::create(b, loc, b.getI16Type(), hi16));
    Value wide;
    if (e % 2)
      wide = arith::AndIOp::create(b, loc, w, cI32(int32_t(0xffff0000u)));
    else
      wide = arith::ShLIOp::create(b, loc, w, cI32(16));
    widened[v] = arith::BitcastOp::create(b, loc, f32, wide);
    out.push_back(v);
  }
}

Value KernelBuilder::widenPairHalf(Value x) {
  // A half of a bf16 pair (a paired cvt.rn or bf16x2 op) widened from the
  // pair's 32-bit word, as loadBf16Words does: one shl (low half) or and
  // (high half), where extracting the half first costs ptxas a PRMT. Exact:
  // the bf16 bits become the f32's upper half.
  auto ext = x.getDefiningOp<LLVM::ExtractElementOp>();
  if (!ext)
    return Value();
  auto vecTy = llvm::dyn_cast<VectorType>(ext.getVector().getType());
  auto pos = ext.getPosition().getDefiningOp<arith::ConstantOp>();
  if (!vecTy || vecTy.getNumElements() != 2 ||
      !vecTy.getElementType().isBF16() || !pos)
    return Value();
  const int64_t half = llvm::cast<IntegerAttr>(pos.getValue()).getInt();
  Value w = LLVM::BitcastOp::create(b, loc, i32, ext.getVector());
  Value wide =
      half == 0 ? Value(arith::ShLIOp::create(b, loc, w, cI32(16)))
                : Value(arith::AndIOp::create(b, loc, w,
                                              cI32(int32_t(0xffff0000u))));
  return arith::BitcastOp::create(b, loc, f32, wide);
}

Value KernelBuilder::widenedPair(Value x, int &half) {
  // widenPairHalf's pattern: bitcast(shl(w, 16)) for the low half,
  // bitcast(and(w, 0xffff0000)) for the high one, w the pair's word.
  auto cast = x.getDefiningOp<arith::BitcastOp>();
  Operation *op = cast ? cast.getIn().getDefiningOp() : nullptr;
  if (!op || !llvm::isa<arith::ShLIOp, arith::AndIOp>(op))
    return Value();
  auto k = op->getOperand(1).getDefiningOp<arith::ConstantOp>();
  auto word = op->getOperand(0).getDefiningOp<LLVM::BitcastOp>();
  if (!k || !word)
    return Value();
  half = llvm::isa<arith::AndIOp>(op);
  const uint32_t want = half ? 0xffff0000u : 16u;
  if (uint32_t(llvm::cast<IntegerAttr>(k.getValue()).getInt()) != want)
    return Value();
  Value pair = word.getArg();
  auto vecTy = llvm::dyn_cast<VectorType>(pair.getType());
  if (!vecTy || vecTy.getNumElements() != 2 || !vecTy.getElementType().isBF16())
    return Value();
  return pair;
}

bool KernelBuilder::isKeptBf16Extend(const ExprNode *n) const {
  return n->op == DOp::Extend && n->args[0]->op == DOp::Load &&
         def.operands[n->args[0]->index].dtype == DType::BF16;
}

void KernelBuilder::startRewidening() {
  // Plan::packedRow: the fold's f32 of a bf16 load no longer serves the
  // outputs; they widen the loaded value again (rewidenBf16).
  auto drop = [&](auto &values) {
    for (auto it = values.begin(); it != values.end();)
      it = isKeptBf16Extend(it->first.first) ? values.erase(it) : std::next(it);
  };
  drop(elemValues);
  for (CopyState &s : otherCopies)
    drop(s.elemValues);
  rewidening = true;
}

Value KernelBuilder::rewidenBf16(Value h) {
  // From the loaded 32-bit word (loadBf16Words) by a prmt, not the shl/and
  // it widened h with for the fold: LLVM would merge those and keep every
  // f32 of the row live across the fold's tree, and widening the 16-bit h
  // would keep a register a half live instead of one a pair. Exact: the
  // half's bits become the f32's upper half, the rest zeros.
  auto it = widened.find(h);
  auto cast = it == widened.end() ? arith::BitcastOp()
                                  : it->second.getDefiningOp<arith::BitcastOp>();
  Operation *op = cast ? cast.getIn().getDefiningOp() : nullptr;
  if (!op || !llvm::isa<arith::ShLIOp, arith::AndIOp>(op))
    return emitExtend(h);
  const int32_t select = llvm::isa<arith::AndIOp>(op) ? 0x3244 : 0x1044;
  Value wide = intrinsic("llvm.nvvm.prmt",
                         {op->getOperand(0), cI32(0), cI32(select)}, i32);
  return arith::BitcastOp::create(b, loc, f32, wide);
}

std::vector<Value> &KernelBuilder::loadAccess(int operand, const Access &acc) {
  auto key = std::make_pair(operand, acc.id);
  auto it = loads.find(key);
  if (it != loads.end())
    return it->second;
  DType dt = def.operands[operand].dtype;
  Type elemTy = storageType(dt);
  int bytes = int(dsl::dtypeBytes(dt));
  // Columns per load, and elements per load: with o pixels per thread a
  // column of an image is the o adjacent pixels' elements at the first
  // pixel's address (contiguous, aligned: checkAlignment).
  const bool pixels = pixelVectors(operand);
  int piece = pixels ? 1 : pieceElems(operand, acc);
  int elems = pixels ? copies() : piece;
  // A shared row: the fold phase also stores the pieces to shared memory;
  // the output phase reads them from there, but for an access that may lie
  // past the row's end (clamped to column 0, which another thread stages:
  // global memory has the same bits and no race).
  const bool staged = stagedOperands.count(operand);
  std::vector<Value> out;
  if (Value at = columnTableAddr(operand, acc)) {
    out.push_back(LLVM::LoadOp::create(b, loc, elemTy, at, bytes));
    return loads[key] = std::move(out);
  }
  for (int start = 0; start < acc.width; start += piece) {
    Value addr, stageAt;
    if (staged && rowStage == RowStage::Load && !acc.inRange)
      addr = sharedRowAddr(operand, acc, start);
    else
      addr = pieceAddr(operand, acc, start);
    // Staged at the unclamped column, only where in range: no select in
    // the address, which then keeps the thread's constant offsets.
    if (staged && rowStage == RowStage::Store)
      stageAt = sharedRowAddr(operand, acc, start, bool(acc.inRange));
    if (elems == 1) {
      out.push_back(loadStaged(elemTy, addr, bytes, stageAt, acc.inRange));
      continue;
    }
    if (dt == DType::BF16) {
      loadBf16Words(addr, elems, out, stageAt, acc.inRange);
      continue;
    }
    auto vecTy = VectorType::get({elems}, elemTy);
    Value vec = loadStaged(vecTy, addr, elems * bytes, stageAt, acc.inRange);
    for (int e = 0; e < elems; ++e)
      out.push_back(LLVM::ExtractElementOp::create(b, loc, vec, cI32(e)));
  }
  return loads[key] = std::move(out);
}

void KernelBuilder::storeAccess(int operand, const Access &acc,
                                ArrayRef<Value> v) {
  DType dt = def.operands[operand].dtype;
  Type elemTy = storageType(dt);
  int bytes = int(dsl::dtypeBytes(dt));
  if (pixelVectors(operand)) { // v[e * o + q]: element e of pixel q
    const int o = copies();
    auto vecTy = VectorType::get({o}, elemTy);
    for (int e = 0; e < acc.width; ++e) {
      Value vec = LLVM::PoisonOp::create(b, loc, vecTy);
      for (int q = 0; q < o; ++q)
        vec = LLVM::InsertElementOp::create(b, loc, vec, v[e * o + q], cI32(q));
      LLVM::StoreOp::create(b, loc, vec, pieceAddr(operand, acc, e), o * bytes);
    }
    return;
  }
  int piece = pieceElems(operand, acc);
  for (int start = 0; start < acc.width; start += piece) {
    Value addr = pieceAddr(operand, acc, start);
    if (piece == 1) {
      LLVM::StoreOp::create(b, loc, v[start], addr, bytes);
      continue;
    }
    auto vecTy = VectorType::get({piece}, elemTy);
    Value vec = LLVM::PoisonOp::create(b, loc, vecTy);
    for (int e = 0; e < piece; ++e)
      vec = LLVM::InsertElementOp::create(b, loc, vec, v[start + e], cI32(e));
    LLVM::StoreOp::create(b, loc, vec, addr, piece * bytes);
  }
}
