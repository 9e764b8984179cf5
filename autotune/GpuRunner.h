//===- autotune/GpuRunner.h - Times compiled kernels on a GPU ----*- C++ -*-===//
//
// The ConfigRunner of the real tuner (CUDA driver, cuda/Driver.h):
//  - inputs uploaded once from a seeded templates::HostProblem, copied into
//    several rotating buffer sets (so consecutive runs do not read what the
//    last one left in L2), outputs per set;
//  - steady timing (the default): a sample is >= 8 launches cycling over
//    the buffer sets, back to back with no flush, bracketed by two CUDA
//    events recorded after one untimed launch (so the GPU is already busy);
//    its time over the launches is what a launch costs in a stream of
//    kernels: its
//    inputs are not in L2 (the sets total at least 4x L2) and it pays for
//    writing back what its predecessor left dirty, as in a model's
//    pipeline;
//  - flushed timing: before each timed run a buffer of at least twice the
//    L2 size (H200: 60 MB) is overwritten (cuMemsetD8), then one launch is
//    bracketed by the events. The memset leaves L2 full of dirty lines the
//    timed kernel must write back (up to the L2 size of extra DRAM writes),
//    which makes 20-100 MB kernels noisy and slow;
//  - outputBytes() poisons the outputs (0xFF) of set 0, launches once and
//    reads them back, for the bit-identity check.
// Launches follow codegen's KernelABI: per group, per operand (pointer,
// row stride in elements); rows per group; named dims; scalars (f32); grid
// x = ceil(total rows / rowsPerCta), block = ctaThreads().
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_GPURUNNER_H
#define BITFOLD_AUTOTUNE_GPURUNNER_H

#include "autotune/Search.h"

#include "templates/Problem.h"

#include <memory>

namespace bitfold::autotune {

enum class Timing { Steady, Flushed };

struct GpuRunnerOptions {
  int device = 0;
  Timing timing = Timing::Steady;
  /// Bytes overwritten before each timed run; 0: max(2 x L2, 64 MiB).
  size_t flushBytes = 0;
  /// Rotating buffer sets: as many as make their total exceed flushBytes,
  /// at least 2, at most 8, within a quarter of the device memory.
  int maxSets = 8;
};

/// Device name and arch of `ordinal` ("NVIDIA H200", "sm_90").
llvm::Expected<std::pair<std::string, std::string>> gpuIdentity(int ordinal);

/// Creates a runner for `def` on `problem` (uploads its data). The problem
/// must outlive nothing: its bytes are copied.
llvm::Expected<std::unique_ptr<ConfigRunner>>
makeGpuRunner(const dsl::KernelDef &def, const templates::HostProblem &problem,
              const GpuRunnerOptions &options);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_GPURUNNER_H
