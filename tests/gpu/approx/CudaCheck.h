// CK(call): print the CUDA error and exit(2). Shared by capture.cu and check.cu.
#ifndef BITFOLD_TESTS_GPU_APPROX_CUDACHECK_H
#define BITFOLD_TESTS_GPU_APPROX_CUDACHECK_H

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

#endif
