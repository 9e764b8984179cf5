//===- runtime/TensorBinding.h - DLTensors -> a kernel's operands -*- C++ -*-===//
//
// Checks the tensors of a launch against a KernelDef and derives what the
// kernel needs: rows per group, the column count, named dims (S), and per
// operand the base address, row stride and alignment. Every problem is a
// RuntimeError with a precise message (which tensor, which operand, what
// was expected, what was found). Pure host code, allocation free unless it
// fails: it runs on every launch.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_TENSORBINDING_H
#define BITFOLD_RUNTIME_TENSORBINDING_H

#include "dsl/IR.h"
#include "keys/KernelABI.h"
#include "keys/ShapeSpec.h"

#include <dlpack/dlpack.h>

#include "llvm/Support/Error.h"

#include <cstdint>

namespace bitfold::runtime {

using keys::kMaxDims;
using keys::kMaxGroups;
using keys::kMaxOperands;
using keys::kMaxParams;
using keys::kMaxScalars;
/// Most dimensions a tensor may have.
constexpr int kMaxNdim = 8;

/// Whether a KernelDef fits the fixed-size launch structures.
llvm::Error checkDefLimits(const dsl::KernelDef &def);

/// One operand of one group, as the kernel addresses it.
struct OperandView {
  uintptr_t base = 0;    ///< data + byte_offset.
  int64_t rows = 0;      ///< rows stored (B for per-batch, 1 per-column).
  int64_t rowStride = 0; ///< elements between rows (channels-first: S).
  /// Channels-first (NC[D]HW): the pixels per image S, whose C elements lie
  /// S apart; row n*S + s starts at element n*C*S + s. 0: rows are packed.
  int64_t spatial = 0;
  /// Row-major rows in two levels (keys::RowLevels; levels.inner = 0: one
  /// level): row r starts at (r / inner) * outer + (r % inner) * rowStride.
  keys::RowLevels levels;
  int alignBytes = 16;   ///< largest of 16/8/4/2/1 dividing base and strides.
  int64_t lastOffset = 0;///< element offset of the last element read/written.
};

struct LaunchBinding {
  int device = 0;
  int64_t cols = 0;
  int64_t groupRows[kMaxGroups] = {};
  int64_t totalRows = 0;
  int64_t dims[kMaxDims] = {};
  OperandView views[kMaxGroups][kMaxOperands];
  /// Per operand, the minimum over groups: what ShapeSpec::alignBytes says.
  int alignBytes[kMaxOperands] = {};
  /// Per operand, the two-level rows every group of it shares (the kernel
  /// is compiled for them); all one-level: twoLevel is false.
  keys::RowLevels levels[kMaxOperands] = {};
  bool twoLevel = false;
  /// keys::ShapeSpec::oneSpatial: the definition may say so
  /// (keys::spatialSharable) and in every group with rows all channels-first
  /// operands have the same S. False: the kernel reads each one's own S.
  bool oneSpatial = false;
  int64_t maxElementOffset = 0;
};

/// The extra alignment a template's reference requires of an operand to
/// take the code path the template copies (aten's vectorized layer norm:
/// x and y aligned to 4 elements). 0: none beyond the element size.
int referenceAlignBytes(const dsl::KernelDef &def, const dsl::OperandDecl &op);

/// Validates `tensors` (groups x operands, group-major) and fills `out`.
llvm::Error bindTensors(const dsl::KernelDef &def,
                        const DLTensor *const *tensors, int numTensors,
                        LaunchBinding &out);

/// Binds `tensors`, whose layouts (dtype, device, shape, strides, byte
/// offset) are those of the launch that gave `bound`, at their addresses:
/// only the checks that depend on an address run (NULL data, alignment to
/// the elements and to the template's guard, the end of each view, the
/// overlaps), and the alignment must give `bound`'s shape class. True:
/// `out` is what bindTensors would give. False wherever one of them fails
/// or the class differs: bindTensors then says why, or binds the other
/// class. A prepared launch's warm path (Kernel::launch with a Rebinding).
bool rebindAddresses(const dsl::KernelDef &def, const DLTensor *const *tensors,
                     const LaunchBinding &bound, LaunchBinding &out);

/// "bf16", "float32", "int8x4"...: a DLPack dtype for messages.
std::string describeDType(DLDataType t);

/// The DLPack dtype of a storage dtype.
DLDataType toDLDataType(dsl::DType t);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_TENSORBINDING_H
