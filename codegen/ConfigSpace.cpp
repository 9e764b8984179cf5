//===- codegen/ConfigSpace.cpp - The config space, legality, makePlan -----===//
//
// No MLIR here: legality is arithmetic on the program's fold orders, the
// shape and the config (see Plan.h for the mapping of fold lanes).
//
//===----------------------------------------------------------------------===//

#include "codegen/Environment.h"
#include "codegen/Plan.h"
#include "dsl/Limits.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <set>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using dsl::ExprNode;
using dsl::KernelDef;
using dsl::Op;

namespace {

/// The most vector accesses of a row one thread unrolls.
constexpr int64_t kMaxVectorsPerThread = 4096;
/// Rolled rows by default: a plan that may roll (two passes, or no fold)
/// and would unroll more vector accesses of a row per thread than this
/// rolls them, so compile time and PTX size stop growing with the row (an
/// elementwise row of 2^16 columns at 2 threads: 4 s and 1 GB unrolled).
/// Every stock kernel's seed shapes stay below it at two passes.
constexpr int64_t kUnrolledVectors = 64;
/// A fold that never rolls (a field the element does not feed, as
/// Welford's count: planRolledRows) bounds its thread's share tighter than
/// kMaxVectorsPerThread: a LayerNorm row of 65536 columns at 32 threads x 4
/// unrolled 512 vectors per thread (1-4 s to compile; 256 still 1-2 s).
constexpr int64_t kMaxUnrolledFoldVectors = 128;

/// Rolled rows: a fold loop iteration issues this many of the thread's
/// accesses (over its lanes), so some of its loads are in flight at once.
constexpr int64_t kFoldLoopAccesses = 4;
/// Rolled rows: bytes an output loop iteration loads per thread, as the
/// unrolled outputs' load groups (EmitOutputs.cpp, kGroupLoadBytes).
constexpr int64_t kOutputLoopBytes = 192;

/// Registers of two-pass fold loads the estimate counts at most (see
/// estimateRegisters).
constexpr int64_t kStreamedLoadRegisters = 128;

/// A one-pass config gets a shared-row twin (TileConfig::sharedRow) in the
/// config space where its row in registers is estimated above this many
/// registers per thread: there the register file, not the memory system,
/// bounds the CTAs an SM runs (hf_rmsnorm r2.t32.v4.p1 at 4096 columns:
/// 216 registers, 4 CTAs of 64 threads per SM).
constexpr int kSharedRowTwinRegisters = 128;
/// Shared-row twins unroll at most this many elements of a row per thread
/// (their fold and outputs stay unrolled; 512 would double the SASS of the
/// largest one-pass kernel of the seed shapes).
constexpr int64_t kSharedRowTwinElements = 256;

llvm::Error illegal(const TileConfig &c, const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "config " + c.str() + ": " + why);
}

bool pow2(int64_t v) { return v > 0 && std::has_single_bit(uint64_t(v)); }

} // namespace

void codegen::loadsOf(const KernelDef &def, const ExprNode *root,
                      std::set<int> &out) {
  std::vector<const ExprNode *> stack{root};
  std::set<const ExprNode *> seen;
  while (!stack.empty()) {
    const ExprNode *n = stack.back();
    stack.pop_back();
    if (!n || !seen.insert(n).second || n->op == Op::FoldValue)
      continue;
    // A gather's scalar loads and a per-row input's one load (row set-up)
    // use no access.
    if (n->op == Op::Load && dsl::variesAlongRow(def, *n))
      out.insert(n->index);
    for (const dsl::Expr &a : n->args)
      stack.push_back(a.get());
  }
}

namespace {
/// The operands the folds and the outputs load per element (loadsOf).
void phaseLoads(const KernelDef &def, std::set<int> &foldLoads,
                std::set<int> &outLoads) {
  for (const dsl::FoldDecl &f : def.folds)
    loadsOf(def, f.input.get(), foldLoads);
  for (const dsl::OperandDecl &o : def.operands)
    if (o.isOutput)
      for (const dsl::Expr &v : dsl::outputValues(o))
        loadsOf(def, v.get(), outLoads);
}
} // namespace

std::set<int> codegen::sharedRowOperands(const KernelDef &def) {
  std::set<int> foldLoads, outLoads, both;
  phaseLoads(def, foldLoads, outLoads);
  for (int i : foldLoads)
    if (outLoads.count(i) &&
        def.operands[i].layout == dsl::Layout::RowMajor &&
        def.operands[i].map == dsl::IndexMap::PerElement)
      both.insert(i);
  return both;
}

bool FoldPlan::needsShared() const {
  for (const StagePlan &s : stages)
    if (s.where == StagePlan::Shared)
      return true;
  return false;
}

int codegen::registerLimit(int ctaThreads) {
  int warps = (ctaThreads + 31) / 32;
  int perThread = 65536 / (warps * 32);
  return std::min(255, perThread & ~7);
}

namespace {

/// The fold-order extensions codegen maps (docs/aten-reduce.md section 7):
/// accumulators per lane (kept in the lane's thread, merged serially before
/// the tree) and aligned vectors, with a head and tail per row where C % V
/// != 0 (FoldPlan::headTail, planFold). The row range is checked at launch
/// (runtime/TensorBinding.cpp). Refused for every config: rows split
/// across CTAs.
llvm::Error checkFoldOrdersMappable(const KernelDef &def) {
  for (const dsl::FoldDecl &f : def.folds) {
    const dsl::FoldOrder &o = f.order;
    if (o.ctas > 1)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("'{0}': fold order '{1}' splits each row over {2} "
                        "CTA groups (rows this long need a two-pass mapping "
                        "codegen lacks); the interpreter runs it, codegen "
                        "does not map it (docs/aten-reduce.md section 7)",
                        def.name, o.name, o.ctas));
  }
  return llvm::Error::success();
}

/// A head and tail per row: the vectors start at the row's head h, a
/// multiple of gcd(C, V), so accesses that divide it keep their alignment;
/// the output phase cannot reuse the fold's mapping (it misses the head and
/// tail columns), so two passes. h follows the row index (r * C): rows in
/// two levels (a permuted view, whose fresh copies aten reduces in memory
/// order) would need their memory offsets, so they are refused.
llvm::Error checkHeadTail(const TileConfig &c, size_t f, const FoldPlan &fp,
                          int64_t D, llvm::ArrayRef<keys::RowLevels> levels) {
  const int64_t g = std::gcd(D, int64_t(fp.V));
  for (const keys::RowLevels &lv : levels)
    if (lv.inner > 0)
      return illegal(c, llvm::formatv("fold {0}: rows of C = {1} have a "
                                      "head and tail that follow the row's "
                                      "memory offset; rows in two levels "
                                      "are not mapped",
                                      f, D));
  if (!c.twoPass)
    return illegal(c, llvm::formatv("fold {0}: C = {1} is not a multiple of "
                                    "its aligned {2}-element vectors (a head "
                                    "and tail per row): two passes only",
                                    f, D, fp.V));
  if (g % c.vectorElems != 0)
    return illegal(c, llvm::formatv("fold {0}: rows of C = {1} start their "
                                    "{2}-element vectors at a multiple of "
                                    "{3}; the vector width must divide it",
                                    f, D, fp.V, g));
  return llvm::Error::success();
}

