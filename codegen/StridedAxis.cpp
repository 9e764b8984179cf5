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
//    shared memory (EmitFold.cpp, runGatheredTree). Fewer columns and registers per
//    thread, more threads in flight: at Wan C = 96..384 on the H200 the
//    fastest plan by 15-60%.
//  - p1 (unrolled): the thread's columns unrolled, one pass, the loaded
//    values reused by the outputs; at most 128 columns per thread.
//  - p2 (rolled, EmitStridedAxis.cpp, t1 only): the fold is a loop over C
//    keeping only the lanes' accumulators in registers, then a second loop
//    re-reads the row (L1/L2 hits) for the outputs. Any C; an unrolled
//    re-reading pass instead put every load of the row in flight at once
//    (ptxas spilled kilobytes at C = 192 and 384).
//  - .oN (N = 2, 4, one pass): a thread handles N adjacent pixels, as
//    aten's output_vec_size does: each channel of an image is one N-element
//    load or store (8 bytes for 4 bf16), each pixel's fold and epilogue the
//    same DAG as at one pixel (KernelBuilder's copies). Thread x of a warp
//    holds pixels N*x .. N*x+N-1: a warp access covers 32*N adjacent
//    pixels. Legal where the binding guarantees S % N == 0 and N-aligned
//    images (checkPixelsPerThread).
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
/// With o > 1 pixels per thread: columns times pixels, with lanes across
/// warps and with one thread per pixel (whose four accumulators per
/// column cost more: ptxas -v at C = 32 and 48, o = 4 and 2, used 255
/// registers and spilled). The register estimate bounds it further.
constexpr int64_t kMaxUnrolledPixelColumns = 256;
constexpr int64_t kMaxUnrolledPixelColumnsT1 = 64;

} // namespace

/// o > 1 pixels per thread: legal where the binding guarantees that a
/// thread's o pixels are adjacent in every operand and aligned to o
/// elements. Every fold order's output_vec_size is a multiple of o (the
/// binding checks each channels-first operand's S against it, so S % o ==
/// 0: a thread's pixels lie in one image, every group's pixel count is a
/// multiple of o); the operands are channels-first images or per-column
/// (per-row, per-batch and gathered operands address each pixel on its
/// own). Base alignment is the shape's (checkAlignment).
static llvm::Error checkPixelsPerThread(const dsl::KernelDef &def,
                                        const TileConfig &c) {
  const int o = c.pixelsPerThread;
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' {2}", c.str(), def.name, why.str()));
  };
  if (o == 1)
    return llvm::Error::success();
  if (!dsl::isChannelsFirst(def))
    return bad("is not channels-first: one row per thread (.oN is for "
               "channels-first pixels)");
  if (o != 2 && o != 4)
    return bad("runs 2 or 4 adjacent pixels per thread");
  if (c.twoPass)
    return bad("runs several pixels per thread only unrolled (p1)");
  if (def.folds.empty())
    return bad("has no fold whose output_vec_size guarantees S % o == 0");
  for (const dsl::FoldDecl &f : def.folds)
    if (!f.order.stridedAxis() || f.order.outputVec % o != 0)
      return bad(llvm::formatv("has fold order '{0}' of output_vec_size {1}: "
                               "S need not be a multiple of {2}",
                               f.order.name, f.order.outputVec, o)
                     .str());
  for (const dsl::OperandDecl &od : def.operands) {
    bool image = od.map == dsl::IndexMap::PerElement &&
                 od.layout == dsl::Layout::ChannelsFirst;
    if (!image && od.map != dsl::IndexMap::PerColumn)
      return bad("operand '" + od.name +
                 "' is neither a channels-first image nor per column");
  }
  bool gathers = false;
  dsl::forEachNode(def, [&](const dsl::ExprNode &n) {
    gathers = gathers || n.op == dsl::Op::Gather;
  });
  if (gathers)
    return bad("gathers (one column per pixel)");
  const int threadRows = c.rowsPerCta / o;
  if (c.rowsPerCta % o != 0 ||
      (c.threadsPerRow > 1 && !c.lanesInWarp && threadRows % 32 != 0))
    return bad(llvm::formatv("holds {0} pixels per CTA: a whole number of "
                             "threads' {1} pixels{2}",
                             c.rowsPerCta, o,
                             c.threadsPerRow > 1 && !c.lanesInWarp
                                 ? ", 32 threads a warp"
                                 : "")
                   .str());
  return llvm::Error::success();
}

