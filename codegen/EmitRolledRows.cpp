//===- codegen/EmitRolledRows.cpp - Rolled rows ---------------------------===//
//
// Rolled rows (Plan::rolledRows; Plan.h's rolledRowsMode says which): a
// two-pass or fold-free row plan whose per-chunk repetition is a loop
// instead of a full unroll, so the PTX (and nvJitLink's and the NVPTX
// backend's time) no longer grows with the row. Each fold's vectors m < loopReps are a loop (rolledLoop,
// EmitStridedAxis.cpp) of loopStep vectors per iteration carrying every
// accumulator of the thread's lanes; the output chunks j < outLoopChunks a
// second loop; what follows (chunks a loop would have to predicate) is
// unrolled after it. The DAG is the unrolled plan's: each accumulator
// takes the same elements in the same order (vector m into state m % acc:
// loopStep is a multiple of acc, so that is the body's constant), the
// lanes merge serially and the tree runs as before. One pass keeps the row
// in registers between the fold and the outputs, and a loop cannot index
// registers: those plans stay unrolled.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;

namespace {

using LaneAccumulators = std::vector<std::vector<std::vector<Value>>>;

/// Every field of every accumulator of every lane, in one list.
std::vector<Value> flatten(const LaneAccumulators &acc) {
  std::vector<Value> out;
  for (const auto &lane : acc)
    for (const auto &s : lane)
      out.insert(out.end(), s.begin(), s.end());
  return out;
}

/// The inverse of flatten.
void unflatten(ValueRange values, LaneAccumulators &acc) {
  size_t i = 0;
  for (auto &lane : acc)
    for (auto &s : lane)
      for (Value &v : s)
        v = values[i++];
}

} // namespace

void KernelBuilder::hoistRowValues(const ExprNode *root) {
  // LoopScope keeps what a loop body builds in the body, per-row values
  // too: built there, they would run every iteration (LLVM's LICM moved
  // most, not hf_rmsnorm's select of two rsqrt), where the unrolled kernel
  // runs them once.
  std::vector<const ExprNode *> stack{root};
  llvm::DenseSet<const ExprNode *> seen;
  while (!stack.empty()) {
    const ExprNode *n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second)
      continue;
    if (!isElem(n)) {
      rowValue(n);
      continue;
    }
    for (const dsl::Expr &a : n->args)
      stack.push_back(a.get());
  }
}

void KernelBuilder::emitRolledRowFold(size_t f) {
  const FoldPlan &fp = plan.folds[f];
  if (fp.loopReps == 0) // the unrolled fold, op for op
    return emitFold(f, foldAccesses(fp, 0, fp.reps));
  const dsl::Combiner &cb = *def.folds[f].combiner;
  const int perChunk = fp.A * fp.V / fp.access;
  std::vector<Value> empty;
  for (float v : cb.emptyState())
    empty.push_back(cF32(v));
  // [register lane lo + A * hi][accumulator]: all start empty.
  LaneAccumulators acc(fp.k, LaneStates(fp.acc, empty));
  // Vectors [mBegin, mEnd) of every lane of the thread, from `accs`
  // (foldAccesses of that range); vector m's accumulator is m % acc.
  auto push = [&](int64_t mBegin, int64_t mEnd,
                  const std::vector<Access> &accs) {
    for (int hi = 0; hi < fp.k / fp.A; ++hi)
      for (int lo = 0; lo < fp.A; ++lo)
        for (int64_t m = mBegin; m < mEnd; ++m)
          pushVector(f, acc[lo + fp.A * hi], lo, m, [&](int j) -> const Access & {
            return accs[(hi * (mEnd - mBegin) + m - mBegin) * perChunk + j];
          });
  };
  hoistRowValues(def.folds[f].input.get());
  // The loop's column shift: 0, colStep, ..., at most maxShift.
  const int64_t colStep = fp.loopStep * fp.T * fp.V;
  const int64_t maxShift = fp.loopReps * fp.T * fp.V - colStep;
  std::vector<Value> res = rolledLoop(
      fp.loopReps / fp.loopStep, colStep, flatten(acc),
      [&](Value shift, ValueRange carried) {
        LoopScope scope(*this);
        unflatten(carried, acc);
        push(0, fp.loopStep, foldAccesses(fp, 0, fp.loopStep, shift, maxShift));
        return flatten(acc);
      });
  unflatten(res, acc);
  // The rest, unrolled (ids from 0 again: the loop's stayed in its scope).
  push(fp.loopReps, fp.reps, foldAccesses(fp, fp.loopReps, fp.reps));
  LaneStates st(fp.k);
  for (int L = 0; L < fp.k; ++L) {
    mergeAccumulators(f, acc[L]);
    st[L] = std::move(acc[L][0]);
  }
  emitFoldTree(f, st);
}

void KernelBuilder::emitRolledRowOutputs() {
  const int64_t colStep =
      plan.outLoopStep * plan.config.threadsPerRow * plan.outVectorElems;
  const int64_t trips = plan.outLoopChunks / plan.outLoopStep;
  if (trips > 0) {
    for (const dsl::OperandDecl &o : def.operands)
      if (o.isOutput && o.map != dsl::IndexMap::PerRow)
        hoistRowValues(o.value.get());
    rolledLoop(trips, colStep, {}, [&](Value shift, ValueRange) {
      LoopScope scope(*this);
      emitOutputs(outputAccesses(0, plan.outLoopStep, shift,
                                 (trips - 1) * colStep),
                  /*rowOutputs=*/false);
      return std::vector<Value>();
    });
  }
  // The rest, unrolled, then the per-row outputs.
  emitOutputs(outputAccesses(plan.outLoopChunks, plan.outChunks));
}
