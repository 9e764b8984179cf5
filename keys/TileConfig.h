//===- keys/TileConfig.h - How a row program runs ----------------*- C++ -*-===//
//
// A tile configuration: how a row program is mapped onto CTAs and threads.
// It never changes what the program computes (every legal config gives the
// same bits), only how fast. Its text is part of cache keys, entry files
// and the tune DB; codegen (codegen/Codegen.h) decides which configs are
// legal for a shape.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_TILECONFIG_H
#define BITFOLD_SPEC_TILECONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace bitfold::keys {

struct TileConfig {
  int rowsPerCta = 1;    ///< rows handled by one CTA.
  int threadsPerRow = 128;
  int vectorElems = 8;   ///< elements per thread per memory access.
  bool twoPass = false;  ///< re-read the row after a fold instead of
                         ///< keeping it in registers.
  /// Channels-first programs: adjacent rows (pixels) each thread handles,
  /// one vector access per channel for all of them; 1 elsewhere.
  int pixelsPerThread = 1;
  /// The row's loaded operands staged in shared memory (".s1"): the fold's
  /// loads also store their words there, and the output phase reads them
  /// back (one pass: instead of keeping them in registers; two passes:
  /// instead of a second read of global memory).
  bool sharedRow = false;
  /// Channels-first programs with several threads per pixel (".w1"): a
  /// pixel's threads are adjacent lanes of one warp, whose tree runs in
  /// shuffles, instead of lying a warp apart and meeting in shared memory.
  bool lanesInWarp = false;
  int ctaThreads() const {
    return rowsPerCta * threadsPerRow / pixelsPerThread;
  }
  /// "r1.t128.v8.p1", with ".oN" when pixelsPerThread is N > 1, ".s1"
  /// with sharedRow and ".w1" with lanesInWarp, in that order: stable text,
  /// used in cache keys and file names.
  std::string str() const;
  /// The inverse of str(); errors quote the text and the expected form.
  static llvm::Expected<TileConfig> parse(llvm::StringRef text);
  bool operator==(const TileConfig &) const = default;
};

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_TILECONFIG_H
