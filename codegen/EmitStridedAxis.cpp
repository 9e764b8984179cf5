//===- codegen/EmitStridedAxis.cpp - Rolled channels-first phases ---------===//
//
// A rolled channels-first plan (StridedAxis.cpp, config t1.v1.p2): the
// thread's row is C elements S apart. Each fold is a loop over C that keeps
// only its lanes' accumulators in registers (loop-carried values), then the
// fold's tree and finish as in the unrolled plan; the outputs are a second
// loop that re-reads the row. The DAG is the unrolled one's: lane t pushes
// columns t, t + T, ... (its m-th into accumulator m % acc, or 0 by
// element with V = 1), in order; the loop only stops re-emitting the body.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"


using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;

namespace {

/// Output columns per iteration of the rolled output loop (halved until C
/// allows): some loads of the row in flight per thread, not all of them.
/// 8 over 4: 3-7% faster at C = 96, 192 and 384 on the H200; 16 gained
/// 1-2% more but made ptxas spill at f32 gamma with a conv bias and 128
/// threads (bench/results/2026-12-02-chanfirst-unroll-h200.md).
constexpr int64_t kRolledUnroll = 8;
/// Rows of the fold (T * G columns each) per iteration of its loop, where
/// the row count allows: two rows' loads in flight instead of one.
constexpr int64_t kFoldRowsPerIteration = 2;

} // namespace

KernelBuilder::LoopScope::LoopScope(KernelBuilder &kb)
    : kb(kb), rowMemo(kb.rowMemo), rowReciprocals(kb.rowReciprocals),
      elemValues(std::move(kb.elemValues)), loads(std::move(kb.loads)) {
  // Values built inside a loop body stay there: none may serve code after
  // the loop, and no access id of the body may meet one from before.
  kb.elemValues.clear();
  kb.loads.clear();
}

KernelBuilder::LoopScope::~LoopScope() {
  kb.rowMemo = std::move(rowMemo);
  kb.rowReciprocals = std::move(rowReciprocals);
  kb.elemValues = std::move(elemValues);
  kb.loads = std::move(loads);
}

std::vector<Value> KernelBuilder::rolledLoop(
    int64_t trips, int64_t step, const std::vector<Value> &init,
    llvm::function_ref<std::vector<Value>(Value, ValueRange)> body) {
  // A do-while loop (trips >= 1) in blocks of its own, whose back edge
  // carries llvm.loop.unroll.disable: unrolled, it would put more of the
  // row's loads in flight than a thread has registers for, and copy the
  // program's fmas (the PTX audit counts each fma the program wrote once).
  Block *pre = b.getInsertionBlock();
  Region *region = pre->getParent();
  llvm::SmallVector<Type> types{idx};
  for (Value v : init)
    types.push_back(v.getType());
  llvm::SmallVector<Location> locs(types.size(), loc);
  Block *loop = b.createBlock(region, region->end(), types, locs);
  Block *exit = b.createBlock(region, region->end(), TypeRange(types).drop_front(),
                              ArrayRef<Location>(locs).drop_front());
  b.setInsertionPointToEnd(pre);
  llvm::SmallVector<Value> entry{cIdx(0)};
  entry.append(init.begin(), init.end());
  LLVM::BrOp::create(b, loc, entry, loop);
  b.setInsertionPointToEnd(loop);
  Value iv = loop->getArgument(0);
  std::vector<Value> next = body(iv, loop->getArguments().drop_front());
  Value iv1 = arith::AddIOp::create(b, loc, iv, cIdx(step));
  Value more = cmpI(arith::CmpIPredicate::ult, iv1, cIdx(trips * step));
  llvm::SmallVector<Value> back{iv1};
  back.append(next.begin(), next.end());
  auto br = LLVM::CondBrOp::create(b, loc, more, loop, back, exit, next);
  auto noUnroll = LLVM::LoopUnrollAttr::get(&ctx, b.getBoolAttr(true), {}, {},
                                            {}, {}, {}, {});
  br.setLoopAnnotationAttr(LLVM::LoopAnnotationAttr::get(
      &ctx, {}, {}, {}, noUnroll, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}));
  b.setInsertionPointToEnd(exit);
  return std::vector<Value>(exit->getArguments().begin(),
                            exit->getArguments().end());
}

