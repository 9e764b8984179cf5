//===- runtime/CApiRaw.cpp - bitfold_launch_raw ---------------------------===//
//
// The flat-array launch (bitfold.h): DLTensors are rebuilt on the stack with
// their shape and strides pointing into the caller's metadata, then launched
// through bitfold_launch, so validation and messages are the DLTensor
// path's by construction. Nothing is allocated.
//
//===----------------------------------------------------------------------===//

#include "runtime/CApiInternal.h"

#include <cstdio>

using namespace bitfold::runtime;

namespace {

bitfold_status malformed(const char *what, int tensor) {
  char msg[160];
  if (tensor < 0)
    std::snprintf(msg, sizeof msg, "bitfold_launch_raw: %s", what);
  else
    std::snprintf(msg, sizeof msg, "bitfold_launch_raw: tensor %d: %s", tensor,
                  what);
  return reportError(BITFOLD_ERROR_INVALID_ARGUMENT, msg);
}

/// Fills `out` from the metadata words at `w` (`left` of them); returns
/// the words used, or -1 with the error reported.
int64_t decodeTensor(const void *data, const int64_t *w, int64_t left,
                     int index, DLTensor &out, bitfold_status &status) {
  if (left < 2) {
    status = malformed("the metadata ends inside its header", index);
    return -1;
  }
  int64_t ndim = w[1];
  if (ndim < 0 || ndim > 64 || 2 + 2 * ndim > left) {
    status = malformed("ndim is negative or runs past the metadata", index);
    return -1;
  }
  uint64_t dtype = uint64_t(w[0]);
  out.data = const_cast<void *>(data);
  out.device = {kDLCUDA, int32_t(dtype >> 32)};
  out.ndim = int32_t(ndim);
  out.dtype = {uint8_t(dtype & 0xFF), uint8_t((dtype >> 8) & 0xFF),
               uint16_t((dtype >> 16) & 0xFFFF)};
  out.shape = const_cast<int64_t *>(w + 2);
  out.strides = const_cast<int64_t *>(w + 2 + ndim);
  out.byte_offset = 0;
  return 2 + 2 * ndim;
}

} // namespace

extern "C" {

BITFOLD_API bitfold_status bitfold_launch_raw(
    bitfold_kernel *kernel, int num_tensors, const void *const *data,
    const int64_t *meta, int num_meta_words, const float *scalars,
    int num_scalars, void *stream) {
  if (num_tensors < 0 || num_tensors > BITFOLD_RAW_MAX_TENSORS)
    return malformed("num_tensors is outside 0..BITFOLD_RAW_MAX_TENSORS", -1);
  if (num_tensors > 0 && (!data || !meta))
    return malformed("the address or metadata array is NULL", -1);
  DLTensor decoded[BITFOLD_RAW_MAX_TENSORS];
  const DLTensor *ptrs[BITFOLD_RAW_MAX_TENSORS];
  int64_t at = 0;
  for (int i = 0; i < num_tensors; ++i) {
    bitfold_status status = BITFOLD_SUCCESS;
    int64_t used = decodeTensor(data[i], meta + at, num_meta_words - at, i,
                                decoded[i], status);
    if (used < 0)
      return status;
    ptrs[i] = &decoded[i];
    at += used;
  }
  if (at != num_meta_words)
    return malformed("num_meta_words is not the length the tensors use", -1);
  return bitfold_launch(kernel, num_tensors ? ptrs : nullptr, num_tensors,
                        scalars, num_scalars, stream);
}

} // extern "C"