/// Two-level rows: only per-element row-major operands take them (the
/// binding gives no other), with inner >= 2 rows.
llvm::Error checkRowLevels(const KernelDef &def, const ShapeSpec &shape) {
  if (shape.rowLevels.empty())
    return llvm::Error::success();
  if (shape.rowLevels.size() != def.operands.size())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("shape gives {0} row levels for the {1} operands of "
                      "'{2}'",
                      shape.rowLevels.size(), def.operands.size(), def.name));
  for (size_t i = 0; i < def.operands.size(); ++i) {
    const keys::RowLevels lv = shape.rowLevels[i];
    const dsl::OperandDecl &o = def.operands[i];
    if (lv.inner == 0)
      continue;
    if (lv.inner < 2 || lv.outer < 0 || o.map != dsl::IndexMap::PerElement ||
        o.layout != dsl::Layout::RowMajor)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("'{0}': operand '{1}' cannot take two-level rows "
                        "{2}x{3} (only per-element row-major operands, "
                        "groups of 2 or more rows)",
                        def.name, o.name, lv.inner, lv.outer));
  }
  return llvm::Error::success();
}

/// The shape against the program's guard, and the config's own limits.
llvm::Error checkShapeAndConfig(const KernelDef &def, const ShapeSpec &shape,
                                const TileConfig &c) {
  const int64_t D = shape.cols;
  if (llvm::Error e = checkFoldOrdersMappable(def))
    return e;
  if (llvm::Error e = dsl::checkColumnGuard(def, D))
    return e;
  if (!shape.alignBytes.empty() &&
      shape.alignBytes.size() != def.operands.size())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("shape gives {0} alignments for the {1} operands of '{2}'",
                      shape.alignBytes.size(), def.operands.size(), def.name));
  if (llvm::Error e = checkRowLevels(def, shape))
    return e;
  if (!pow2(c.threadsPerRow) || !pow2(c.rowsPerCta) || !pow2(c.vectorElems))
    return illegal(c, "rows per CTA, threads per row and vector width must "
                      "be powers of two");
  if (c.ctaThreads() > 1024)
    return illegal(c, llvm::formatv("{0} threads per CTA exceed 1024",
                                    c.ctaThreads()));
  if (c.ctaThreads() % 32 != 0)
    return illegal(c, llvm::formatv("{0} threads per CTA is not a whole number "
                                    "of warps",
                                    c.ctaThreads()));
  if (c.vectorElems > 16)
    return illegal(c, "vector width above 16 elements");
  if (def.folds.empty() && c.twoPass && !dsl::isChannelsFirst(def))
    return illegal(c, "two passes need a fold");
  if (c.sharedRow && (dsl::isChannelsFirst(def) || c.pixelsPerThread != 1))
    return illegal(c, "a shared row stages row-major rows only");
  return checkStridedAxisConfig(def, D, c);
}

/// Where each tree stage of fold lanes mapped as `fp` moves its data
/// (`acrossWarps`: a pixel's threads lie a warp apart, no shuffles).
void planStages(const dsl::FoldOrder &o, FoldPlan &fp, bool acrossWarps) {
  for (const dsl::TreeStage &s : o.stages) {
    StagePlan sp;
    sp.offset = s.offset;
    if (s.offset < fp.A) {
      sp.where = StagePlan::RegisterLo;
      sp.threadOffset = s.offset;
    } else if (s.offset >= fp.A * fp.Pf) {
      sp.where = StagePlan::RegisterHi;
      sp.threadOffset = s.offset / (fp.A * fp.Pf);
    } else {
      sp.threadOffset = s.offset / fp.A;
      sp.where = sp.threadOffset < 32 && !acrossWarps ? StagePlan::Shuffle
                                                      : StagePlan::Shared;
    }
    fp.stages.push_back(sp);
  }
}

/// Whether an order's accumulators may go to threads of their own: its
/// lanes push single columns round-robin into two or more accumulators.
bool splitsAccumulators(const dsl::FoldOrder &o) {
  return o.vector == 1 && o.accumulators > 1 &&
         o.accumulatorMap == dsl::FoldOrder::AccumulatorMap::RoundRobin;
}

/// FoldPlan::split for fold f under `c`: every accumulator of a lane a
/// virtual lane where a one-pass channels-first config has more threads
/// per pixel than the order has lanes (they lie a warp apart and meet in
/// the gathered tree) and the order splits (splitsAccumulators).
/// Otherwise 1 (a thread holds whole lanes).
int accumulatorSplit(const KernelDef &def, size_t f, const TileConfig &c) {
  const dsl::FoldOrder &o = def.folds[f].order;
  if (c.twoPass || !lanesAcrossWarps(def, c) || c.threadsPerRow <= o.threads ||
      !splitsAccumulators(o))
    return 1;
  return o.accumulators;
}

