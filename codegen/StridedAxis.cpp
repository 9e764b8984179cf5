//===- codegen/StridedAxis.cpp - The plan of channels-first programs ------===//
//
// A channels-first program (dsl::Layout::ChannelsFirst) folds along C, whose
// elements lie S apart, while consecutive rows (pixels) are adjacent. Its
// plan puts consecutive rows on consecutive threads of a warp: every load
// and store of a warp touches 32 adjacent elements (coalesced). Every legal
// config evaluates the same DAG; configs differ in rows per CTA, in how
// many threads hold a row's fold lanes, and in how a thread walks C:
//  - t1: one thread per row, every tree stage a register merge.
//  - tP (P > 1, P <= the order's lanes, aten's block.y split): thread p of
//    a row holds lane p, the P threads a warp apart (Plan::lanesAcrossWarps)
//    so that a warp still reads 32 adjacent pixels; the lanes meet through
//    shared memory (EmitFold.cpp, emitGatheredTree). Fewer columns and registers per
//    thread, more threads in flight: at Wan C = 96..384 on the H200 the
//    fastest plan by 15-60%.
//  - p1 (unrolled): the thread's columns unrolled, one pass, the loaded
//    values reused by the outputs; at most 128 columns per thread.
//  - p2 (rolled, EmitStridedAxis.cpp, t1 only): the fold is a loop over C
//    keeping only the lanes' accumulators in registers, then a second loop
//    re-reads the row (L1/L2 hits) for the outputs. Any C; an unrolled
//    re-reading pass instead put every load of the row in flight at once
//    (ptxas spilled kilobytes at C = 192 and 384).
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
  if (c.vectorElems != 1)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' is channels-first: one element per "
                      "access (its columns lie S apart), the threads running "
                      "along the contiguous pixel axis",
                      c.str(), def.name));
  if (c.twoPass && c.threadsPerRow != 1)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' is channels-first: the rolled plan "
                      "(p2) runs one thread per pixel",
                      c.str(), def.name));
  if (c.threadsPerRow > 1 && c.rowsPerCta % 32 != 0)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' is channels-first with {2} threads "
                      "per pixel: they lie a warp apart, so a CTA holds a "
                      "multiple of 32 pixels",
                      c.str(), def.name, c.threadsPerRow));
  if (!c.twoPass && cols > kMaxUnrolledColumns * c.threadsPerRow)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' is channels-first with C = {2}: a "
                      "thread unrolls at most {3} columns (more threads per "
                      "pixel, or rolled t1.v1.p2)",
                      c.str(), def.name, cols, kMaxUnrolledColumns));
  return llvm::Error::success();
}

bool codegen::isRolled(const dsl::KernelDef &def, const TileConfig &c) {
  return c.twoPass && dsl::isChannelsFirst(def);
}

bool codegen::lanesAcrossWarps(const dsl::KernelDef &def, const TileConfig &c) {
  return c.threadsPerRow > 1 && dsl::isChannelsFirst(def);
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
  // Unrolled with P threads per pixel (P <= the folds' lanes: thread p of a
  // pixel holds lane p), then rolled with one.
  std::vector<TileConfig> out;
  for (bool rolled : {false, true})
    for (int P : {1, 2, 4, 8, 16}) {
      if (rolled && P > 1)
        break;
      // One thread per pixel: 32..256 pixels per CTA; P > 1: 128..512
      // threads per CTA.
      for (int n : {32, 64, 128, 256}) {
        TileConfig c{P == 1 ? n : 2 * n / P, P, 1, rolled};
        if (P > 1 && n < 64)
          continue;
        if (!llvm::errorToBool(checkConfig(def, shape, c)))
          out.push_back(c);
      }
    }
  return out;
}
