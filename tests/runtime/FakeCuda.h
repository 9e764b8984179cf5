//===- tests/runtime/FakeCuda.h - Hooks of the fake libcuda -----*- C++ -*-===//
#ifndef BITFOLD_TESTS_RUNTIME_FAKECUDA_H
#define BITFOLD_TESTS_RUNTIME_FAKECUDA_H

#include <cuda.h>

#include <cstdint>

/// What the fake cuLaunchKernel was given.
struct FakeLaunch {
  CUfunction function = nullptr;
  CUcontext context = nullptr; ///< current at the launch
  unsigned grid[3] = {}, block[3] = {};
  unsigned sharedBytes = 0;
  CUstream stream = nullptr;
  /// -1: cuLaunchKernel; else cuLaunchKernelEx's programmatic stream
  /// serialization attribute (0 or 1; 0 also without the attribute).
  int programmatic = -1;
  int numParams = 0;
  uint64_t params[64] = {}; ///< 8 bytes read from each parameter pointer
};

// Hooks, resolved with dlsym on the loaded fake.
using FakeExpectParamsFn = void (*)(int);
using FakeLastLaunchFn = FakeLaunch (*)();
using FakeCountFn = int (*)(const char *);
using FakeTextFn = const char *(*)();
using FakeUserContextFn = CUcontext (*)(int);
using FakeClearContextsFn = void (*)();
using FakeCaptureModeFn = int (*)();
using FakeBeginCaptureFn = CUstream (*)(int);
using FakeEndCaptureFn = CUresult (*)(CUstream);
using FakeCapturedOnFn = int (*)(CUstream);

#endif