/// Fold f's lanes on the config's threads (Plan.h).
llvm::Expected<FoldPlan> planFold(const KernelDef &def, size_t f,
                                  const TileConfig &c, int64_t D,
                                  llvm::ArrayRef<keys::RowLevels> levels) {
  const dsl::FoldOrder &o = def.folds[f].order;
  const int P = c.threadsPerRow, W = c.vectorElems;
  const int split = accumulatorSplit(def, f, c);
  if (!c.twoPass && P > o.threads * split)
    return illegal(c, llvm::formatv("one pass keeps the row in the {0} "
                                    "threads of fold {1}; {2} threads per "
                                    "row would idle (use two passes)",
                                    o.threads * split, f, P));
  FoldPlan fp;
  fp.T = o.threads * split;
  fp.split = split;
  fp.V = o.vector;
  fp.headTail = o.alignedVectors && D % o.vector != 0;
  if (fp.headTail)
    if (llvm::Error e = checkHeadTail(c, f, fp, D, levels))
      return std::move(e);
  fp.Pf = std::min(P, fp.T);
  fp.k = fp.T / fp.Pf;
  int wantA = W >= fp.V ? W / fp.V : 1;
  if (W >= fp.V && W % fp.V != 0)
    return illegal(c, llvm::formatv("vector width {0} is not a multiple of "
                                    "fold {1}'s vector {2}",
                                    W, f, fp.V));
  if (W < fp.V && fp.V % W != 0)
    return illegal(c, llvm::formatv("fold {0}'s vector {1} is not a multiple "
                                    "of the vector width {2}",
                                    f, fp.V, W));
  if (wantA > fp.k) {
    if (!c.twoPass || P <= fp.T)
      return illegal(c, llvm::formatv(
                            "vector width {0} needs {1} adjacent lanes of "
                            "fold {2} per thread, but each of the {3} "
                            "threads holds only {4} of its {5} lanes",
                            W, wantA, f, fp.Pf, fp.k, fp.T));
    wantA = fp.k; // two passes with idle threads: narrower fold reads.
  }
  fp.A = wantA;
  fp.access = std::min(W, fp.A * fp.V);
  if (D % fp.access != 0)
    return illegal(c, llvm::formatv("{0} columns are not a multiple of the "
                                    "fold's access width {1}",
                                    D, fp.access));
  int64_t vectors = (D + fp.V - 1) / fp.V;
  fp.reps = (vectors + fp.T - 1) / fp.T;
  fp.acc = o.accumulators / split;
  fp.byElement =
      o.accumulatorMap == dsl::FoldOrder::AccumulatorMap::VectorElement;
  planStages(o, fp, lanesAcrossWarps(def, c));
  return fp;
}

/// A shared row (TileConfig::sharedRow) stages what the folds load of the
/// operands the outputs load too, so it needs a fold and such an operand;
/// in two passes the fold must load every column (a head/tail fold loads
/// its row's edges apart) and the row stays unrolled, so its `widest`
/// share of a thread is bounded as the unrolled two-pass plans' are.
llvm::Error checkSharedRow(const KernelDef &def, const Plan &plan,
                           int64_t widest) {
  const TileConfig &c = plan.config;
  if (!c.sharedRow)
    return llvm::Error::success();
  if (def.folds.empty() || sharedRowOperands(def).empty())
    return illegal(c, "a shared row needs a fold and an operand that both "
                      "the fold and the outputs load per element");
  if (!c.twoPass)
    return llvm::Error::success();
  for (const FoldPlan &fp : plan.folds)
    if (fp.headTail)
      return illegal(c, "a shared row in two passes needs folds without "
                        "a head and tail");
  if (widest > kUnrolledVectors)
    return illegal(c, llvm::formatv("a shared row in two passes unrolls "
                                    "{0} vector accesses of a row a thread "
                                    "(at most {1})",
                                    widest, kUnrolledVectors));
  return llvm::Error::success();
}

/// One pass reuses fold 0's mapping; otherwise W-element chunks.
/// The output chunks of P threads x W columns that cover a row of D.
int64_t outputChunks(int64_t D, int P, int W) {
  return llvm::divideCeil(D, int64_t(P) * W);
}

llvm::Error planOutputPhase(const KernelDef &def, Plan &plan) {
  const TileConfig &c = plan.config;
  const int64_t D = plan.cols;
  const int P = c.threadsPerRow, W = c.vectorElems;
  if (!def.folds.empty() && !c.twoPass) {
    const FoldPlan &f0 = plan.folds[0];
    for (size_t f = 1; f < plan.folds.size(); ++f)
      if (plan.folds[f].T != f0.T || plan.folds[f].V != f0.V ||
          plan.folds[f].A != f0.A)
        return illegal(c, "folds with different lane mappings need two passes");
    if (P > f0.T)
      return illegal(c, llvm::formatv("one pass keeps the row in the {0} "
                                      "threads of the fold; {1} threads per "
                                      "row would idle (use two passes)",
                                      f0.T, P));
    plan.outputUsesFoldMapping = true;
    return llvm::Error::success();
  }
  if (D % W != 0)
    return illegal(c, llvm::formatv("{0} columns are not a multiple of the "
                                    "vector width {1}",
                                    D, W));
  plan.outChunks = outputChunks(D, P, W);
  plan.outVectorElems = W;
  return llvm::Error::success();
}

/// Every access of an operand is min(width * bytes, 16) bytes and must be
/// aligned to that.
llvm::Error checkAlignment(const KernelDef &def, const ShapeSpec &shape,
                           const Plan &plan) {
  int widest = plan.outputUsesFoldMapping ? 1 : plan.outVectorElems;
  for (const FoldPlan &fp : plan.folds)
    widest = std::max(widest, fp.access);
  for (size_t i = 0; i < def.operands.size(); ++i) {
    // Per-row operands and vector inputs move one element at a time.
    if (def.operands[i].map == dsl::IndexMap::PerRow ||
        def.operands[i].map == dsl::IndexMap::Vector)
      continue;
    int b = int(dsl::dtypeBytes(def.operands[i].dtype));
    // A channels-first image moves a thread's adjacent pixels at once (one
    // element in row plans, whose columns of an image lie S apart).
    int w = def.operands[i].layout == dsl::Layout::ChannelsFirst
                ? plan.config.pixelsPerThread
                : widest;
    int need = std::min(w * b, 16);
    int have = shape.alignBytes.empty() ? 16 : shape.alignBytes[i];
    if (have < need)
      return illegal(plan.config,
                     llvm::formatv("operand '{0}' is {1}-byte aligned; "
                                   "{2}-element accesses need {3} bytes",
                                   def.operands[i].name, have, w, need));
  }
  return llvm::Error::success();
}

/// Per fold, a broadcast slot per row (P > 32) and an exchange buffer for
/// cross-warp stages; channels-first lanes: every lane's state once.
unsigned sharedMemory(const KernelDef &def, const Plan &plan) {
  const unsigned P = unsigned(plan.config.threadsPerRow),
                 R = unsigned(plan.config.rowsPerCta);
  unsigned smem = 0;
  for (size_t f = 0; f < plan.folds.size(); ++f) {
    unsigned F = unsigned(def.folds[f].combiner->numFields());
    if (plan.lanesAcrossWarps) { // EmitFold.cpp's gathered tree
      smem += R * P * unsigned(plan.folds[f].k) * F * 4;
      if (plan.folds[f].split > 1) // runOwnedTrees' states
        smem += R * F * 4;
      continue;
    }
    if (P > 32)
      smem += R * F * 4;
    if (plan.folds[f].needsShared())
      smem += R * P * unsigned(plan.folds[f].k) * F * 4;
  }
  smem += columnTableBytes(def, plan);
  if (plan.config.sharedRow) // EmitOutputs' staged rows, one per operand
    for (int i : sharedRowOperands(def))
      smem += R * unsigned(plan.cols) *
              unsigned(dsl::dtypeBytes(def.operands[i].dtype));
  return smem;
}

