//===- keys/KernelABI.cpp - A kernel's parameter list ---------------------===//

#include "keys/KernelABI.h"

#include "dsl/Limits.h"

static_assert(bitfold::keys::kMaxGroups == bitfold::dsl::kMaxTensorGroups,
              "the verifier admits what a launch serves");

using namespace bitfold;
using namespace bitfold::keys;

KernelABI KernelABI::of(const dsl::KernelDef &def) {
  KernelABI abi;
  abi.numGroups = def.groups;
  abi.numOperands = int(def.operands.size());
  abi.numDims = int(def.dims.size());
  abi.numScalars = int(def.scalars.size());
  return abi;
}

KernelABI::Param KernelABI::kindOf(int index) const {
  if (index < groupRows(0))
    return index % 2 ? Param::RowStride : Param::Pointer;
  if (index < dim(0))
    return Param::GroupRows;
  if (index < scalar(0))
    return Param::Dim;
  return Param::Scalar;
}
