//===- examples/user_kernels/GpuBuffers.h - Launch and compare on a GPU ---===//
//
// The example's only device code: libcuda is opened at run time (as
// libbitfold.so does), so the example builds and runs on machines without
// CUDA; device memory comes from cuMemAlloc in the primary context.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_EXAMPLES_USER_KERNELS_GPUBUFFERS_H
#define BITFOLD_EXAMPLES_USER_KERNELS_GPUBUFFERS_H

#include "dsl/IR.h"

#include "bitfold/bitfold.hpp"

#include <string>
#include <vector>

/// "" when libcuda loads and device 0 exists; otherwise why not.
std::string gpuAvailable();

/// Launches `def` (through its canonical text) on `rows` x `cols` bf16
/// operands: `data` in KernelDef operand order (outputs poisoned), then
/// compares each output's bits with `expected`. 0 when all equal.
int compareOnGpu(bitfold::Runtime &rt, const bitfold::dsl::KernelDef &def,
                 std::vector<std::vector<uint16_t>> data,
                 const std::vector<std::vector<uint16_t>> &expected,
                 int64_t rows, int64_t cols);

#endif