/// Of `count` chunks, the leading `inRange` whose accesses are statically
/// in range: the loop's share (whole iterations of `step`, at least two of
/// them), or 0.
int64_t loopShare(int64_t inRange, int64_t step) {
  int64_t share = inRange / step * step;
  return share >= 2 * step ? share : 0;
}

/// The rolled rows' loops (two passes; one pass through rollOnePass, whose
/// outputs read the row again, because a loop cannot index the registers
/// one pass keeps it in). Only chunks whose every access is statically in
/// range go into a loop, so the loop body is the unrolled one's code at a
/// shifted column; the rest stay unrolled after it.
/// Whether a push leaves some field of the state independent of the
/// element (a Welford count): unrolled, LLVM folds it to constants per
/// vector (FoldKnowledge.h tracks them too); a loop would carry it and redo
/// its arithmetic for every element.
bool hasDataIndependentField(const dsl::Combiner &cb) {
  const int element = int(cb.numFields());
  for (const dsl::Expr &field : cb.pushBody().fields) {
    std::vector<const ExprNode *> stack{field.get()};
    bool usesElement = false;
    while (!stack.empty() && !usesElement) {
      const ExprNode *n = stack.back();
      stack.pop_back();
      usesElement = n->op == Op::Placeholder && n->index == element;
      for (const dsl::Expr &a : n->args)
        stack.push_back(a.get());
    }
    if (!usesElement)
      return true;
  }
  return false;
}

void planRolledRows(const KernelDef &def, Plan &plan,
                    int64_t maxOutLoopStep = INT64_MAX) {
  const int64_t D = plan.cols;
  const int P = plan.config.threadsPerRow, W = plan.outVectorElems;
  for (size_t f = 0; f < plan.folds.size(); ++f) {
    FoldPlan &fp = plan.folds[f];
    // Stays unrolled; a head/tail fold's columns move with the row's head.
    if (hasDataIndependentField(*def.folds[f].combiner) || fp.headTail)
      continue;
    const int64_t chunk = int64_t(fp.A) * fp.V;
    // The last access of vector m of the thread's last lanes, on its last
    // thread (VectorAccess.cpp, foldAccesses).
    auto lastCol = [&](int64_t m) {
      return (int64_t(fp.A) * fp.Pf * (fp.k / fp.A - 1) + fp.T * m) * fp.V +
             chunk - fp.access + chunk * (fp.Pf - 1);
    };
    int64_t inRange = 0;
    while (inRange < fp.reps && lastCol(inRange) < D)
      ++inRange;
    // Vector m goes to accumulator m % acc: a whole number of rounds per
    // iteration keeps that a constant of the body.
    const int64_t perVector = int64_t(fp.k / fp.A) * (chunk / fp.access);
    fp.loopStep = std::max<int64_t>(1, kFoldLoopAccesses / perVector);
    if (!fp.byElement)
      fp.loopStep = std::max<int64_t>(fp.loopStep, fp.acc);
    fp.loopReps = loopShare(inRange, fp.loopStep);
  }
  std::set<int> outLoads;
  for (const dsl::OperandDecl &o : def.operands)
    if (o.isOutput)
      loadsOf(def, o.value.get(), outLoads);
  int64_t chunkBytes = 0;
  for (int i : outLoads)
    chunkBytes += int64_t(W) * dtypeBytes(def.operands[i].dtype);
  plan.outLoopStep = std::min(
      maxOutLoopStep,
      int64_t(std::bit_floor(uint64_t(std::max<int64_t>(
          1, kOutputLoopBytes / std::max<int64_t>(chunkBytes, 1))))));
  int64_t inRange = 0;
  while (inRange < plan.outChunks &&
         int64_t(P) * W * inRange + int64_t(W) * (P - 1) < D)
    ++inRange;
  plan.outLoopChunks = loopShare(inRange, plan.outLoopStep);
  bool loops = plan.outLoopChunks > 0;
  for (const FoldPlan &fp : plan.folds)
    loops = loops || fp.loopReps > 0;
  plan.rolledRows = loops; // nothing to roll: the unrolled plan
}

/// Rolled rows of a one-pass plan (RolledRowsMode::Always only: the quick
/// tier's short compile and BITFOLD_ROLLED_ROWS=1): the folds as a two-pass
/// plan folds them, then a loop of one output chunk (P x W columns) an
/// iteration that reads the row again. Each element's output math (the
/// Wan norm's two divisions and exp, LayerNorm's affine) is then spelled
/// out once per W columns instead of once per column of a thread's share,
/// which is what ptxas's time grows with; the DAG, and so the bits, are
/// the unrolled plan's; row plans only (a channels-first one maps pixels
/// and lanes instead). W is the config's vector width, or from 8 up half
/// of it where only that loops (the Wan norm at C = 192 on 16 threads x 8:
/// one and a half chunks of 8, three of 4). Stays unrolled: a packed row,
/// and where no W divides the row, passes the alignment and has its output
/// loop run three times or more (two trips saved nothing at qk's 128
/// columns: the loop and the re-read row's addresses cost what a chunk's
/// code did).
void rollOnePass(const KernelDef &def, const ShapeSpec &shape, Plan &plan) {
  const TileConfig &c = plan.config;
  if (def.folds.empty() || c.twoPass || c.sharedRow || plan.rolled ||
      plan.packedRow || dsl::isChannelsFirst(def))
    return;
  const int narrowest = c.vectorElems >= 8 ? c.vectorElems / 2 : c.vectorElems;
  for (int W = c.vectorElems; W >= narrowest; W /= 2) {
    if (plan.cols % W != 0)
      continue;
    Plan rolledPlan = plan;
    rolledPlan.outputUsesFoldMapping = false;
    rolledPlan.outVectorElems = W;
    rolledPlan.outChunks = outputChunks(plan.cols, c.threadsPerRow, W);
    if (llvm::errorToBool(checkAlignment(def, shape, rolledPlan)))
      continue;
    planRolledRows(def, rolledPlan, /*maxOutLoopStep=*/1);
    if (rolledPlan.outLoopChunks >= 3) {
      plan = std::move(rolledPlan);
      return;
    }
  }
}