llvm::Error codegen::checkStridedAxisConfig(const dsl::KernelDef &def,
                                            int64_t cols, const TileConfig &c) {
  if (llvm::Error e = checkPixelsPerThread(def, c))
    return e;
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("config {0}: '{1}' {2}", c.str(), def.name, why.str()));
  };
  if (c.lanesInWarp && (!dsl::isChannelsFirst(def) || c.threadsPerRow == 1 ||
                        c.twoPass || c.ctaThreads() % 32 != 0))
    return bad("runs .w1 (a pixel's threads in one warp) only channels-first "
               "with several threads per pixel, unrolled (p1), in whole warps");
  if (!dsl::isChannelsFirst(def))
    return llvm::Error::success();
  if (c.vectorElems != 1)
    return bad("is channels-first: one element per access (its columns lie S "
               "apart), the threads running along the contiguous pixel axis");
  if (c.twoPass && c.threadsPerRow != 1)
    return bad("is channels-first: the rolled plan (p2) runs one thread per "
               "pixel");
  if (c.threadsPerRow > 1 && !c.lanesInWarp && c.rowsPerCta % 32 != 0)
    return bad(llvm::formatv("is channels-first with {0} threads per pixel: "
                             "they lie a warp apart, so a CTA holds a "
                             "multiple of 32 pixels",
                             c.threadsPerRow));
  const int64_t maxColumns =
      c.pixelsPerThread == 1   ? kMaxUnrolledColumns
      : c.threadsPerRow == 1   ? kMaxUnrolledPixelColumnsT1
                               : kMaxUnrolledPixelColumns;
  if (!c.twoPass &&
      cols * c.pixelsPerThread > maxColumns * c.threadsPerRow)
    return bad(llvm::formatv("is channels-first with C = {0}: a thread "
                             "unrolls at most {1} columns times its pixels "
                             "(more threads per pixel, fewer pixels, or "
                             "rolled t1.v1.p2)",
                             cols, maxColumns));
  return llvm::Error::success();
}

bool codegen::isRolled(const dsl::KernelDef &def, const TileConfig &c) {
  return c.twoPass && dsl::isChannelsFirst(def);
}

bool codegen::lanesAcrossWarps(const dsl::KernelDef &def, const TileConfig &c) {
  return c.threadsPerRow > 1 && dsl::isChannelsFirst(def) && !c.lanesInWarp;
}

std::set<int> codegen::columnTableOperands(const dsl::KernelDef &def,
                                           const Plan &plan) {
  std::set<int> out;
  // One group: a CTA's rows may span groups whose tables would differ.
  if (!plan.lanesAcrossWarps || plan.folds.empty() || plan.rolled ||
      def.groups != 1)
    return out;
  std::set<int> outLoads;
  for (const dsl::OperandDecl &o : def.operands)
    if (o.isOutput)
      for (const dsl::Expr &v : dsl::outputValues(o))
        loadsOf(def, v.get(), outLoads);
  for (int i : outLoads)
    if (def.operands[i].map == dsl::IndexMap::PerColumn &&
        !def.operands[i].isOutput)
      out.insert(i);
  return out;
}

unsigned codegen::columnTableBytes(const dsl::KernelDef &def,
                                   const Plan &plan) {
  const int64_t P = plan.config.threadsPerRow;
  const int64_t J = (plan.cols + P - 1) / P;
  unsigned bytes = 0;
  for (int i : columnTableOperands(def, plan))
    bytes += unsigned(P * J * int64_t(dsl::dtypeBytes(def.operands[i].dtype)));
  return bytes;
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
  // Then the unrolled ones again with o = 2, 4 adjacent pixels per thread
  // (the same threads per CTA, o times the pixels). Last, the pixel's P
  // threads in one warp (.w1) in CTAs of 128 and 256 threads (256 * o / P
  // pixels: more than lanes across warps hold, with no barrier in the
  // tree; docs/aten-reduce.md, section 9).
  std::vector<TileConfig> out;
  for (int o : {1, 2, 4})
    for (bool rolled : {false, true})
      for (int P : {1, 2, 4, 8, 16}) {
        if (rolled && (P > 1 || o > 1))
          break;
        // One thread per pixel: 32..256 pixels per CTA; P > 1: 128..512
        // threads per CTA.
        for (int n : {32, 64, 128, 256}) {
          TileConfig c{(P == 1 ? n : 2 * n / P) * o, P, 1, rolled, o};
          if (P > 1 && n < 64)
            continue;
          if (!llvm::errorToBool(checkConfig(def, shape, c)))
            out.push_back(c);
        }
      }
  for (int o : {1, 2, 4})
    for (int P : {2, 4, 8, 16})
      for (int threads : {128, 256}) {
        TileConfig c{threads / P * o, P, 1, false, o};
        c.lanesInWarp = true;
        if (!llvm::errorToBool(checkConfig(def, shape, c)))
          out.push_back(c);
      }
  return out;
}
