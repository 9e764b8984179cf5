//===- codegen/EmitFold.cpp - A fold: pushes, tree stages, broadcast ------===//
//
// The fold evaluates the interpreter's DAG: each lane pushes its elements
// in order (into its accumulators, merged serially), each tree stage updates exactly the lanes whose offset bit is
// clear, and lane 0's state is broadcast (README.md, "Fold lanes"). The
// fold-knowledge stage (FoldKnowledge.h) says which registers are
// constants and which keep-selects are dead.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;

namespace {

bool isConst(Value v) { return bool(v.getDefiningOp<arith::ConstantOp>()); }

} // namespace

Value KernelBuilder::sharedArray(StringRef name, int64_t floats) {
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    auto arrTy = LLVM::LLVMArrayType::get(f32, floats);
    LLVM::GlobalOp::create(b, loc, arrTy, /*isConstant=*/false,
                           LLVM::Linkage::Internal, name, Attribute(),
                           /*alignment=*/16, /*addrSpace=*/3);
  }
  return LLVM::AddressOfOp::create(b, loc, ptrShared, name);
}

Value KernelBuilder::sharedAddr(Value buf, Value index) {
  return LLVM::GEPOp::create(b, loc, ptrShared, f32, buf, ValueRange{index});
}

void KernelBuilder::combineInto(const dsl::Combiner &cb,
                                std::vector<Value> &self,
                                const std::vector<Value> &other, Value cond) {
  std::vector<Value> args = self;
  args.insert(args.end(), other.begin(), other.end());
  std::vector<Value> r = evalBody(cb.combineBody(), args);
  for (size_t i = 0; i < self.size(); ++i)
    self[i] = cond ? sel(cond, r[i], self[i]) : r[i];
}

void KernelBuilder::substituteConstants(size_t f, size_t point,
                                        LaneStates &st) {
  const FoldFacts &ff = facts[f];
  for (int L = 0; L < int(st.size()); ++L)
    for (int i = 0; i < ff.fields; ++i)
      if (std::optional<uint32_t> c = ff.constant(point, L, i))
        st[L][i] = cF32Bits(*c);
}

void KernelBuilder::pushVector(size_t f, LaneStates &acc, int lo, int64_t m,
                               llvm::function_ref<const Access &(int)> chunk) {
  // Elements in order, each into its accumulator: element e (byElement),
  // else the lane's m-th vector's state m % acc.
  const FoldPlan &fp = plan.folds[f];
  const dsl::FoldDecl &decl = def.folds[f];
  for (int e = 0; e < fp.V; ++e) {
    int off = lo * fp.V + e;
    const Access &a = chunk(off / fp.access);
    if (!a.col)
      continue; // never in range
    pushElement(f, acc[fp.byElement ? e : int(m % fp.acc)],
                elemValue(decl.input.get(), a, off % fp.access), a.inRange);
  }
}

void KernelBuilder::pushElement(size_t f, std::vector<Value> &s, Value x,
                                Value in) {
  std::vector<Value> args = s;
  args.push_back(x);
  std::vector<Value> next = evalBody(def.folds[f].combiner->pushBody(), args);
  if (in)
    for (size_t i = 0; i < s.size(); ++i)
      next[i] = sel(in, next[i], s[i]);
  s = std::move(next);
}

// Ids of the head and tail accesses: after every vector access.
constexpr int kRowEdgeIds = 1 << 24;

void KernelBuilder::pushRowEdge(size_t f, std::vector<Value> &s, int hi,
                                bool head) {
  // Lane t = p + Pf * hi (A = 1). With h = rowHead: lane t pushes head
  // column t + h - V where V - h <= t < V; the tail starts after the
  // (D - h) / V whole vectors, at D - (D - h) % V, and lane t pushes its
  // column t when that lies in the row.
  const FoldPlan &fp = plan.folds[f];
  const int64_t D = plan.cols;
  if (int64_t(fp.Pf) * hi >= fp.V)
    return; // every lane of the register is at least V
  Value t = arith::AddIOp::create(b, loc, pIdx, cIdx(int64_t(fp.Pf) * hi));
  Value h = rowHead(fp.V);
  Value th = arith::AddIOp::create(b, loc, t, h);
  Value col, in = cmpI(arith::CmpIPredicate::ult, t, cIdx(fp.V));
  if (head) {
    in = andI(in, cmpI(arith::CmpIPredicate::uge, th, cIdx(fp.V)));
    col = arith::SubIOp::create(b, loc, th, cIdx(fp.V));
  } else {
    Value rest = arith::AndIOp::create(
        b, loc, arith::SubIOp::create(b, loc, cIdx(D), h), cIdx(fp.V - 1));
    col = arith::AddIOp::create(
        b, loc, arith::SubIOp::create(b, loc, cIdx(D), rest), t);
    in = andI(in, cmpI(arith::CmpIPredicate::ult, col, cIdx(D)));
  }
  Access a;
  a.id = kRowEdgeIds + 2 * hi + (head ? 0 : 1);
  a.width = 1;
  a.inRange = in;
  a.col = sel(in, col, cIdx(0));
  pushElement(f, s, elemValue(def.folds[f].input.get(), a, 0), in);
}