/// A fold's share of a row per thread is its lanes' vectors (k * reps):
/// with fewer lanes than threads (a serial order on 256 threads) one
/// thread folds the whole row. Bounds it as the output share is bounded,
/// and tighter for a fold that never rolls; returns the widest share.
llvm::Expected<int64_t> checkFoldShares(const KernelDef &def,
                                        const TileConfig &c, const Plan &plan,
                                        int64_t outputShare) {
  int64_t widest = outputShare;
  if (plan.rolled)
    return widest; // loops: nothing to bound
  for (size_t f = 0; f < plan.folds.size(); ++f) {
    const int64_t share = int64_t(plan.folds[f].k) * plan.folds[f].reps;
    widest = std::max(widest, share);
    if (share > kMaxVectorsPerThread)
      return illegal(c, llvm::formatv("fold {0}: each thread would fold {1} "
                                      "vectors of a row (at most {2}): use "
                                      "an order with more lanes or wider "
                                      "vectors",
                                      f, share, kMaxVectorsPerThread));
    if (share > kMaxUnrolledFoldVectors &&
        hasDataIndependentField(*def.folds[f].combiner))
      return illegal(c, llvm::formatv(
                            "fold {0}: each thread would unroll {1} vectors "
                            "of a row into a fold that does not roll (at "
                            "most {2}): use more threads per row, an order "
                            "with more lanes or wider vectors",
                            f, share, kMaxUnrolledFoldVectors));
  }
  return widest;
}

/// Registers: a conservative estimate; ptxas -v confirms (tests).
int estimateRegisters(const KernelDef &def, const Plan &plan) {
  const int64_t D = plan.cols;
  const int P = plan.config.threadsPerRow;
  std::set<int> foldLoads, outLoads;
  phaseLoads(def, foldLoads, outLoads);
  int64_t perThread = (D + P - 1) / P;
  // Channels-first, o pixels per thread: o copies of a pixel's state and
  // of each kept column of an image (ptxas -v: about o times the registers
  // of one pixel at C = 96..384, the bf16 pairs unpacked); a per-column
  // operand's value serves every pixel.
  const int o = plan.config.pixelsPerThread;
  int est = 40;
  for (size_t f = 0; f < plan.folds.size(); ++f) {
    // Lanes that own no element stay the empty state: constants, no
    // registers. Lanes with elements: ceil(min(T, vectors) / Pf) per thread.
    const FoldPlan &fp = plan.folds[f];
    int64_t vectors = (D + fp.V - 1) / fp.V;
    int64_t dataLanes = std::min<int64_t>(
        fp.k, (std::min<int64_t>(fp.T, vectors) + fp.Pf - 1) / fp.Pf);
    est += 2 * int(def.folds[f].combiner->numFields()) * int(dataLanes) *
           fp.acc * o;
  }
  if (plan.outputUsesFoldMapping && !plan.config.sharedRow) {
    int kept = 0;
    for (int i : foldLoads)
      kept += !outLoads.count(i)                                     ? 0
              : def.operands[i].layout == dsl::Layout::ChannelsFirst ? o
                                                                     : 1;
    est += int(perThread * std::max(kept, 1));
  } else if (!def.folds.empty()) {
    // Two passes (and a shared row) keep nothing for the output phase in
    // registers, and a lane's pushes consume its loads in order, so ptxas
    // streams them: count a thread's fold loads up to
    // kStreamedLoadRegisters. Uncapped, f32 rows with a
    // residual at D ~3600..8160 (T = 32 lanes, 8 bytes per column) had no
    // legal config; ptxas fits them without spills even at 64 registers
    // (1024 threads; tests/codegen/CodegenTest.cpp checks the configs).
    int64_t bytes = 0;
    for (int i : foldLoads)
      bytes += dtypeBytes(def.operands[i].dtype);
    int64_t fp = (D + plan.folds[0].Pf - 1) / plan.folds[0].Pf;
    est += int(std::min<int64_t>(fp * bytes / 4, kStreamedLoadRegisters));
  }
  return est;
}

/// Plan::packedRow: where a one-pass thread would keep more of its row as
/// f32 than 128 registers hold, every kept operand is bf16, and as pairs
/// it needs at most 112 (16 to spare), keep the loaded pairs and ask for
/// 512 threads an SM, which caps ptxas at 128 registers. hf_rmsnorm on the
/// H200 (hand-edited PTX of r1/r2/r4.t32.v4.p1 at 256-640 threads an SM,
/// then this plan): at (1,4096,4096), 112 registers as pairs, 512 was the
/// fastest at every rows-per-CTA, r2 20.6 -> 20.1 us steady and r1 20.8 ->
/// 19.6; at (8,1024,5120), 128 as pairs, r2 lost (44.0 -> 44.8). Pairs
/// without the cap took more registers (ptxas widened them early) and ran
/// slower at r2; the cap without pairs spilled. The estimate, and so the
/// config space, stays the f32 one.
void planPackedRow(const KernelDef &def, Plan &plan) {
  constexpr int kRegisters = 128, kPairRegisters = 112, kSmThreads = 512;
  const TileConfig &c = plan.config;
  if (!plan.outputUsesFoldMapping || c.sharedRow || dsl::isChannelsFirst(def) ||
      plan.estimatedRegisters <= kRegisters || c.ctaThreads() > kSmThreads)
    return;
  std::set<int> foldLoads, outLoads;
  phaseLoads(def, foldLoads, outLoads);
  int kept = 0;
  for (int i : foldLoads) {
    if (!outLoads.count(i))
      continue;
    if (def.operands[i].dtype != dsl::DType::BF16)
      return;
    ++kept;
  }
  const int64_t perThread =
      llvm::divideCeil(plan.cols, int64_t(c.threadsPerRow));
  if (kept == 0 ||
      plan.estimatedRegisters - perThread * kept / 2 > kPairRegisters)
    return;
  plan.packedRow = true;
  plan.minCtasPerSm = kSmThreads / c.ctaThreads();
}

} // namespace

codegen::RolledRowsMode codegen::rolledRowsMode() {
  std::optional<bool> v = envSwitch("BITFOLD_ROLLED_ROWS");
  if (!v)
    return RolledRowsMode::Wide;
  return *v ? RolledRowsMode::Always : RolledRowsMode::Never;
}

codegen::RolledRowsMode
codegen::rolledRowsMode(const keys::CompileOptions &options) {
  return options.rollRows ? RolledRowsMode::Always : rolledRowsMode();
}

