//===- keys/ShapeSpec.h - What a kernel is specialised on --------*- C++ -*-===//
//
// A kernel is compiled for a ShapeSpec: the column count, each operand's
// alignment and the index width. Row counts are launch arguments and never
// change the code. A ShapeClass is the same facts in a fixed-size form (the
// runtime hashes it on every launch) plus, where configs are tuned per row
// count, a power-of-two row bucket: rows in [2^k, 2^(k+1)) share bucket 2^k,
// because rows change which config is fastest (grid size vs SM count).
//
// Derivation, one path for everyone:
//   launch facts (cols, per-operand alignment, largest element offset, rows)
//     -> classifyShape() -> ShapeClass -> ShapeClass::shapeSpec()
// The runtime feeds it the facts of the bound tensors (TensorBinding.h);
// the tuner and `bitfold compile` feed it dense tensors' facts through
// denseShapeClass(), computed with the same two rules (viewAlignBytes,
// lastElementOffset), so the tuner keys exactly what a launch looks up.
//
// Text: ShapeSpec "c4096.a16-16-16-16.o32"; ShapeClass adds "/r4096" when
// rows are bucketed (the tune DB's shape class). An operand bound with
// two-level rows (RowLevels) adds ".l<i>:<inner>x<outer>", so such a
// class never shares a kernel with a one-level one, while every one-level
// class keeps its text (and its cache keys). A channels-first class whose
// channels-first operands all have one S per group adds ".s1" (the kernel
// then divides a pixel index by S once for all of them); only definitions
// with two or more such operands can carry it (spatialSharable).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_SHAPESPEC_H
#define BITFOLD_SPEC_SHAPESPEC_H

#include "keys/KernelABI.h"

#include "llvm/ADT/ArrayRef.h"

#include <array>
#include <bit>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace bitfold::keys {

/// Two-level rows of one row-major operand: `inner` rows one row stride
/// apart (the ABI's row-stride slot) make a group, groups lie `outer`
/// elements apart: row r starts at (r / inner) * outer + (r % inner) *
/// rowStride. A fused QKV projection's q view (B, S, H, D) is inner = H
/// heads D apart, outer = 3 * H * D. Both are compile-time constants of
/// the kernel; inner = 0 is the one-level map r * rowStride.
struct RowLevels {
  int64_t inner = 0;
  int64_t outer = 0;
  bool operator==(const RowLevels &) const = default;
};

struct ShapeSpec {
  int64_t cols = 0;
  /// Per operand (KernelDef order): base address and row stride (in bytes)
  /// are multiples of this many bytes (1, 2, 4, 8 or 16). Wider vectors are
  /// legal only where all operands allow them.
  std::vector<int> alignBytes;
  /// Largest element offset any operand can reach; above 2^31 - 1 (or 0,
  /// unknown) the kernel indexes with 64-bit arithmetic.
  int64_t maxElementOffset = 0;
  /// Per operand, its two-level rows; empty when every operand has one
  /// level.
  std::vector<RowLevels> rowLevels;
  /// Channels-first: in each group every channels-first operand has the
  /// same S (pixels per image), so one pixel offset and one column stride
  /// address them all. False: each operand's own S.
  bool oneSpatial = false;
  /// At least kManyRows rows, for definitions classed by their row count
  /// (rowCountSplits); false for every other definition. Picks the default
  /// config, not the code: both classes compute the same bits.
  bool manyRows = false;
  std::string str() const; ///< stable text for keys.
  /// The two-level rows of operand i (inner = 0: one level).
  RowLevels levels(size_t i) const {
    return i < rowLevels.size() ? rowLevels[i] : RowLevels();
  }
};

/// Largest of 16/8/4/2/1 dividing `base` and, when the operand has more
/// than one row, its row stride in bytes. (Inline: every launch binds with
/// it.)
inline int viewAlignBytes(uint64_t base, int64_t rows,
                          uint64_t rowStrideBytes) {
  int align = 16;
  while (align > 1 && (base % unsigned(align) ||
                       (rows > 1 && rowStrideBytes % unsigned(align))))
    align /= 2;
  return align;
}

/// Element offset of the last element of `rows` rows of `cols` elements,
/// `rowStride` elements apart (0 when empty). False when it exceeds int64.
inline bool lastElementOffset(int64_t rows, int64_t rowStride, int64_t cols,
                              int64_t &out) {
  out = 0;
  if (rows <= 0 || cols <= 0)
    return true;
  return !__builtin_mul_overflow(rows - 1, rowStride, &out) &&
         !__builtin_add_overflow(out, cols - 1, &out);
}

/// Element offset of the last element of `rows` rows of two-level `lv`
/// (lv.inner > 0), `rowStride` apart within a group, `cols` elements
/// `colStride` apart (channels-first: rows are pixels, lv = {S, C * S},
/// rowStride 1, colStride S). False when it exceeds int64.
inline bool lastElementOffset(int64_t rows, RowLevels lv, int64_t rowStride,
                              int64_t cols, int64_t colStride, int64_t &out) {
  out = 0;
  if (rows <= 0 || cols <= 0)
    return true;
  const int64_t groups = (rows - 1) / lv.inner, inGroup =
      rows > lv.inner ? lv.inner - 1 : rows - 1;
  int64_t a = 0, b = 0, c = 0;
  return !__builtin_mul_overflow(groups, lv.outer, &a) &&
         !__builtin_mul_overflow(inGroup, rowStride, &b) &&
         !__builtin_mul_overflow(cols - 1, colStride, &c) &&
         !__builtin_add_overflow(a, b, &out) &&
         !__builtin_add_overflow(out, c, &out);
}

