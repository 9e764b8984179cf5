//===- codegen/StridedAxis.cpp - The plan of channels-first programs ------===//
//
// A channels-first program (dsl::Layout::ChannelsFirst) folds along C, whose
// elements lie S apart, while consecutive rows (pixels) are adjacent. Its
// plan puts one row on one thread and consecutive rows on consecutive
// threads: every load and store of a warp touches 32 adjacent elements
// (coalesced), and each row's fold runs in its own thread (Pf = 1: every
// tree stage is a register merge). So every legal config evaluates the same
// DAG; configs differ in rows per CTA and in how the thread walks C:
//  - p1 (unrolled): the whole row unrolled, one pass, the loaded values
//    reused by the outputs. Serves the rows whose values and lane states
//    fit one thread's registers, at most 128 columns.
//  - p2 (rolled, EmitStridedAxis.cpp): the fold is a loop over C keeping
//    only the lanes' accumulators in registers, then a second loop re-reads
//    the row (L1/L2 hits) for the outputs. Any C; an unrolled re-reading
//    pass instead put every load of the row in flight at once (ptxas
//    spilled kilobytes at C = 192 and 384).
// No MLIR here.
//
//===----------------------------------------------------------------------===//

#include "codegen/Plan.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;

namespace {

/// The widest row a thread unrolls (p1). Wider rows run rolled: an
/// unrolled row of thousands of columns only costs compile time and code.
constexpr int64_t kMaxUnrolledColumns = 128;

} // namespace

llvm::Error codegen::checkStridedAxisConfig(const dsl::KernelDef &def,
                                            int64_t cols, const TileConfig &c) {
  if (!dsl::isChannelsFirst(def))
    return llvm::Error::success();
  if (!c.twoPass && cols > kMaxUnrolledColumns)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' is channels-first with C = {2}: "
                      "rows wider than {3} run rolled (t1.v1.p2)",
                      c.str(), def.name, cols, kMaxUnrolledColumns));
  if (c.threadsPerRow == 1 && c.vectorElems == 1)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("config {0}: '{1}' is channels-first: one thread per row, "
                    "one element per access (t1.v1.p1 unrolled, t1.v1.p2 "
                    "rolled), the threads running along the contiguous pixel "
                    "axis",
                    c.str(), def.name));
}

bool codegen::isRolled(const dsl::KernelDef &def, const TileConfig &c) {
  return c.twoPass && dsl::isChannelsFirst(def);
}

int codegen::rolledRegisters(const dsl::KernelDef &def, const Plan &plan) {
  // The lanes' accumulators live across the loop; an iteration's loads
  // and push temporaries, the row's addresses and the outputs' values
  // (kRolledUnroll columns per iteration) come on top.
  int est = 48;
  for (size_t f = 0; f < plan.folds.size(); ++f) {
    const FoldPlan &fp = plan.folds[f];
    est += 2 * def.folds[f].combiner->numFields() * fp.T * fp.acc;
  }
  return est;
}

std::vector<TileConfig>
codegen::stridedAxisConfigs(const dsl::KernelDef &def, const ShapeSpec &shape) {
  std::vector<TileConfig> out;
  for (bool rolled : {false, true})
    for (int rows : {32, 64, 128, 256}) {
      TileConfig c{rows, 1, 1, rolled};
      if (!llvm::errorToBool(checkConfig(def, shape, c)))
        out.push_back(c);
    }
  return out;
}