void KernelBuilder::emitPushes(size_t f, const std::vector<Access> &accs,
                               LaneStates &st) {
  // Lane (lo, hi) pushes vectors m = 0, 1, ..., then aten's serial merge
  // ((a0 + a1) + a2) + ...
  const FoldPlan &fp = plan.folds[f];
  const int perChunk = fp.A * fp.V / fp.access;
  for (int hi = 0; hi < fp.k / fp.A; ++hi)
    for (int lo = 0; lo < fp.A; ++lo) {
      LaneStates acc(fp.acc, st[lo + fp.A * hi]);
      if (fp.headTail) // the head first (A = 1: lo = 0)
        pushRowEdge(f, acc[0], hi, /*head=*/true);
      for (int64_t m = 0; m < fp.reps; ++m)
        pushVector(f, acc, lo, m, [&](int j) -> const Access & {
          return accs[(hi * fp.reps + m) * perChunk + j];
        });
      if (fp.headTail) // the tail last
        pushRowEdge(f, acc[0], hi, /*head=*/false);
      mergeAccumulators(f, acc);
      st[lo + fp.A * hi] = std::move(acc[0]);
    }
}

void KernelBuilder::mergeAccumulators(size_t f, LaneStates &acc) {
  for (size_t i = 1; i < acc.size(); ++i)
    combineInto(*def.folds[f].combiner, acc[0], acc[i], Value());
}

void KernelBuilder::emitSharedStage(size_t f, const StagePlan &sp,
                                    LaneStates &st, Value exchange) {
  const FoldPlan &fp = plan.folds[f];
  const int F = facts[f].fields, P = plan.config.threadsPerRow;
  auto slot = [&](Value thread, int L, int field) {
    // ((row * P + thread) * k + L) * F + field, in i32.
    Value v = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, rowInCta, cI32(P)), thread);
    v = arith::MulIOp::create(b, loc, v, cI32(fp.k * F));
    return arith::AddIOp::create(b, loc, v, cI32(L * F + field));
  };
  int q = sp.threadOffset;
  for (int L = 0; L < fp.k; ++L)
    for (int i = 0; i < F; ++i)
      LLVM::StoreOp::create(b, loc, st[L][i],
                            sharedAddr(exchange, slot(laneInRow, L, i)), 4);
  barrier();
  Value clear = cmpI(arith::CmpIPredicate::eq,
                     arith::AndIOp::create(b, loc, laneInRow, cI32(q)), cI32(0));
  // Threads with the bit set read themselves (their result is unused).
  Value partner =
      sel(clear, arith::AddIOp::create(b, loc, laneInRow, cI32(q)), laneInRow);
  for (int L = 0; L < fp.k; ++L) {
    std::vector<Value> other;
    for (int i = 0; i < F; ++i)
      other.push_back(LLVM::LoadOp::create(
          b, loc, f32, sharedAddr(exchange, slot(partner, L, i)), 4));
    combineInto(*def.folds[f].combiner, st[L], other, clear);
  }
  barrier();
}

void KernelBuilder::emitStage(size_t f, size_t si, LaneStates &st,
                              Value exchange) {
  const FoldPlan &fp = plan.folds[f];
  const dsl::Combiner &cb = *def.folds[f].combiner;
  const StagePlan &sp = fp.stages[si];
  switch (sp.where) {
  case StagePlan::RegisterLo: {
    int o = sp.threadOffset;
    for (int hi = 0; hi < fp.k / fp.A; ++hi)
      for (int lo = 0; lo + o < fp.A; ++lo)
        if (!(lo & o))
          combineInto(cb, st[lo + fp.A * hi], st[lo + o + fp.A * hi], Value());
    return;
  }
  case StagePlan::RegisterHi: {
    int m = sp.threadOffset;
    for (int hi = 0; hi + m < fp.k / fp.A; ++hi)
      if (!(hi & m))
        for (int lo = 0; lo < fp.A; ++lo)
          combineInto(cb, st[lo + fp.A * hi], st[lo + fp.A * (hi + m)],
                      Value());
    return;
  }
  case StagePlan::Shuffle: {
    int q = sp.threadOffset;
    Value clear =
        cmpI(arith::CmpIPredicate::eq,
             arith::AndIOp::create(b, loc, laneInRow, cI32(q)), cI32(0));
    for (int L = 0; L < fp.k; ++L) {
      std::vector<Value> other;
      for (Value v : st[L])
        other.push_back(isConst(v) ? v // the same in every thread
                                   : NVVM::ShflOp::create(
                                         b, loc, f32, cI32(-1), v, cI32(q),
                                         cI32(0x1f), NVVM::ShflKind::down,
                                         UnitAttr()));
      combineInto(cb, st[L], other, facts[f].keep[si][L] ? clear : Value());
    }
    return;
  }
  case StagePlan::Shared: emitSharedStage(f, sp, st, exchange); return;
  }
}

