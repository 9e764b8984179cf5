//===- codegen/FoldKnowledge.cpp - Static facts of a fold -----------------===//

#include "codegen/FoldKnowledge.h"

#include "dsl/Interp.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <bit>
#include <functional>
#include <numeric>

using namespace bitfold;
using namespace bitfold::codegen;
using dsl::ExprNode;
using DOp = dsl::Op;

namespace {

using Known = std::vector<std::optional<float>>;

/// The ops the host folds on known arguments, evaluated by the
/// interpreter's own hooks (dsl::evaluateOp). The set is deliberately this
/// narrow one: folding more ops would make more registers constant and
/// change the generated code. Anything else is unknown.
bool foldsOnHost(DOp op) {
  switch (op) {
  case DOp::Neg: case DOp::Abs: case DOp::Extend: case DOp::Add:
  case DOp::Sub: case DOp::Mul: case DOp::Fma: case DOp::CmpLT:
  case DOp::CmpLE: case DOp::CmpGT: case DOp::CmpGE: case DOp::CmpEQ:
  case DOp::CmpNE: case DOp::And: case DOp::Or: case DOp::Not:
    return true;
  default:
    return false;
  }
}

Known evalKnown(const dsl::State &body, const Known &args) {
  llvm::DenseMap<const ExprNode *, std::optional<float>> memo;
  std::function<std::optional<float>(const ExprNode *)> ev =
      [&](const ExprNode *n) -> std::optional<float> {
    if (auto it = memo.find(n); it != memo.end())
      return it->second;
    std::optional<float> r;
    if (n->op == DOp::Placeholder) {
      r = args[n->index];
    } else if (n->op == DOp::Const) {
      r = std::bit_cast<float>(n->bits);
    } else if (n->op == DOp::Select) {
      if (std::optional<float> c = ev(n->args[0].get()))
        r = ev(n->args[*c != 0.0f ? 1 : 2].get());
    } else {
      llvm::SmallVector<float, 3> a;
      for (const dsl::Expr &x : n->args)
        if (std::optional<float> v = ev(x.get()))
          a.push_back(*v);
      if (a.size() == n->args.size() && foldsOnHost(n->op))
        r = dsl::evaluateOp(*n, a);
    }
    memo[n] = r;
    return r;
  };
  Known out;
  for (const dsl::Expr &e : body.fields)
    out.push_back(ev(e.get()));
  return out;
}

bool updated(int t, int o, int T) { return !(t & o) && t + o < T; }

/// The combiner's merge of states a and b, on what is known of them.
Known combineKnown(const dsl::Combiner &cb, const Known &a, const Known &b) {
  Known args = a;
  args.insert(args.end(), b.begin(), b.end());
  return evalKnown(cb.combineBody(), args);
}

/// live[s][t]: tree lane t's state before stage s still reaches lane 0's
/// final state (live[stages]: after the last stage). The stages run over
/// the tree's lanes (FoldPlan::treeLanes); lanes past them, where
/// accumulators split, are never live here (pushedLiveness).
std::vector<std::vector<bool>> liveness(const FoldPlan &fp) {
  const size_t n = fp.stages.size();
  const int T0 = fp.treeLanes();
  std::vector<std::vector<bool>> live(n + 1, std::vector<bool>(fp.T));
  live[n][0] = true;
  for (size_t si = n; si-- > 0;) {
    int o = fp.stages[si].offset;
    for (int t = 0; t < T0; ++t)
      if (live[si + 1][t]) {
        live[si][t] = true;
        if (updated(t, o, T0))
          live[si][t + o] = true;
      }
  }
  return live;
}

/// Which lanes' states after the pushes reach lane 0's final state: with
/// split accumulators (FoldPlan::split) lane t + T0 * g merges into tree
/// lane t, so it lives where tree lane t does before the first stage.
std::vector<bool> pushedLiveness(const FoldPlan &fp,
                                 const std::vector<bool> &tree) {
  std::vector<bool> live(fp.T);
  for (int t = 0; t < fp.T; ++t)
    live[t] = tree[t % fp.treeLanes()];
  return live;
}

/// Split accumulators (FoldPlan::split): tree lane t's state is the serial
/// merge of lanes t, t + T0, ...; the lanes past T0 are then unused.
void mergeSplitLanes(const FoldPlan &fp, const dsl::Combiner &cb,
                     std::vector<Known> &known) {
  const int T0 = fp.treeLanes();
  for (int t = 0; t < T0; ++t)
    for (int g = 1; g < fp.split; ++g)
      known[t] = combineKnown(cb, known[t], known[t + T0 * g]);
}

int laneOf(const FoldPlan &fp, int p, int L) {
  return L % fp.A + fp.A * (p + fp.Pf * (L / fp.A));
}

/// The registers whose live lanes all hold one known value.
std::vector<std::optional<uint32_t>>
constantsAt(const FoldPlan &fp, const std::vector<Known> &known,
            const std::vector<bool> &live, int F) {
  std::vector<std::optional<uint32_t>> out(size_t(fp.k) * F);
  for (int L = 0; L < fp.k; ++L)
    for (int i = 0; i < F; ++i) {
      std::optional<uint32_t> bits;
      bool ok = true, any = false;
      for (int p = 0; p < fp.Pf && ok; ++p) {
        int t = laneOf(fp, p, L);
        if (t >= fp.T || !live[t])
          continue;
        any = true;
        if (!known[t][i]) {
          ok = false;
          break;
        }
        uint32_t bt = std::bit_cast<uint32_t>(*known[t][i]);
        if (bits && *bits != bt)
          ok = false;
        bits = bt;
      }
      if (ok && any)
        out[size_t(L) * F + i] = bits;
    }
  return out;
}

/// Lane states after the pushes: lane t pushes the elements of vectors t,
/// t + T, ... into its accumulators, merged serially (values unknown, only
/// their count matters). `head` >= 0: aligned vectors from column `head`,
/// whole ones only; lane V-head..V-1 pushes a head element into state 0
/// first, lane t < (cols - head) % V a tail element after its vectors.
std::vector<Known> pushedStates(const FoldPlan &fp, const dsl::Combiner &cb,
                                int64_t cols, int64_t head) {
  std::vector<Known> known(fp.T);
  Known empty;
  for (float v : cb.emptyState())
    empty.push_back(v);
  const bool edges = head >= 0;
  const int64_t vectors =
      edges ? (cols - head) / fp.V : (cols + fp.V - 1) / fp.V;
  const int64_t tail = edges ? (cols - head) % fp.V : 0;
  auto push = [&](Known &s) {
    Known args = s;
    args.push_back(std::nullopt);
    s = evalKnown(cb.pushBody(), args);
  };
  for (int t = 0; t < fp.T; ++t) {
    std::vector<Known> acc(fp.acc, empty);
    if (edges && t < fp.V && t >= fp.V - head)
      push(acc[0]);
    for (int64_t v = t, m = 0; v < vectors; v += fp.T, ++m)
      for (int e = 0; e < fp.V && (edges || v * fp.V + e < cols); ++e)
        push(acc[fp.byElement ? e : int(m % fp.acc)]);
    if (t < tail)
      push(acc[0]);
    for (int i = 1; i < fp.acc; ++i)
      acc[0] = combineKnown(cb, acc[0], acc[i]);
    known[t] = std::move(acc[0]);
  }
  return known;
}

/// The lane states after the pushes that hold for every row: a head/tail
/// fold's rows have heads -(r * cols) mod V, the multiples of gcd(cols, V)
/// below V; a field is known only where every head gives it the same bits.
std::vector<Known> pushedStatesOfEveryRow(const FoldPlan &fp,
                                          const dsl::Combiner &cb,
                                          int64_t cols) {
  if (!fp.headTail)
    return pushedStates(fp, cb, cols, -1);
  const int64_t g = std::gcd(cols, int64_t(fp.V));
  std::vector<Known> all = pushedStates(fp, cb, cols, 0);
  for (int64_t s = g; s < fp.V; s += g) {
    std::vector<Known> k = pushedStates(fp, cb, cols, fp.V - s);
    for (size_t t = 0; t < all.size(); ++t)
      for (size_t i = 0; i < all[t].size(); ++i)
        if (all[t][i] && (!k[t][i] || std::bit_cast<uint32_t>(*k[t][i]) !=
                                          std::bit_cast<uint32_t>(*all[t][i])))
          all[t][i] = std::nullopt;
  }
  return all;
}

} // namespace