llvm::Expected<Plan> codegen::makePlan(const KernelDef &def,
                                       const ShapeSpec &shape,
                                       const TileConfig &c,
                                       RolledRowsMode mode) {
  if (llvm::Error e = checkShapeAndConfig(def, shape, c))
    return std::move(e);
  // A thread's share of a row is unrolled: bound it, or a config (one
  // thread on an elementwise row of 2^24 columns) makes codegen build an
  // unbounded kernel. No seed shape comes near it (8192 columns at most).
  const int64_t perThread = llvm::divideCeil(
      shape.cols, int64_t(c.threadsPerRow) * c.vectorElems);
  const bool rolled = isRolled(def, c); // loops: nothing to bound
  if (perThread > kMaxVectorsPerThread && !rolled)
    return illegal(c, llvm::formatv("each thread would handle {0} vectors of "
                                    "a row (at most {1}): use more threads "
                                    "per row or wider vectors",
                                    perThread, kMaxVectorsPerThread));
  Plan plan;
  plan.config = c;
  plan.cols = shape.cols;
  plan.rowLevels = shape.rowLevels;
  plan.oneSpatial = shape.oneSpatial;
  plan.rolled = rolled;
  plan.lanesAcrossWarps = lanesAcrossWarps(def, c);
  plan.index64 = shape.maxElementOffset == 0 ||
                 shape.maxElementOffset >= (int64_t(1) << 31);
  for (size_t f = 0; f < def.folds.size(); ++f) {
    llvm::Expected<FoldPlan> fp =
        planFold(def, f, c, plan.cols, plan.rowLevels);
    if (!fp)
      return fp.takeError();
    plan.folds.push_back(std::move(*fp));
  }
  llvm::Expected<int64_t> widest = checkFoldShares(def, c, plan, perThread);
  if (!widest)
    return widest.takeError();
  if (llvm::Error e = checkSharedRow(def, plan, *widest))
    return std::move(e);
  if (llvm::Error e = planOutputPhase(def, plan))
    return std::move(e);
  if (llvm::Error e = checkAlignment(def, shape, plan))
    return std::move(e);
  // The register estimate below stays the unrolled plan's, so the config
  // space does not depend on the rolled-rows mode.
  const bool mayRoll =
      !rolled && !c.sharedRow && (def.folds.empty() || c.twoPass);
  plan.rolledRows =
      mayRoll && mode != RolledRowsMode::Never &&
      ((mode == RolledRowsMode::Always && !def.folds.empty()) ||
       *widest > kUnrolledVectors);
  if (plan.rolledRows)
    planRolledRows(def, plan);
  plan.sharedBytes = sharedMemory(def, plan);
  if (plan.sharedBytes > 48 * 1024)
    return illegal(c, llvm::formatv("needs {0} bytes of shared memory (48 KiB "
                                    "static limit)",
                                    plan.sharedBytes));
  plan.estimatedRegisters =
      rolled ? rolledRegisters(def, plan) : estimateRegisters(def, plan);
  plan.registerLimit = registerLimit(c.ctaThreads());
  if (plan.estimatedRegisters > plan.registerLimit)
    return illegal(c, llvm::formatv("needs about {0} registers per thread; "
                                    "{1} threads per CTA allow {2}",
                                    plan.estimatedRegisters, c.ctaThreads(),
                                    plan.registerLimit));
  if (!rolled)
    planPackedRow(def, plan);
  if (mode == RolledRowsMode::Always && !plan.rolledRows)
    rollOnePass(def, shape, plan);
  return plan;
}

llvm::Error codegen::checkConfig(const KernelDef &def, const ShapeSpec &shape,
                                 const TileConfig &config) {
  llvm::Expected<Plan> p = makePlan(def, shape, config);
  if (!p)
    return p.takeError();
  return llvm::Error::success();
}

namespace {

/// The shared-row twin of config `c` (TileConfig::sharedRow), if legal: in
/// one pass where `c` keeps its row in more than kSharedRowTwinRegisters
/// registers or none fit (t16.v8 at 4096 columns: 256 elements a thread);
/// in two passes where its accesses are 16 bytes.
std::optional<TileConfig> sharedRowTwin(const KernelDef &def,
                                        const ShapeSpec &shape,
                                        const TileConfig &c) {
  if (def.folds.empty() ||
      shape.cols > kSharedRowTwinElements * c.threadsPerRow)
    return std::nullopt;
  if (c.twoPass) {
    // Two passes: the twin reads the row once from global memory; only
    // 16-byte output accesses of the staged operands, to bound the space.
    const std::set<int> staged = sharedRowOperands(def);
    if (staged.empty() ||
        c.vectorElems * dtypeBytes(def.operands[*staged.begin()].dtype) != 16)
      return std::nullopt;
  } else {
    llvm::Expected<Plan> p = makePlan(def, shape, c);
    if (p && p->estimatedRegisters <= kSharedRowTwinRegisters)
      return std::nullopt;
    if (!p)
      llvm::consumeError(p.takeError());
  }
  TileConfig twin = c;
  twin.sharedRow = true;
  if (llvm::errorToBool(checkConfig(def, shape, twin)))
    return std::nullopt;
  return twin;
}

/// The row configs of threads per row in [minP, maxP] that checkConfig
/// takes, appended to `out`, their shared-row twins to `twins`; maxT: the
/// most lanes of any fold.
void enumerateRowConfigs(const KernelDef &def, const ShapeSpec &shape,
                         int minP, int maxP, int maxT, int64_t roundD,
                         std::vector<TileConfig> &out,
                         std::vector<TileConfig> &twins) {
  for (int passes = 1; passes <= (def.folds.empty() ? 1 : 2); ++passes)
    for (int P = minP; P <= maxP; P *= 2)
      for (int W : {8, 4, 2, 1}) {
        // Every thread owns some of the row, except that rows of folds
        // always get at least a warp (its idle lanes enter the fold empty,
        // as the reference's do).
        if (int64_t(P) * W > roundD && (def.folds.empty() || P > 32))
          continue;
        // Rows of folds: at least a warp, except in one pass where fewer
        // threads per row hold more of a short row (qk heads of 128):
        // register merges replace shuffle stages and the empty lanes are
        // constants, so a row costs far fewer instructions.
        if (!def.folds.empty() && P < 32 && (passes == 2 || P < 4))
          continue;
        if (!def.folds.empty() && passes == 1 && P > maxT)
          continue;
        // CTAs of 128 and 256 threads, and small row counts; of 64 threads
        // where a row has 4 threads or more (r16.t4; below, a row's share
        // of each thread is long and 64 rows of it spill).
        std::set<int> rows{1, 2, 4, 8};
        for (int cta : {64, 128, 256})
          if (cta / P >= 1 && (cta > 64 || P >= 4))
            rows.insert(cta / P);
        for (int R : rows) {
          if (R * P < 32 || R * P > 1024 || R > 64)
            continue;
          TileConfig c{R, P, W, passes == 2};
          if (std::optional<TileConfig> twin = sharedRowTwin(def, shape, c))
            twins.push_back(*twin);
          if (llvm::errorToBool(checkConfig(def, shape, c)))
            continue;
          out.push_back(c);
        }
      }
}

/// Drops narrow vectors where a wider one is legal for the same (R, P,
/// passes).
std::vector<TileConfig> pruneNarrowVectors(const std::vector<TileConfig> &out) {
  std::vector<TileConfig> pruned;
  for (const TileConfig &c : out) {
    bool wider = false;
    for (const TileConfig &d : out)
      if (d.rowsPerCta == c.rowsPerCta && d.threadsPerRow == c.threadsPerRow &&
          d.twoPass == c.twoPass && d.sharedRow == c.sharedRow &&
          d.vectorElems > c.vectorElems &&
          d.vectorElems >= 4 && c.vectorElems < 4)
        wider = true;
    if (!wider)
      pruned.push_back(c);
  }
  return pruned;
}

} // namespace

