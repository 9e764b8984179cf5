//===- codegen/ExactRewrites.cpp - Exact rewrites of the lowering ---------===//

#include "codegen/ExactRewrites.h"
#include "codegen/Environment.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"

#include <bit>
#include <cmath>
#include <functional>

using namespace bitfold;
using namespace bitfold::codegen;
using dsl::DType;
using dsl::ExprNode;
using DOp = dsl::Op;

namespace {

/// True when the f32 constant `bits` is exactly a value of `t` (BF16/F16).
bool exactIn(uint32_t bits, DType t) {
  llvm::APFloat v(std::bit_cast<float>(bits));
  bool losesInfo = false;
  llvm::APFloat::opStatus s = v.convert(
      t == DType::BF16 ? llvm::APFloat::BFloat() : llvm::APFloat::IEEEhalf(),
      llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return s == llvm::APFloat::opOK && !losesInfo && !v.isNaN();
}

bool isConst(const ExprNode *m, uint32_t bits) {
  return m->op == DOp::Const && m->bits == bits;
}

} // namespace

std::optional<NarrowArith> codegen::matchNarrowArith(const ExprNode *n,
                                                     int smVersion) {
  if (n->op != DOp::Round || dsl::isByteDType(n->roundTo) ||
      (n->roundTo == DType::BF16 && smVersion < 90))
    return std::nullopt;
  const ExprNode *m = n->args[0].get();
  if (m->op != DOp::Add && m->op != DOp::Sub && m->op != DOp::Mul)
    return std::nullopt;
  auto source = [&](const ExprNode *x) -> const ExprNode * {
    if (x->op == DOp::Extend && x->args[0]->type == n->roundTo)
      return x->args[0].get();
    if (x->op == DOp::Const && exactIn(x->bits, n->roundTo))
      return x;
    return nullptr;
  };
  const ExprNode *l = source(m->args[0].get()), *r = source(m->args[1].get());
  if (!l || !r || (l->op == DOp::Const && r->op == DOp::Const))
    return std::nullopt;
  return NarrowArith{m->op, l, r};
}

const ExprNode *codegen::matchNvccReciprocal(const ExprNode *n) {
  if (n->op != DOp::Fma || n->args[0].get() != n->args[2].get())
    return nullptr;
  const ExprNode *r = n->args[0].get();
  const ExprNode *e = n->args[1].get();
  if (r->op != DOp::RcpApproxFtz || e->op != DOp::SubFtz ||
      !isConst(e->args[0].get(), 0x80000000u))
    return nullptr;
  const ExprNode *f = e->args[1].get();
  if (f->op != DOp::Fma || f->args[0].get() != r->args[0].get() ||
      f->args[1].get() != r || !isConst(f->args[2].get(), 0xbf800000u))
    return nullptr;
  return r->args[0].get();
}

std::optional<float> codegen::nvccReciprocalValue(float x) {
  if (!(x >= 1.0f && x < 2097152.0f) || x != std::floor(x))
    return std::nullopt;
  return 1.0f / x;
}

bool codegen::matchRowDivision(
    const ExprNode *n, llvm::function_ref<bool(const ExprNode *)> perElement) {
  if (n->op != DOp::Div)
    return false;
  const ExprNode *x = n->args[0].get();
  return x->op == DOp::Extend && x->args[0]->type == DType::BF16 &&
         !perElement(n->args[1].get());
}

bool codegen::rowDivisionEnabled() {
  return envFlag("BITFOLD_ROW_DIVISION", true);
}

float codegen::rowDivisionFast(float x, float d, float y) {
  const float q0 = x * y;
  const float r = std::fma(-q0, d, x);
  return std::fma(r, y, q0);
}

namespace {

bool isPlaceholder(const dsl::Expr &e, int i) {
  return e->op == DOp::Placeholder && e->index == i;
}

/// The combiner sums squares of its input: one field, empty +0, push
/// fma(x, x, acc), combine acc + other, finish acc (norm_two_aten).
bool sumsSquares(const dsl::Combiner &c) {
  if (c.numFields() != 1 || std::bit_cast<uint32_t>(c.emptyState()[0]) != 0)
    return false;
  const ExprNode *p = c.pushBody()[0].get();
  const ExprNode *m = c.combineBody()[0].get();
  return p->op == DOp::Fma && isPlaceholder(p->args[0], 1) &&
         isPlaceholder(p->args[1], 1) && isPlaceholder(p->args[2], 0) &&
         m->op == DOp::Add &&
         ((isPlaceholder(m->args[0], 0) && isPlaceholder(m->args[1], 1)) ||
          (isPlaceholder(m->args[0], 1) && isPlaceholder(m->args[1], 0))) &&
         c.finishBody().fields.size() == 1 &&
         isPlaceholder(c.finishBody()[0], 0);
}

/// Below widenings and roundings to bf16 or f32, at most `budget` of them.
const ExprNode *belowRoundings(const ExprNode *m, int &budget) {
  while (budget > 0 &&
         (m->op == DOp::Extend ||
          (m->op == DOp::Round &&
           (m->roundTo == DType::BF16 || m->roundTo == DType::F32)))) {
    budget -= m->op == DOp::Round;
    m = m->args[0].get();
  }
  return m;
}

} // namespace

bool codegen::matchRowBound(const ExprNode *div, const dsl::KernelDef &def) {
  int budget = 8;
  const ExprNode *m = belowRoundings(div->args[1].get(), budget);
  if (m->op == DOp::MaxNaN) {
    const ExprNode *a = m->args[0].get(), *c = m->args[1].get();
    if (a->op == DOp::Const)
      std::swap(a, c);
    if (c->op != DOp::Const)
      return false;
    m = belowRoundings(a, budget);
  }
  if (m->op != DOp::Sqrt)
    return false;
  const ExprNode *s = m->args[0].get();
  if (s->op != DOp::FoldValue || s->field != 0 || s->index < 0 ||
      size_t(s->index) >= def.folds.size())
    return false;
  const dsl::FoldDecl &f = def.folds[size_t(s->index)];
  return f.input.get() == div->args[0].get() && sumsSquares(*f.combiner);
}

bool codegen::rowBoundEnabled() {
  return envFlag("BITFOLD_ROW_BOUND", true);
}

RoundedDivision codegen::matchRoundedRowDivision(
    const ExprNode *n, const llvm::DenseSet<const ExprNode *> &rowDivision) {
  if (n->op != DOp::Round || n->roundTo != DType::BF16 ||
      !rowDivision.contains(n->args[0].get()))
    return RoundedDivision::No;
  const ExprNode *d = n->args[0]->args[1].get();
  return d->op == DOp::Extend && d->args[0]->type == DType::BF16
             ? RoundedDivision::Plain
             : RoundedDivision::Windowed;
}

bool codegen::roundedDivisionEnabled() {
  return envFlag("BITFOLD_ROUNDED_DIVISION", true);
}

const ExprNode *codegen::matchFastSilu(const ExprNode *n) {
  if (n->op != DOp::Round ||
      (n->roundTo != DType::BF16 && n->roundTo != DType::F16))
    return nullptr;
  // div_rn(x, 1 + exp_libdevice(-x)), as dsl::silu builds it.
  const ExprNode *div = n->args[0].get();
  if (div->op != DOp::Div)
    return nullptr;
  const ExprNode *x = div->args[0].get(), *den = div->args[1].get();
  if (x->op != DOp::Extend || x->args[0]->type != n->roundTo ||
      den->op != DOp::Add || !isConst(den->args[0].get(), 0x3f800000u))
    return nullptr;
  // Each use of a bf16 value widens it in a node of its own.
  const ExprNode *e = den->args[1].get();
  if (e->op != DOp::ExpLibdevice || e->args[0]->op != DOp::Neg)
    return nullptr;
  const ExprNode *y = e->args[0]->args[0].get();
  if (y != x && (y->op != DOp::Extend || y->args[0].get() != x->args[0].get()))
    return nullptr;
  return x;
}

bool codegen::fastSiluEnabled() {
  // On by default since the H200 oracle ran it (every bf16 and f16 input,
  // the Wan kernels at every config; docs/exact-silu.md); =0 turns it off.
  return envFlag("BITFOLD_FAST_SILU", true);
}

bool codegen::fallbackLoopsEnabled() {
  return envFlag("BITFOLD_FALLBACK_LOOPS", true);
}

bool codegen::sm90SiluModelsEnabled() {
  return envFlag("BITFOLD_SM90_SILU", true);
}

Rewrites codegen::findRewrites(const dsl::KernelDef &def, int smVersion,
                               bool pixelLanesOnThreads) {
  Rewrites r;
  r.fallbackLoops = fallbackLoopsEnabled();
  r.sm90SiluModels = sm90SiluModelsEnabled();
  // The lowering's notion of a per-element node (KernelBuilder::isElem): a
  // load below it, not looking through folds.
  llvm::DenseMap<const ExprNode *, bool> memo;
  std::function<bool(const ExprNode *)> perElement = [&](const ExprNode *m) {
    if (auto it = memo.find(m); it != memo.end())
      return it->second;
    bool e = dsl::variesAlongRow(def, *m);
    if (m->op != DOp::FoldValue)
      for (const dsl::Expr &a : m->args)
        e = e || perElement(a.get());
    return memo[m] = e;
  };
  const bool rowDivision = rowDivisionEnabled();
  const bool roundedDivision = rowDivision && roundedDivisionEnabled();
  const bool rowBound = rowBoundEnabled();
  // Not in channels-first programs of one thread per pixel: there the H200
  // measured it slower (rolled Wan C = 96: 412.7 -> 430.1 us; unrolled 608
  // -> 999 us), while row layouts gain 14-20%
  // (bench/results/2026-12-02-gpu-session.md).
  const bool fastSilu =
      fastSiluEnabled() && (!dsl::isChannelsFirst(def) || pixelLanesOnThreads);
  dsl::forEachNode(def, [&](const ExprNode &n) {
    if (rowDivision && matchRowDivision(&n, perElement)) {
      r.rowDivision.insert(&n);
      if (rowBound && matchRowBound(&n, def))
        r.rowBound.insert(&n);
    }
    if (std::optional<NarrowArith> m = matchNarrowArith(&n, smVersion))
      r.narrow.try_emplace(&n, *m);
    if (const ExprNode *x = matchNvccReciprocal(&n))
      r.nvccReciprocal.try_emplace(&n, x);
    if (const ExprNode *x = fastSilu ? matchFastSilu(&n) : nullptr)
      r.fastSilu.try_emplace(&n, x);
  });
  // A second walk: the division below a round must be known first.
  if (roundedDivision)
    dsl::forEachNode(def, [&](const ExprNode &n) {
      if (RoundedDivision m = matchRoundedRowDivision(&n, r.rowDivision);
          m != RoundedDivision::No)
        r.roundedRowDivision.try_emplace(&n, m);
    });
  return r;
}

void codegen::printRewrites(llvm::raw_ostream &os, const dsl::KernelDef &def,
                            const Rewrites &rewrites) {
  dsl::NodeNames names = dsl::canonicalNodeNames(def);
  std::vector<std::string> lines;
  for (const auto &[n, m] : rewrites.narrow)
    lines.push_back((names.lookup(n) + ": round to " +
                     dsl::dtypeName(n->roundTo) + " of " + dsl::opName(m.op) +
                     " -> " + dsl::opName(m.op) + " in " +
                     dsl::dtypeName(n->roundTo))
                        .str());
  for (const auto &[n, x] : rewrites.nvccReciprocal)
    lines.push_back(names.lookup(n) + ": nvcc reciprocal of " +
                    names.lookup(x) +
                    " -> RN(1/x) where x is an integer constant in [1, 2^21)");
  for (const ExprNode *n : rewrites.rowDivision)
    lines.push_back(names.lookup(n) + ": div_rn by a per-row value -> per-row "
                                      "RN(1/d) and Markstein's correction "
                                      "where x, d in [2^-60, 2^60]");
  for (const ExprNode *n : rewrites.rowBound)
    lines.push_back(names.lookup(n) +
                    ": its divisor is the row's norm of x -> d <= 2^59 "
                    "bounds every |x|, per element only |x| >= 2^-60");
  for (const auto &[n, m] : rewrites.roundedRowDivision)
    lines.push_back(
        names.lookup(n) +
        (m == RoundedDivision::Plain
             ? ": round to bf16 of a row division by a bf16 value -> "
               "RN_bf16(RN(x * RN(1/d))) where x, d in [2^-60, 2^60]"
             : ": round to bf16 of a row division -> RN_bf16(RN(x * "
               "RN(1/d))) where d in [2^-60, 2^60] and the product lies "
               "more than " +
                   std::to_string(kRowDivWindow) +
                   " patterns from a bf16 rounding midpoint"));
  for (const auto &[n, x] : rewrites.fastSilu)
    lines.push_back((names.lookup(n) + ": round to " +
                     dsl::dtypeName(n->roundTo) + " of silu(" +
                     names.lookup(x) +
                     ") -> ex2/rcp.approx where the result is far from a "
                     "rounding midpoint, the exact chain elsewhere")
                        .str());
  llvm::sort(lines);
  for (const std::string &l : lines)
    os << l << "\n";
}