void KernelBuilder::pushColumn(size_t f, std::vector<Value> &state, int id,
                               Value col) {
  // Column `col` is in range: the loop and the tail visit only those.
  const dsl::FoldDecl &decl = def.folds[f];
  Access a{id, 1, col, Value()};
  std::vector<Value> args = state;
  args.push_back(elemValue(decl.input.get(), a, 0));
  state = evalBody(decl.combiner->pushBody(), args);
}

void KernelBuilder::emitRolledFold(size_t f) {
  const FoldPlan &fp = plan.folds[f];
  const dsl::Combiner &cb = *def.folds[f].combiner;
  const int64_t C = plan.cols, T = fp.T;
  // State g = acc slot of lane t: st[t * G + g]. Columns T*m + t, the m-th
  // into slot m % G; rows m < C / T are whole (every lane in range), the
  // loop takes them K * G at a time, the rest is unrolled after it.
  const int G = fp.byElement ? 1 : fp.acc;
  const int F = int(cb.numFields());
  LaneStates st(T * G);
  for (auto &s : st)
    for (float v : cb.emptyState())
      s.push_back(cF32(v));
  const int64_t iters = (C / T) / G; // whole rows of T * G columns
  int64_t K = kFoldRowsPerIteration;
  while (K > 1 && iters % K)
    K /= 2;
  if (iters > 0) {
    std::vector<Value> init;
    for (auto &s : st)
      init.insert(init.end(), s.begin(), s.end());
    std::vector<Value> res = rolledLoop(
        iters / K, K * T * G, init, [&](Value base, ValueRange carried) {
          LoopScope scope(*this);
          for (int64_t L = 0; L < T * G; ++L)
            for (int i = 0; i < F; ++i)
              st[L][i] = carried[L * F + i];
          int id = 0;
          for (int64_t k = 0; k < K; ++k)
            for (int g = 0; g < G; ++g)
              for (int64_t t = 0; t < T; ++t) {
                Value col = arith::AddIOp::create(b, loc, base,
                                                  cIdx(k * T * G + T * g + t));
                pushColumn(f, st[t * G + g], id++, col);
              }
          std::vector<Value> out;
          for (auto &s : st)
            out.insert(out.end(), s.begin(), s.end());
          return out;
        });
    for (int64_t L = 0; L < T * G; ++L)
      for (int i = 0; i < F; ++i)
        st[L][i] = res[L * F + i];
  }
  {
    LoopScope scope(*this); // the tail: ids of its own
    int id = 0;
    for (int64_t m = iters * G; m < fp.reps; ++m)
      for (int64_t t = 0; t < T && T * m + t < C; ++t)
        pushColumn(f, st[t * G + m % G], id++, cIdx(T * m + t));
  }
  // Each lane merges its accumulators serially, as the unrolled pushes do.
  LaneStates lanes(T);
  for (int64_t t = 0; t < T; ++t) {
    lanes[t] = st[t * G];
    for (int g = 1; g < G; ++g)
      combineInto(cb, lanes[t], st[t * G + g], Value());
  }
  emitFoldTree(f, lanes);
}

void KernelBuilder::emitRolledOutputs() {
  const int64_t C = plan.cols;
  int64_t U = kRolledUnroll;
  while (U > 1 && C % U)
    U /= 2;
  rolledLoop(C / U, U, {}, [&](Value c, ValueRange) {
    LoopScope scope(*this);
    std::vector<Access> accs;
    for (int64_t u = 0; u < U; ++u)
      accs.push_back(Access{
          int(u), 1, u ? arith::AddIOp::create(b, loc, c, cIdx(u)) : c,
          Value()});
    emitOutputs(gatherOutputs(accs));
    return std::vector<Value>();
  });
}