std::vector<Value> KernelBuilder::broadcastLane0(size_t f,
                                                 const LaneStates &st) {
  // Lane 0's state: thread 0 of the row, register lane 0.
  const int F = facts[f].fields, P = plan.config.threadsPerRow;
  std::vector<Value> state(F);
  if (P <= 32) {
    Value src = arith::AndIOp::create(
        b, loc, arith::AndIOp::create(b, loc, tid, cI32(31)), cI32(~(P - 1)));
    for (int i = 0; i < F; ++i)
      state[i] = isConst(st[0][i])
                     ? st[0][i]
                     : NVVM::ShflOp::create(b, loc, f32, cI32(-1), st[0][i],
                                            src, cI32(0x1f),
                                            NVVM::ShflKind::idx, UnitAttr());
    return state;
  }
  Value buf = sharedArray("bf_broadcast_" + std::to_string(f),
                          int64_t(plan.config.rowsPerCta) * F);
  auto at = [&](int i) {
    return sharedAddr(
        buf, arith::AddIOp::create(
                 b, loc, arith::MulIOp::create(b, loc, rowInCta, cI32(F)),
                 cI32(i)));
  };
  Value first = cmpI(arith::CmpIPredicate::eq, laneInRow, cI32(0));
  auto ifOp = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    for (int i = 0; i < F; ++i)
      LLVM::StoreOp::create(b, loc, st[0][i], at(i), 4);
  }
  barrier();
  for (int i = 0; i < F; ++i)
    state[i] = isConst(st[0][i]) ? st[0][i]
                                 : LLVM::LoadOp::create(b, loc, f32, at(i), 4);
  return state;
}

void KernelBuilder::emitFold(size_t f, const std::vector<Access> &accs) {
  const FoldPlan &fp = plan.folds[f];
  const dsl::Combiner &cb = *def.folds[f].combiner;
  // Per pixel of the thread (one but for channels-first .oN): register
  // lane L = lo + A * hi of this thread; initial state: empty. Lanes
  // across warps: every pixel's lanes meet after one barrier.
  Value exchange;
  for (int q = 0; q < copies(); ++q) {
    selectCopy(q);
    LaneStates st(fp.k);
    for (auto &s : st)
      for (float v : cb.emptyState())
        s.push_back(cF32(v));
    emitPushes(f, accs, st);
    if (plan.lanesAcrossWarps)
      storeGatheredLanes(f, st, exchange);
    else
      emitFoldTree(f, st);
  }
  if (plan.lanesAcrossWarps) {
    barrier();
    if (fp.split > 1) {
      runOwnedTrees(f, exchange);
    } else {
      for (int q = 0; q < copies(); ++q) {
        selectCopy(q);
        runGatheredTree(f, exchange);
      }
    }
  }
  selectCopy(0);
}