std::vector<TileConfig> codegen::enumerateConfigs(const KernelDef &def,
                                                  const ShapeSpec &shape) {
  if (dsl::isChannelsFirst(def))
    return stridedAxisConfigs(def, shape);
  std::vector<TileConfig> out;
  const int64_t D = shape.cols;
  int64_t roundD = int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(D, 1))));
  int maxT = 0;
  for (const dsl::FoldDecl &f : def.folds)
    maxT = std::max(maxT, f.order.threads);
  // Rows run on at most 256 threads, unless only more are legal: a fold of
  // 512 lanes over 65536 columns (GroupNorm's block) unrolls at most 128
  // vectors a thread (kMaxUnrolledFoldVectors), so only 512 threads serve it.
  // Shared-row twins come after the rest (sharedRowTwin).
  std::vector<TileConfig> twins;
  enumerateRowConfigs(def, shape, 1, 256, maxT, roundD, out, twins);
  if (out.empty() && maxT > 256)
    enumerateRowConfigs(def, shape, 512, std::min(maxT, 1024), maxT, roundD,
                        out, twins);
  out = pruneNarrowVectors(out);
  for (const TileConfig &t : pruneNarrowVectors(twins))
    out.push_back(t);
  return out;
}

namespace {
/// The lanes of the first fold whose rows have aten's head and tail (aligned
/// vectors, C % V != 0) where a CTA can run one thread per lane; else 0.
int64_t headTailLaneCount(const KernelDef &def, int64_t cols) {
  for (const dsl::FoldDecl &f : def.folds) {
    const dsl::FoldOrder &o = f.order;
    const int64_t lanes = int64_t(o.threads) * o.ctas;
    if (o.alignedVectors && cols % o.vector != 0 && lanes <= 256)
      return lanes;
  }
  return 0;
}

/// Threads a channels-first pixel gets by default: one per lane of the
/// order, a warp apart; where a lane would then hold more than 24 channels
/// of a row of 64 or more, split accumulators (FoldPlan::split) until a
/// thread holds 24 or a pixel has 8 threads. On the H200 (steady, equal
/// bits, bench/results/2026-12-03-s15-gpu-session.md), Wan NCDHW:
///   C = 192, ovs 4: r64.t8.v1.p1.o2 101 / 107 us (forms x / f32) against
///     r32.t4.v1.p1's 114 / 114;
///   C = 384, ovs 4: r32.t8.v1.p1 38 / 36 against 42 / 41; 16 threads
///     (r64.t16.v1.p1.o2) 40 / 42;
///   C = 96, ovs 1 and 2 (one lane): r64.t4.v1.p1 217 against the rolled
///     r64.t1.v1.p2's 319, r128.t4.v1.p1.o2 128 against 200;
///   C = 96, ovs 4 (24 channels a lane): every split config lost (211-319
///     against r64.t4.v1.p1.o2's 181).
int pixelThreads(const KernelDef &def, int64_t D) {
  if (!dsl::isChannelsFirst(def) || def.folds.empty())
    return 1;
  const dsl::FoldOrder &o = def.folds[0].order;
  const int most = splitsAccumulators(o)
                       ? std::min(o.threads * o.accumulators,
                                  std::max(o.threads, 8))
                       : o.threads;
  int P = o.threads;
  while (D >= 64 && P < most && D / P > 24)
    P *= 2;
  return P;
}
/// The default's preference for c's access width, in thousands: 16-byte
/// accesses first; 8-byte ones where 4 threads hold a row of at most 96
/// columns (H200, Wan C = 96 channels-last, steady, r16.t4: v4 163.6
/// against v8 173.4 us in form f32, 161.9 / 162.4 in form x; at C = 192
/// and 384, 8 and 16 threads a row, v8 stays ahead by 2-5%;
/// bench/results/2026-12-03-s17-gpu-session.md).
int vectorScore(const KernelDef &def, const TileConfig &c, int64_t D) {
  const bool narrowRow = !def.folds.empty() && !dsl::isChannelsFirst(def) &&
                         c.threadsPerRow == 4 && D <= 96;
  return (narrowRow && c.vectorElems == 4 ? 9 : c.vectorElems) * 1000;
}

/// Whether `c` runs `def` at `shape` as a packed row (Plan::packedRow),
/// whose 512 threads an SM leave room for 16 CTAs of 32 threads: on the
/// H200 hf_rmsnorm (1,4096,4096) ran r1.t32.v4.p1 19.6 us, r2 20.1, r4 20.2.
bool packsRow(const KernelDef &def, const ShapeSpec &shape,
              const TileConfig &c) {
  llvm::Expected<Plan> p = makePlan(def, shape, c);
  if (!p) {
    llvm::consumeError(p.takeError());
    return false;
  }
  return p->packedRow;
}

/// Whether rows of D columns run on one warp, one row a CTA, by default.
/// Rows of 2048 to 2304 columns (64 to 72 elements a thread) whose order
/// spans several warps (aten's vectorized LayerNorm: 128 lanes, two
/// cross-warp stages) do: the cross-warp stages then fold in registers, not
/// through shared memory and a barrier each (orders of 32 lanes, aten's
/// reduce and flashinfer's, run on one warp already). LN+modulate, steady:
/// on the H200 at (2,1024,2240) every r*.t32 config ran 7.24-7.40 us against
/// r1.t64.v8.p1's 8.17 (bench/results/2026-12-05-s27-tune-db.json); on an
/// H100 (bench/results/2026-12-05-s28-session.md) r1.t32.v8.p1 against
/// r1.t64.v8.p1: 8.86 / 9.85 us at (2,1024,2240), 8.13 / 9.00 at
/// (1,2048,2048), 15.77 / 16.10 at (1,4096,2304), 14.69 / 14.50 at
/// (1,4096,2048); at (2,1024,1536) 6.49 / 6.46, so narrower rows keep more
/// threads. Two rows a CTA lost at (1,2048,2048) (9.34 us: 149 registers,
/// more than one wave). Only in a many-rows class (ShapeSpec::manyRows, set
/// only where keys::rowCountSplits holds, from keys::kManyRows rows): at
/// decode-size rows one warp a row loses
/// (H100, bench/results/2026-12-05-s29-session.md: (1,16,2240)
/// r1.t32.v8.p1 3.38 us, r1.t64.v8.p1 2.72, r1.t128.v4.p1 2.69), and
/// fewer rows keep the default of before, more threads a row.
bool oneWarpRow(const ShapeSpec &shape, int64_t headTailLanes) {
  return shape.manyRows && !headTailLanes;
}

/// The default's preference for c's threads a row and CTA size (warpRow:
/// oneWarpRow of the shape, the same for every config). Folds: one
/// pass, about 32 elements of the row per thread (fewer threads per row:
/// fewer shuffle stages and idle lanes; more: too many registers), then
/// small CTAs (steady-stream tune on the H200: LN rows of 4096 r1.t128.v4
/// beat r1.t64.v8 by 5%, bench/results/2026-11-30-s2-tune.md). Without
/// folds: 256-thread CTAs; long rows take more threads per row (fewer
/// accesses per thread, all of them in flight at once).
int rowScore(const KernelDef &def, const ShapeSpec &shape, const TileConfig &c,
             int64_t headTailLanes, bool warpRow) {
  const int64_t D = shape.cols;
  int s = 0;
  if (def.folds.empty()) {
    s += c.ctaThreads() == 256 ? 300 : c.ctaThreads() == 128 ? 200 : 0;
    s += c.rowsPerCta <= 8 ? 5 : 0;
    if (D >= 1024)
      s += 10 * std::countr_zero(unsigned(c.threadsPerRow));
    return s;
  }
  double perThread = double(D) / c.threadsPerRow;
  // Outweighs the vector (8 vs 4 elements: 4000) one octave away.
  double want = headTailLanes ? std::log2(double(D) / headTailLanes)
                : warpRow     ? std::log2(double(D) / 32)
                              : 5.0;
  s -= int(5000 * std::fabs(std::log2(std::max(perThread, 1.0)) - want));
  // Small CTAs (H200: r1.t64 for LN/RMSNorm rows of 4096), 64 threads
  // before 32: an SM holds at most 32 CTAs, so 32-thread ones stop at
  // half its warps (Wan C = 96: r16.t4 162-164 us, r8.t4 164-170); 32
  // first for a packed row, 16 such CTAs an SM (packsRow's comment), and
  // for a row on one warp.
  s += c.ctaThreads() == 64 ? 40
       : c.ctaThreads() == 32
           ? (warpRow || packsRow(def, shape, c) ? 50 : 30)
       : c.ctaThreads() == 128 ? 20 : c.ctaThreads() == 256 ? 10 : 0;
  return s;
}

/// Shared-row twins are not the default before H200 timings, also where
/// their base config does not fit (hf_rmsnorm residual=1 at 5120); nor are
/// channels-first lanes in one warp (.w1), slower than lanes a warp apart
/// on the H200 (Wan C = 96: 212-413 us against 183; short runs a plane).
bool untimedVariant(const TileConfig &c) {
  return c.sharedRow || c.lanesInWarp;
}
} // namespace

