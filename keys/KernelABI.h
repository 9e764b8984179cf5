//===- keys/KernelABI.h - A kernel's parameter list, written once -*- C++ -*-===//
//
// The one definition of a kernel's parameters: codegen declares them from
// it (codegen/LowerToMLIR.cpp) and every launcher packs them with it
// (runtime/Runtime.cpp, autotune/GpuRunner.cpp), so the two cannot drift.
//
// Order: for each group g, for each operand i: pointer (u64), row stride in
// elements (i64; for a channels-first operand its column stride S, the
// pixels per image: rows n*S + s start at n*C*S + s; for an operand with
// two-level rows, keys::RowLevels, the stride between the rows of a group,
// whose size and the stride between groups are constants compiled into
// the kernel); then the rows of each group (i64); then the named dims
// (i64); then the scalars (f32, in the low four bytes of an 8-byte slot).
// Grid x = ceil(total rows / rowsPerCta), rows of group 0 first; block x =
// the config's CTA threads.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_KERNELABI_H
#define BITFOLD_SPEC_KERNELABI_H

#include "dsl/IR.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bitfold::keys {

/// Limits of the fixed-size launch structures (no allocation per launch).
constexpr int kMaxGroups = 4;
constexpr int kMaxOperands = 12;
constexpr int kMaxDims = 4;
constexpr int kMaxScalars = 8;
constexpr int kMaxParams =
    kMaxGroups * kMaxOperands * 2 + kMaxGroups + kMaxDims + kMaxScalars;

struct KernelABI {
  enum class Param : uint8_t { Pointer, RowStride, GroupRows, Dim, Scalar };

  int numGroups = 1;
  int numOperands = 0;
  int numDims = 0;
  int numScalars = 0;

  static KernelABI of(const dsl::KernelDef &def);

  size_t paramCount() const {
    return size_t(numGroups) * numOperands * 2 + numGroups + numDims +
           numScalars;
  }
  int pointer(int g, int i) const { return (g * numOperands + i) * 2; }
  /// Elements between rows (channels-first: S; a per-row output: between
  /// its values).
  int rowStride(int g, int i) const { return pointer(g, i) + 1; }
  int groupRows(int g) const { return numGroups * numOperands * 2 + g; }
  int dim(int d) const { return groupRows(numGroups) + d; }
  int scalar(int s) const { return dim(numDims) + s; }
  /// What the parameter at `index` (< paramCount()) holds.
  Param kindOf(int index) const;

  bool operator==(const KernelABI &) const = default;
};

/// Packs one launch's arguments into 8-byte slots at their ABI positions.
class ParamPacker {
public:
  ParamPacker(const KernelABI &abi, uint64_t *slots)
      : abi(abi), slots(slots) {}
  void pointer(int g, int i, uint64_t address) {
    slots[abi.pointer(g, i)] = address;
  }
  void rowStride(int g, int i, int64_t elements) {
    slots[abi.rowStride(g, i)] = uint64_t(elements);
  }
  void groupRows(int g, int64_t rows) { slots[abi.groupRows(g)] = uint64_t(rows); }
  void dim(int d, int64_t value) { slots[abi.dim(d)] = uint64_t(value); }
  void scalar(int s, float value) {
    uint64_t slot = 0;
    std::memcpy(&slot, &value, sizeof value);
    slots[abi.scalar(s)] = slot;
  }

private:
  const KernelABI &abi;
  uint64_t *slots;
};

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_KERNELABI_H
