//===- codegen/FoldKnowledge.h - Static facts of a fold (private) -*- C++ -*-===//
//
// Fields of a virtual fold lane that the host knows exactly (a Welford
// count: it depends only on how many elements the lane saw), and which
// lanes' states still reach lane 0's final state. Evaluated with the
// interpreter's IEEE semantics and only through ops the host computes
// exactly (never rcp.approx & co.). No MLIR: a stage of its own, dumpable.
//
// A register whose live lanes all hold the same known value becomes that
// constant (no shuffle of it; its uses, n > 0 or rcp(n), depend on no data).
// Threads where the lane is dead compute a value nobody reads, so nothing
// observable changes.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_FOLDKNOWLEDGE_H
#define BITFOLD_CODEGEN_FOLDKNOWLEDGE_H

#include "codegen/Plan.h"

#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace bitfold::codegen {

struct FoldFacts {
  int fields = 0;
  /// constants[point][L * fields + i]: the bits register lane L's field i
  /// holds in every thread where its virtual lane is live, at `point`
  /// (0: after the pushes; s + 1: after tree stage s).
  std::vector<std::vector<std::optional<uint32_t>>> constants;
  /// keep[s][L]: tree stage s must keep the old state (select) of register
  /// lane L in threads it does not update: one of them holds a live lane.
  std::vector<std::vector<bool>> keep;
  std::optional<uint32_t> constant(size_t point, int lane, int field) const {
    return constants[point][size_t(lane) * fields + field];
  }
};

/// The facts of fold `fp` (combiner `cb`) over rows of `cols` elements.
FoldFacts analyseFold(const FoldPlan &fp, const dsl::Combiner &cb,
                      int64_t cols, int threadsPerRow);

/// The stage's dump: the constants and dropped keep-selects of each fold.
void printFoldFacts(llvm::raw_ostream &os, const Plan &plan,
                    llvm::ArrayRef<FoldFacts> facts);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_FOLDKNOWLEDGE_H