TileConfig codegen::defaultConfig(const KernelDef &def,
                                  const ShapeSpec &shape) {
  std::vector<TileConfig> all = enumerateConfigs(def, shape);
  std::erase_if(all, untimedVariant);
  if (all.empty())
    return TileConfig{};
  // The layout first (channels-first lanes and pixels, passes), then the
  // widest vector, then the threads a row and CTA size (rowScore).
  const int64_t D = shape.cols;
  // Channels-first rows of 64 channels and more run rolled (p2): on the
  // H200 at [1,C,4,240,416] the loop beat the unrolled row by 16% at C = 64,
  // 25% at 96 and 2.2x at 128, and lost below 64 (C = 12, 33);
  // bench/results/2026-12-02-chanfirst-unroll-h200.md.
  const bool preferRolled = dsl::isChannelsFirst(def) && D >= 64;
  // Channels-first folds of several lanes run one thread per lane, a warp
  // apart, 32 pixels per CTA (H200, Wan C = 96 / 192 / 384 at ovs 4:
  // r32.t4.v1.p1 beat every other config by 15-60%).
  // Two adjacent pixels a thread (.o2, outputs gathered across them) where
  // the pixel's lanes are on several threads and a thread then holds at
  // most 48 elements, else one: on the H200 (Wan NCDHW, bench_kernels)
  // C = 96 ran r64.t4.v1.p1.o2 219 us against r32.t4.v1.p1 251; at C = 192
  // (96 elements a thread) and 384 one pixel stayed ahead (tuner: 140 vs
  // 158, 56 vs 59 us); bench/results/2026-12-02-s9-gpu-session.md.
  auto pixelsWanted = [&](const TileConfig &c) {
    return dsl::isChannelsFirst(def) && c.threadsPerRow > 1 &&
                   D / c.threadsPerRow * 2 <= 48
               ? 2
               : 1;
  };
  // Rows with aten's head and tail (scalar, two passes) run one thread per
  // lane: on the H200 hf_rmsnorm at [1,4096,4099] took 25.0 us at
  // r4.t32.v1.p2 (its 32 lanes) and 36.6 at r1.t128.v1.p2 (32 elements a
  // thread); bench/results/2026-12-02-s10-gpu-session.md, call 5.
  const int64_t headTailLanes = headTailLaneCount(def, D);
  const bool warpRow = oneWarpRow(shape, headTailLanes);
  const int orderLanes = def.folds.empty() ? 1 : def.folds[0].order.threads;
  const int wantP = pixelThreads(def, D);
  auto score = [&](const TileConfig &c) {
    int s = 0;
    const int o = c.pixelsPerThread, P = c.threadsPerRow;
    // 32 pixels of threads a CTA; with split accumulators at least 256
    // threads (Wan C = 96 at ovs 1: r64.t4.v1.p1 217 us, r32.t4.v1.p1 257).
    if (dsl::isChannelsFirst(def) && P > 1)
      s += 1000000 * (P <= wantP ? P : -P) +
           ((P > orderLanes ? c.ctaThreads() == std::max(256, 32 * P)
                            : c.rowsPerCta == 32 * o)
                ? 1000
                : 0);
    s -= std::abs(o - pixelsWanted(c)) * 20000;
    s += c.twoPass == preferRolled ? 100000 : 0;
    s += vectorScore(def, c, D);
    s += rowScore(def, shape, c, headTailLanes, warpRow);
    return s;
  };
  return *std::max_element(all.begin(), all.end(),
                           [&](const TileConfig &a, const TileConfig &b) {
                             return score(a) < score(b);
                           });
}

