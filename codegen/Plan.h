//===- codegen/Plan.h - Physical mapping of a row program (private) -*- C++ -*-===//
//
// A Plan is a TileConfig checked against one KernelDef and ShapeSpec and
// expanded into the decisions the lowering needs: which physical thread and
// register holds which virtual fold lane, how each tree stage moves data
// (register / shuffle / shared memory), which elements each thread touches.
// It is pure arithmetic (no MLIR), shared by legality checks and lowering.
//
// Fold lanes (README.md has the picture). A fold order has T virtual lanes,
// lane t owning the V-element vectors t, t+T, ... The row's P threads map
// them as follows: Pf = min(P, T) threads hold lanes, k = T / Pf lanes each;
// A adjacent lanes per thread (A | k) so one thread reads A*V contiguous
// elements; lane t = lo + A * (p + Pf * hi), lo < A, hi < k / A. A stage with
// offset o is a register merge when o < A or o >= A * Pf, otherwise a merge
// with thread p + o / A: a shuffle when o / A < 32, shared memory beyond.
// A lane with several accumulators (aten's generic reduction) keeps them
// all in the thread that holds the lane, except where channels-first lanes
// across warps split them over threads (FoldPlan::split).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_PLAN_H
#define BITFOLD_CODEGEN_PLAN_H

#include "codegen/Codegen.h"

#include <set>