// Split accumulators give a pixel P * k virtual lanes (FoldPlan::split): a
// tree in every thread would read all of them P times over. Pixel copy q's
// tree runs in the threads of lane q % P only (a warp-uniform branch: a
// warp holds one lane), which store its state; after a second barrier every
// thread reads its pixels' states and finishes them.
void KernelBuilder::runOwnedTrees(size_t f, Value exchange) {
  const dsl::Combiner &cb = *def.folds[f].combiner;
  const int F = facts[f].fields, R = plan.config.rowsPerCta;
  const int P = plan.config.threadsPerRow;
  Value result = sharedArray("bf_tree_" + std::to_string(f), int64_t(R) * F);
  auto at = [&](int i) {
    return sharedAddr(result,
                      arith::AddIOp::create(b, loc, slotRow, cI32(i * R)));
  };
  for (int q = 0; q < copies(); ++q) {
    selectCopy(q);
    auto owner = scf::IfOp::create(
        b, loc, cmpI(arith::CmpIPredicate::eq, laneInRow, cI32(q % P)),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(owner.thenBlock()->getTerminator());
    std::vector<Value> state = gatheredTreeState(f, exchange);
    for (int i = 0; i < F; ++i)
      LLVM::StoreOp::create(b, loc, state[i], at(i), 4);
  }
  barrier();
  for (int q = 0; q < copies(); ++q) {
    selectCopy(q);
    std::vector<Value> state;
    for (int i = 0; i < F; ++i)
      state.push_back(LLVM::LoadOp::create(b, loc, f32, at(i), 4));
    foldResults[f] = evalBody(cb.finishBody(), state);
  }
}

// Every thread of the row stores its lanes, then after one barrier each
// reads all T and runs the stages itself, in order: lane t (offset bit
// clear) takes lane t + o, as the distributed tree does; lane 0's state
// needs no broadcast. One barrier where the distributed tree takes two
// per stage and one for the broadcast. Slot of (thread, lane L, field) of
// the row: ((thread * k + L) * F + field) * R + row, no bank conflicts.
Value KernelBuilder::gatherSlot(size_t f, Value exchange, Value thread, int L,
                                int field) {
  const FoldPlan &fp = plan.folds[f];
  const int F = facts[f].fields, R = plan.config.rowsPerCta;
  Value v = arith::MulIOp::create(b, loc, thread, cI32(fp.k * F * R));
  v = arith::AddIOp::create(b, loc, v, cI32((L * F + field) * R));
  return sharedAddr(exchange, arith::AddIOp::create(b, loc, v, slotRow));
}

void KernelBuilder::storeGatheredLanes(size_t f, LaneStates &st,
                                       Value &exchange) {
  const FoldPlan &fp = plan.folds[f];
  const int F = facts[f].fields, R = plan.config.rowsPerCta;
  substituteConstants(f, 0, st);
  if (!exchange)
    exchange = sharedArray("bf_gather_" + std::to_string(f),
                           int64_t(R) * fp.Pf * fp.k * F);
  for (int L = 0; L < fp.k; ++L)
    for (int i = 0; i < F; ++i)
      LLVM::StoreOp::create(b, loc, st[L][i],
                            gatherSlot(f, exchange, laneInRow, L, i), 4);
}

void KernelBuilder::runGatheredTree(size_t f, Value exchange) {
  const dsl::Combiner &cb = *def.folds[f].combiner;
  foldResults[f] = evalBody(cb.finishBody(), gatheredTreeState(f, exchange));
}

std::vector<Value> KernelBuilder::gatheredTreeState(size_t f, Value exchange) {
  const FoldPlan &fp = plan.folds[f];
  const dsl::Combiner &cb = *def.folds[f].combiner;
  const int F = facts[f].fields;
  auto slot = [&](Value thread, int L, int field) {
    return gatherSlot(f, exchange, thread, L, field);
  };
  // Virtual lane t = p + Pf * L (one lane per access, A = 1); with split
  // accumulators, tree lane t first merges lanes t + T0 * g serially.
  LaneStates all(fp.T);
  for (int t = 0; t < fp.T; ++t)
    for (int i = 0; i < F; ++i)
      all[t].push_back(LLVM::LoadOp::create(
          b, loc, f32, slot(cI32(t % fp.Pf), t / fp.Pf, i), 4));
  const int T0 = fp.treeLanes();
  for (int t = 0; t < T0; ++t)
    for (int g = 1; g < fp.split; ++g)
      combineInto(cb, all[t], all[t + T0 * g], Value());
  for (const StagePlan &sp : fp.stages)
    for (int t = 0; t + sp.offset < T0; ++t)
      if (!(t & sp.offset))
        combineInto(cb, all[t], all[t + sp.offset], Value());
  return all[0];
}

void KernelBuilder::emitFoldTree(size_t f, LaneStates &st) {
  const FoldPlan &fp = plan.folds[f];
  const dsl::Combiner &cb = *def.folds[f].combiner;
  assert(!plan.lanesAcrossWarps && "channels-first lanes: emitFold");
  substituteConstants(f, 0, st);
  Value exchange;
  if (fp.needsShared())
    exchange = sharedArray("bf_exchange_" + std::to_string(f),
                           int64_t(plan.config.rowsPerCta) *
                               plan.config.threadsPerRow * fp.k *
                               facts[f].fields);
  for (size_t si = 0; si < fp.stages.size(); ++si) {
    emitStage(f, si, st, exchange);
    substituteConstants(f, si + 1, st);
  }
  foldResults[f] = evalBody(cb.finishBody(), broadcastLane0(f, st));
}