/// Largest power of two <= rows (1 for rows <= 1).
inline int64_t rowBucket(int64_t rows) {
  return rows <= 1 ? 1 : int64_t(std::bit_floor(uint64_t(rows)));
}

/// The row class a definition was built for: the smallest row count its
/// fold orders admit where one has a row range (aten's generic reduction:
/// 1, 2, 4, 8 or 16; docs/aten-reduce.md), else 0 (every row count). Row
/// counts of different classes take different definitions, so the class
/// joins the key a launch is looked up by.
int64_t definitionRowClass(const dsl::KernelDef &def);

/// Whether `def` has two or more channels-first operands: the only
/// definitions whose classes may say that they share one S (oneSpatial).
bool spatialSharable(const dsl::KernelDef &def);

/// The row count from which a definition that rowCountSplits takes its
/// many-rows class (a power of two, so that a tune DB's row buckets never
/// straddle it).
inline constexpr int64_t kManyRows = 1024;

/// Whether launches of `def` at `cols` columns are classed by their row
/// count: aten's vectorized LayerNorm order (lanes on several warps) at
/// 2048-2304 columns, whose best config for thousands of rows (one warp a
/// row, codegen::defaultConfig) loses at decode-size row counts.
bool rowCountSplits(const dsl::KernelDef &def, int64_t cols);

/// ShapeSpec::manyRows of a launch of `def` over `totalRows` rows.
inline bool manyRowsOf(const dsl::KernelDef &def, int64_t cols,
                       int64_t totalRows) {
  return totalRows >= kManyRows && rowCountSplits(def, cols);
}

struct ShapeClass {
  int64_t cols = 0;
  int64_t rowBucket = 0; ///< 0: rows not bucketed.
  /// definitionRowClass of the definition launched. Not in str(): the
  /// definition's hash, in every cache and tune key, already tells the
  /// classes apart.
  int64_t rowClass = 0;
  bool index64 = false;  ///< some element offset exceeds 2^31 - 1.
  uint8_t numOperands = 0;
  /// Some operand has two-level rows (then `levels` says which).
  bool twoLevel = false;
  /// ShapeSpec::oneSpatial: compiled into the kernel, part of the class.
  bool oneSpatial = false;
  bool manyRows = false; ///< ShapeSpec::manyRows.
  std::array<uint8_t, kMaxOperands> alignBytes{};
  std::array<RowLevels, kMaxOperands> levels{};

  /// The ShapeSpec compiled for this class; its maxElementOffset is the
  /// class bound (2^31 - 1 or 2^62), never a row-dependent offset, so row
  /// counts split the cache only where manyRows does.
  ShapeSpec shapeSpec() const;
  /// shapeSpec().str(), then "/r<bucket>" when rows are bucketed.
  std::string str() const;
  /// Cheap (inline): the runtime hashes a class on every launch.
  size_t hash() const {
    uint64_t h = uint64_t(cols) * 0x9E3779B97F4A7C15ull;
    h ^= uint64_t(rowBucket) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= uint64_t(rowClass) * 0x2545F4914F6CDD1Dull + (h << 6) + (h >> 2);
    h ^= (index64 ? 17u : 0u) + (oneSpatial ? 34u : 0u) +
         (manyRows ? 68u : 0u) + numOperands +
         (h << 6) + (h >> 2);
    for (int i = 0; i < numOperands; ++i)
      h = h * 131 + alignBytes[i];
    if (twoLevel)
      for (int i = 0; i < numOperands; ++i)
        h = h * 131 + uint64_t(levels[i].inner) * 0x2545F4914F6CDD1Dull +
            uint64_t(levels[i].outer);
    return size_t(h);
  }
  bool operator==(const ShapeClass &) const = default;
};

/// The class of a launch: `alignBytes` per operand (at most kMaxOperands),
/// the largest element offset any operand reaches, and the total rows
/// (bucketed only when `bucketRows`).
/// (Inline: every launch classifies its binding.)
inline ShapeClass classifyShape(int64_t cols, llvm::ArrayRef<int> alignBytes,
                                int64_t maxElementOffset, int64_t totalRows,
                                bool bucketRows) {
  ShapeClass c;
  c.cols = cols;
  c.rowBucket = bucketRows ? rowBucket(totalRows) : 0;
  c.index64 = maxElementOffset > int64_t(INT32_MAX);
  c.numOperands = uint8_t(
      alignBytes.size() < size_t(kMaxOperands) ? alignBytes.size()
                                               : size_t(kMaxOperands));
  for (size_t i = 0; i < c.numOperands; ++i)
    c.alignBytes[i] = uint8_t(alignBytes[i]);
  return c;
}

/// The class the runtime derives for dense, freshly allocated tensors
/// (256-byte aligned bases, packed rows) of a problem with `groupRows` rows
/// per group and `rowsPerBatch` rows per batch (per-batch operands hold one
/// row per batch, per-column operands one row). Dense channels-first
/// operands share their S: oneSpatial where the definition may say so.
ShapeClass denseShapeClass(const dsl::KernelDef &def, int64_t cols,
                           llvm::ArrayRef<int64_t> groupRows,
                           int64_t rowsPerBatch, bool bucketRows);

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_SHAPESPEC_H
