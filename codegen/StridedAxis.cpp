//===- codegen/StridedAxis.cpp - The plan of channels-first programs ------===//
//
// A channels-first program (dsl::Layout::ChannelsFirst) folds along C, whose
// elements lie S apart, while consecutive rows (pixels) are adjacent. Its
// plan puts one row on one thread and consecutive rows on consecutive
// threads: every load and store of a warp touches 32 adjacent elements
// (coalesced), and each row's fold runs in its own thread, all of its
// order's virtual lanes in registers (Pf = 1: every tree stage is a
// register merge). So every legal config evaluates the same DAG; configs
// differ in rows per CTA. One pass only: a thread's row is unrolled, and a
// second pass re-reading it put every element's load in flight at once
// (ptxas spilled kilobytes at C = 192 and 384), so rows wider than one
// thread's registers have no config yet. No MLIR here.
//
//===----------------------------------------------------------------------===//

#include "codegen/Plan.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;

llvm::Error codegen::checkStridedAxisConfig(const dsl::KernelDef &def,
                                            const TileConfig &c) {
  if (!dsl::isChannelsFirst(def))
    return llvm::Error::success();
  if (c.threadsPerRow == 1 && c.vectorElems == 1 && !c.twoPass)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("config {0}: '{1}' is channels-first: one thread per row, "
                    "one element per access, one pass (t1.v1.p1), the threads "
                    "running along the contiguous pixel axis",
                    c.str(), def.name));
}

std::vector<TileConfig>
codegen::stridedAxisConfigs(const dsl::KernelDef &def, const ShapeSpec &shape) {
  std::vector<TileConfig> out;
  for (int rows : {32, 64, 128, 256}) {
    TileConfig c{rows, 1, 1, false};
    if (!llvm::errorToBool(checkConfig(def, shape, c)))
      out.push_back(c);
  }
  return out;
}
