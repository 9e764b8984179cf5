//===- tests/runtime/HostTensor.h - A DLTensor made of numbers -*- C++ -*-===//
//
// Binding tests (host only) describe CUDA tensors by shape, strides and an
// address nothing dereferences.
//
//===----------------------------------------------------------------------===//

#ifndef BITFOLD_TESTS_RUNTIME_HOSTTENSOR_H
#define BITFOLD_TESTS_RUNTIME_HOSTTENSOR_H

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

namespace bitfold::testing {

struct Tensor {
  std::vector<int64_t> shape, strides; ///< strides empty: compact
  uintptr_t address;
  DLDataType dtype{kDLBfloat, 16, 1};
  DLTensor dl{};
  const DLTensor *get() {
    dl.data = reinterpret_cast<void *>(address);
    dl.device = {kDLCUDA, 0};
    dl.ndim = int(shape.size());
    dl.dtype = dtype;
    dl.shape = shape.data();
    dl.strides = strides.empty() ? nullptr : strides.data();
    return &dl;
  }
};

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_RUNTIME_HOSTTENSOR_H