FoldFacts codegen::analyseFold(const FoldPlan &fp, const dsl::Combiner &cb,
                               int64_t cols, int threadsPerRow) {
  FoldFacts facts;
  const int F = int(cb.numFields());
  facts.fields = F;
  std::vector<std::vector<bool>> live = liveness(fp);
  std::vector<Known> known = pushedStatesOfEveryRow(fp, cb, cols);
  facts.constants.push_back(
      constantsAt(fp, known, pushedLiveness(fp, live[0]), F));
  if (fp.split > 1)
    mergeSplitLanes(fp, cb, known);
  for (size_t si = 0; si < fp.stages.size(); ++si) {
    const StagePlan &sp = fp.stages[si];
    std::vector<bool> keep(fp.k, false);
    for (int L = 0; L < fp.k; ++L)
      for (int p = 0; p < threadsPerRow && p < fp.Pf; ++p) {
        int t = laneOf(fp, p, L);
        if ((p & sp.threadOffset) && t < fp.T && live[si + 1][t])
          keep[L] = true;
      }
    facts.keep.push_back(std::move(keep));
    // The interpreter's stage on the static knowledge.
    std::vector<Known> next = known;
    for (int t = 0; t < fp.treeLanes(); ++t)
      if (updated(t, sp.offset, fp.treeLanes()))
        next[t] = combineKnown(cb, known[t], known[t + sp.offset]);
    known = std::move(next);
    facts.constants.push_back(constantsAt(fp, known, live[si + 1], F));
  }
  return facts;
}

void codegen::printFoldFacts(llvm::raw_ostream &os, const Plan &plan,
                             llvm::ArrayRef<FoldFacts> facts) {
  for (size_t f = 0; f < facts.size(); ++f) {
    const FoldFacts &ff = facts[f];
    const FoldPlan &fp = plan.folds[f];
    os << llvm::formatv("fold {0}: T={1} V={2} Pf={3} k={4} A={5}\n", f, fp.T,
                        fp.V, fp.Pf, fp.k, fp.A);
    for (size_t point = 0; point < ff.constants.size(); ++point) {
      os << (point ? llvm::formatv("  after stage {0} (offset {1}):", point - 1,
                                   fp.stages[point - 1].offset)
                         .str()
                   : std::string("  after pushes:"));
      for (int L = 0; L < fp.k; ++L)
        for (int i = 0; i < ff.fields; ++i)
          if (std::optional<uint32_t> c = ff.constant(point, L, i))
            os << llvm::formatv(" L{0}.f{1}=0x{2:x-8}", L, i, *c);
      if (point > 0 && fp.stages[point - 1].where == StagePlan::Shuffle)
        for (int L = 0; L < fp.k; ++L)
          if (!ff.keep[point - 1][L])
            os << " L" << L << ":no-keep";
      os << "\n";
    }
  }
}