namespace bitfold::codegen {

struct StagePlan {
  enum Where : uint8_t { RegisterLo, RegisterHi, Shuffle, Shared };
  Where where;
  int offset;       ///< virtual lane offset o.
  int threadOffset; ///< Shuffle/Shared: o / A. RegisterLo: o. RegisterHi: o / (A*Pf).
};

struct FoldPlan {
  int T = 1, V = 1; ///< virtual lanes and vector width (from the FoldOrder).
  int Pf = 1;       ///< physical threads that hold lanes: min(P, T).
  int k = 1;        ///< lanes per thread: T / Pf.
  int A = 1;        ///< adjacent lanes per thread.
  int access = 1;   ///< elements per memory access in the fold phase.
  int64_t reps = 0; ///< vectors per lane: ceil(ceil(D / V) / T).
  /// States per virtual lane (FoldOrder::accumulators), merged serially
  /// into the first before the tree: element e of each vector goes to
  /// state e (byElement), else the lane's m-th vector to state m % acc.
  int acc = 1;
  bool byElement = false;
  /// aten's aligned vectors with a head and tail per row (C % V != 0,
  /// docs/aten-reduce.md section 7): the row's head h = -(r*C) mod V is a
  /// run-time value; the vectors start at column h (only whole ones are
  /// pushed), lane V-h+e pushes head column e first and lane t < (C-h) % V
  /// the tail column after its vectors, both into state 0. Two passes, one
  /// lane a thread access (A = 1), accesses that divide gcd(C, V).
  bool headTail = false;
  /// Rolled rows (Plan::rolledRows): each lane's vectors m < loopReps go
  /// through a loop, loopStep of them per iteration; the rest are unrolled
  /// after it. 0: no loop.
  int64_t loopReps = 0, loopStep = 0;
  /// Channels-first lanes across warps with more threads per pixel than
  /// the order has lanes (planFold): each of the order's T0 = T / split
  /// lanes is split into its `split` round-robin accumulators. Lane t's
  /// m-th column t + T0 * m goes to accumulator m % split, so accumulator
  /// g is the one-accumulator lane t + T0 * g of T lanes, pushing columns
  /// (t + T0 * g) + T * j in order. Before the tree, lane t merges them
  /// serially, ((a0 + a1) + a2) + ..., as aten does: the same DAG.
  int split = 1;
  std::vector<StagePlan> stages;
  bool needsShared() const;
  /// The lanes the tree stages run over (the order's).
  int treeLanes() const { return T / split; }
};

struct Plan {
  keys::TileConfig config;
  int64_t cols = 0;
  /// Per operand, its two-level rows (ShapeSpec::rowLevels; empty: all
  /// one level).
  std::vector<keys::RowLevels> rowLevels;
  /// Every channels-first operand has one S (ShapeSpec::oneSpatial).
  bool oneSpatial = false;
  std::vector<FoldPlan> folds;
  /// One pass with folds: the output phase walks fold 0's element mapping
  /// and reuses the values loaded for the fold.
  bool outputUsesFoldMapping = false;
  /// One pass whose thread keeps more of the row than fits 128 registers
  /// as f32, every kept operand bf16, its pairs within 112 (ConfigSpace.cpp,
  /// planPackedRow): the output phase widens each kept element again from
  /// its loaded word (a prmt, exact) instead of reusing the fold's f32, so
  /// the row stays in registers as packed pairs, and the kernel asks ptxas
  /// for minCtasPerSm CTAs an SM (.minnctapersm).
  bool packedRow = false;
  int minCtasPerSm = 1;
  /// Channels-first, rolled (StridedAxis.cpp): loops over C, one for each
  /// fold and one for the outputs.
  bool rolled = false;
  /// Channels-first with P > 1 threads per pixel (StridedAxis.cpp): the P
  /// threads of a pixel lie a warp apart, so every warp reads 32 adjacent
  /// pixels; each stores its lanes to shared memory once, then every thread
  /// runs the whole tree (EmitFold.cpp, runGatheredTree). Not with
  /// TileConfig::lanesInWarp (".w1"), whose P threads of a pixel are
  /// adjacent lanes of a warp.
  bool lanesAcrossWarps = false;
  /// Output phase otherwise: thread p handles the W-element chunks
  /// p + P * j, j < outChunks, W = outVectorElems (the config's vector
  /// width, or a narrower one where rollOnePass needs it for a loop).
  int64_t outChunks = 0;
  int outVectorElems = 0;
  /// Rolled rows (two passes, no fold, or one pass rolled in
  /// RolledRowsMode::Always; rolledRowsMode()): the folds' vectors
  /// (FoldPlan::loopReps) and the output chunks j < outLoopChunks are loops,
  /// outLoopStep chunks per iteration, the rest unrolled after them. Same
  /// DAG as the unrolled plan; only the PTX is shorter.
  bool rolledRows = false;
  int64_t outLoopChunks = 0, outLoopStep = 0;
  bool index64 = false;
  unsigned sharedBytes = 0;
  int estimatedRegisters = 0;
  int registerLimit = 255;
  /// Target compute capability (90 for sm_90): gates instructions that
  /// older targets lack.
  int smVersion = 90;
  /// Emit grid dependency control (CompileOptions::gridDependencyControl).
  bool gridDependencyControl = false;
};

/// Which row plans roll their per-chunk repetition (the variable is in
/// every cache key): BITFOLD_ROLLED_ROWS unset (Wide) rolls the plans that
/// may roll (two passes, or no fold) past 64 vector accesses of a row per
/// thread; "1" (Always) also every other two-pass plan with folds (rolled,
/// those run ~8% slower: not the default); "0" (Never) none.
enum class RolledRowsMode { Wide, Always, Never };
RolledRowsMode rolledRowsMode();

/// Which rows `options` rolls: every one that may (CompileOptions::rollRows)
/// or as rolledRowsMode() says.
RolledRowsMode rolledRowsMode(const keys::CompileOptions &options);

/// Checks `config` against the program and shape; on success, the plan,
/// its rows rolled as `rolled` says (legality does not depend on it).
llvm::Expected<Plan> makePlan(const dsl::KernelDef &def,
                              const keys::ShapeSpec &shape,
                              const keys::TileConfig &config,
                              RolledRowsMode rolled = rolledRowsMode());

/// Adds the operands whose per-element loads appear in `root`'s cone (not
/// looking through folds; per-row inputs are loaded once per row) to `out`.
void loadsOf(const dsl::KernelDef &def, const dsl::ExprNode *root,
             std::set<int> &out);

/// The operands a shared row (TileConfig::sharedRow) stages: loaded per
/// element by a fold and by the outputs (row-major, not channels-first).
std::set<int> sharedRowOperands(const dsl::KernelDef &def);

/// Registers ptxas may use per thread with `ctaThreads` threads (.maxntid).
int registerLimit(int ctaThreads);

// ---- Channels-first programs (StridedAxis.cpp) ----
/// A channels-first program runs one element of a row per access (v1):
/// tP.v1.p1 unrolled (at most 128 columns a thread), t1.v1.p2 rolled (any
/// row), and .oN, N adjacent pixels a thread in one N-element access
/// (TileConfig::pixelsPerThread); other programs pass, at one pixel.
llvm::Error checkStridedAxisConfig(const dsl::KernelDef &def, int64_t cols,
                                   const keys::TileConfig &config);
/// Whether `config` runs channels-first `def` rolled: the fold a loop over
/// C, then a second loop re-reading the row for the outputs.
bool isRolled(const dsl::KernelDef &def, const keys::TileConfig &config);
/// Whether `config` runs channels-first `def` with several threads per
/// pixel, a warp apart (Plan::lanesAcrossWarps); with TileConfig::
/// lanesInWarp they are adjacent threads instead, mapped and folded as a
/// row's threads are (shuffle stages).
bool lanesAcrossWarps(const dsl::KernelDef &def,
                      const keys::TileConfig &config);
/// Lanes across warps with a fold, one group: the per-column inputs the
/// outputs load, staged once per CTA in shared memory with lane p's
/// columns p + P * j at p * ceil(C / P) + j (KernelBuilder::
/// stageColumnTables), so a thread reads its channels as one vector per
/// gathered group instead of one 2-byte load per channel. The fold's barrier
/// orders the staging: only the output phase reads the tables.
std::set<int> columnTableOperands(const dsl::KernelDef &def, const Plan &plan);
/// Shared bytes of columnTableOperands' tables.
unsigned columnTableBytes(const dsl::KernelDef &def, const Plan &plan);
/// Registers a rolled plan needs per thread (a conservative estimate).
int rolledRegisters(const dsl::KernelDef &def, const Plan &plan);
/// The config space of a channels-first program (rows per CTA; unrolled
/// where legal, then rolled).
std::vector<keys::TileConfig> stridedAxisConfigs(const dsl::KernelDef &def,
                                                 const keys::ShapeSpec &shape);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_PLAN_H
