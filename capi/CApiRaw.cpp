//===- capi/CApiRaw.cpp - bitfold_launch_raw, prepared launches --------===//
//
// The flat-array launch (bitfold.h): DLTensors are rebuilt on the stack with
// their shape and strides pointing into the caller's metadata, then launched
// through bitfold_launch, so validation and messages are the DLTensor
// path's by construction. Nothing is allocated. A prepared launch keeps the
// decoded DLTensors (pointing into its own copy of the metadata) and fills
// in only the addresses per launch, on a stack copy (so it is shareable);
// its launches go through the kernel's Rebinding, which binds the layouts
// once and then checks only the addresses (Kernel::launch with one).
//
//===----------------------------------------------------------------------===//

#include "capi/CApiInternal.h"
#include "runtime/Runtime.h"

#include <cstdio>
#include <memory>
#include <new>
#include <vector>

using namespace bitfold::runtime;

namespace {

bitfold_status malformed(const char *what, int tensor,
                         const char *fn = "bitfold_launch_raw") {
  char msg[160];
  if (tensor < 0)
    std::snprintf(msg, sizeof msg, "%s: %s", fn, what);
  else
    std::snprintf(msg, sizeof msg, "%s: tensor %d: %s", fn, tensor, what);
  return reportError(BITFOLD_ERROR_INVALID_ARGUMENT, msg);
}

/// Fills `out` from the metadata words at `w` (`left` of them); returns
/// the words used, or -1 with the error reported.
int64_t decodeTensor(const void *data, const int64_t *w, int64_t left,
                     int index, DLTensor &out, bitfold_status &status,
                     const char *fn) {
  if (left < 2) {
    status = malformed("the metadata ends inside its header", index, fn);
    return -1;
  }
  int64_t ndim = w[1];
  if (ndim < 0 || ndim > 64 || 2 + 2 * ndim > left) {
    status = malformed("ndim is negative or runs past the metadata", index, fn);
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

/// Decodes the metadata of num_tensors tensors into `decoded` (addresses
/// from `data`, which may be null: then all null); `fn` names the entry
/// point in messages.
bitfold_status decodeAll(int num_tensors, const void *const *data,
                         const int64_t *meta, int num_meta_words,
                         DLTensor *decoded, const char *fn) {
  if (num_tensors < 0 || num_tensors > BITFOLD_RAW_MAX_TENSORS)
    return malformed("num_tensors is outside 0..BITFOLD_RAW_MAX_TENSORS", -1,
                     fn);
  if (num_tensors > 0 && !meta)
    return malformed("the address or metadata array is NULL", -1, fn);
  int64_t at = 0;
  for (int i = 0; i < num_tensors; ++i) {
    bitfold_status status = BITFOLD_SUCCESS;
    int64_t used = decodeTensor(data ? data[i] : nullptr, meta + at,
                                num_meta_words - at, i, decoded[i], status, fn);
    if (used < 0)
      return status;
    at += used;
  }
  if (at != num_meta_words)
    return malformed("num_meta_words is not the length the tensors use", -1,
                     fn);
  return BITFOLD_SUCCESS;
}

bitfold_status launchDecoded(bitfold_kernel *kernel, int num_tensors,
                             const DLTensor *decoded, const float *scalars,
                             int num_scalars, void *stream) {
  const DLTensor *ptrs[BITFOLD_RAW_MAX_TENSORS];
  for (int i = 0; i < num_tensors; ++i)
    ptrs[i] = &decoded[i];
  return bitfold_launch(kernel, num_tensors ? ptrs : nullptr, num_tensors,
                        scalars, num_scalars, stream);
}

} // namespace

struct bitfold_prepared {
  bitfold_kernel *kernel = nullptr;
  int numTensors = 0;
  std::vector<int64_t> meta; ///< decoded[i].shape/strides point in here.
  std::vector<float> scalars;
  DLTensor decoded[BITFOLD_RAW_MAX_TENSORS] = {};
  /// Its launches' layouts, bound once (shared by the threads launching).
  mutable Kernel::Rebinding rebinding;
};

extern "C" {

BITFOLD_API bitfold_status bitfold_launch_raw(
    bitfold_kernel *kernel, int num_tensors, const void *const *data,
    const int64_t *meta, int num_meta_words, const float *scalars,
    int num_scalars, void *stream) {
  if (num_tensors > 0 && !data)
    return malformed("the address or metadata array is NULL", -1);
  DLTensor decoded[BITFOLD_RAW_MAX_TENSORS];
  if (bitfold_status s = decodeAll(num_tensors, data, meta, num_meta_words,
                                   decoded, "bitfold_launch_raw"))
    return s;
  return launchDecoded(kernel, num_tensors, decoded, scalars, num_scalars,
                       stream);
}

BITFOLD_API bitfold_status bitfold_prepare_raw(
    bitfold_kernel *kernel, int num_tensors, const int64_t *meta,
    int num_meta_words, const float *scalars, int num_scalars,
    bitfold_prepared **out) {
  const char *fn = "bitfold_prepare_raw";
  if (!out || !kernel)
    return malformed(!out ? "out is NULL" : "kernel is NULL", -1, fn);
  *out = nullptr;
  if (num_scalars < 0 || (num_scalars > 0 && !scalars))
    return malformed("num_scalars is negative or scalars is NULL", -1, fn);
  if (num_meta_words < 0)
    return malformed("num_meta_words is negative", -1, fn);
  std::unique_ptr<bitfold_prepared> p;
  try { // no exception crosses the C ABI
    p = std::make_unique<bitfold_prepared>();
    p->meta.assign(meta, meta + (meta ? num_meta_words : 0));
    p->scalars.assign(scalars, scalars + num_scalars);
  } catch (const std::bad_alloc &) {
    return reportError(BITFOLD_ERROR_INTERNAL,
                       "bitfold_prepare_raw: out of host memory");
  }
  p->kernel = kernel;
  p->numTensors = num_tensors;
  if (bitfold_status s = decodeAll(num_tensors, nullptr, p->meta.data(),
                                   num_meta_words, p->decoded, fn))
    return s;
  *out = p.release();
  return BITFOLD_SUCCESS;
}

BITFOLD_API bitfold_status bitfold_launch_prepared(
    const bitfold_prepared *prepared, const void *const *data, void *stream) {
  if (!prepared || (prepared->numTensors > 0 && !data))
    return malformed(!prepared ? "the prepared launch is NULL"
                               : "the address array is NULL",
                     -1, "bitfold_launch_prepared");
  DLTensor decoded[BITFOLD_RAW_MAX_TENSORS];
  const DLTensor *ptrs[BITFOLD_RAW_MAX_TENSORS];
  for (int i = 0; i < prepared->numTensors; ++i) {
    decoded[i] = prepared->decoded[i];
    decoded[i].data = const_cast<void *>(data[i]);
    ptrs[i] = &decoded[i];
  }
  try { // no exception crosses the C ABI
    llvm::Error e = unwrapKernel(prepared->kernel)
                        ->launch(prepared->rebinding,
                                 prepared->numTensors ? ptrs : nullptr,
                                 prepared->numTensors, prepared->scalars.data(),
                                 int(prepared->scalars.size()),
                                 static_cast<CUstream>(stream));
    if (!e)
      return reportError(BITFOLD_SUCCESS, "");
    std::string message;
    bitfold_status code = takeCStatus(std::move(e), message);
    return reportError(code, message.c_str());
  } catch (const std::bad_alloc &) {
    return reportError(BITFOLD_ERROR_INTERNAL,
                       "bitfold_launch_prepared: out of host memory");
  } catch (...) {
    return reportError(BITFOLD_ERROR_INTERNAL,
                       "bitfold_launch_prepared: unexpected exception");
  }
}

BITFOLD_API void bitfold_prepared_destroy(bitfold_prepared *prepared) {
  delete prepared;
}

} // extern "C"
