//===- runtime/TensorBinding.cpp - DLTensors -> a kernel's operands -------===//

#include "runtime/TensorBinding.h"

#include "dsl/Folds.h"
#include "runtime/Status.h"
#include "keys/ShapeSpec.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>

using namespace bitfold;
using namespace bitfold::runtime;
using dsl::IndexMap;
using dsl::KernelDef;
using dsl::Layout;
using dsl::OperandDecl;

namespace {

std::string tensorName(const KernelDef &def, int g, int i) {
  int idx = g * int(def.operands.size()) + i;
  if (def.groups == 1)
    return llvm::formatv("tensor {0} ('{1}')", idx, def.operands[i].name);
  return llvm::formatv("tensor {0} ('{1}' of group {2})", idx,
                       def.operands[i].name, g);
}

std::string listText(const int64_t *v, int n) {
  std::string s = "(";
  for (int d = 0; d < n; ++d)
    s += (d ? ", " : "") + std::to_string(v[d]);
  return s + (n == 1 ? ",)" : ")");
}

std::string shapeText(const DLTensor &t) {
  return t.shape ? listText(t.shape, t.ndim) : "(NULL shape)";
}

/// The strides of a dense tensor whose dims, fastest first, are `order`
/// (a permutation of 0..ndim-1): the pixel layouts' one rule. False when a
/// stride overflows (the slowest dim's size enters none).
bool denseStrides(const DLTensor &t, const int *order, int64_t *expected) {
  int64_t acc = 1;
  for (int k = 0; k < t.ndim; ++k) {
    expected[order[k]] = acc;
    if (k + 1 < t.ndim &&
        __builtin_mul_overflow(acc, t.shape[order[k]], &acc))
      return false;
  }
  return true;
}

/// Whether every dim of more than one element has its `expected` stride
/// (a size-1 dim's stride addresses nothing).
bool stridesAre(const DLTensor &t, const int64_t *st, const int64_t *expected) {
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] != 1 && st[d] != expected[d])
      return false;
  return true;
}

/// A tensor's (rows, cols) view as one operand sees it.
struct Extent {
  int64_t rows = 0, cols = 0, rowStride = 0;
  int64_t numel = 0;
  int64_t spatial = 0; ///< channels-first: S.
  keys::RowLevels levels; ///< row-major rows in two levels.
  /// Images (channels-last or channels-first): the tensor's dims, which
  /// every other image operand shares (a pixel's index is the same in all).
  const int64_t *shape = nullptr;
};

bool sameShape(const DLTensor &a, const DLTensor &b) {
  return std::equal(a.shape, a.shape + a.ndim, b.shape, b.shape + b.ndim);
}

class Binder {
public:
  Binder(const KernelDef &def, const DLTensor *const *tensors,
         LaunchBinding &out)
      : def(def), tensors(tensors), out(out) {}

  llvm::Error run();

private:
  llvm::Error fail(bitfold_status code, int g, int i, const llvm::Twine &msg) {
    return runtimeError(code, def.name + ": " + tensorName(def, g, i) + ": " +
                                  msg);
  }
  /// Whether operand i may have rows that overlap or repeat (a row stride
  /// below the column count; 0 for a row broadcast with expand): an input
  /// that enters the kernel elementwise reads the same values wherever they
  /// lie. An output may not, nor a reduced input (its reference may take
  /// another path on such a view).
  bool mayRepeatRows(int i) const {
    const OperandDecl &op = def.operands[i];
    return !op.isOutput &&
           (op.map != IndexMap::PerElement || def.folds.empty());
  }
  llvm::Error checkTensor(int g, int i, Extent &ext);
  llvm::Error checkDevice(int g, int i, const DLTensor &t);
  llvm::Error checkExtent(int g, int i, const DLTensor &t, Extent &ext);
  llvm::Error rowMajorExtent(int g, int i, const DLTensor &t,
                             const int64_t *st, Extent &ext);
  llvm::Error mergeRowDims(int g, int i, const DLTensor &t, const int64_t *st,
                           Extent &ext);
  llvm::Error checkRowStrides(int g, int i, const DLTensor &t,
                              const int64_t *st, Extent &ext);
  llvm::Error perRowExtent(int g, int i, const DLTensor &t, const int64_t *st,
                           Extent &ext);
  llvm::Error pixelRank(int g, int i, const DLTensor &t,
                        llvm::StringRef layout);
  llvm::Error channelsLastExtent(int g, int i, const DLTensor &t,
                                 const int64_t *st, Extent &ext);
  llvm::Error channelsFirstExtent(int g, int i, const DLTensor &t,
                                  const int64_t *st, Extent &ext);
  llvm::Error checkAddress(int g, int i, const DLTensor &t, const Extent &ext);
  llvm::Error checkGroupShapes(int g, Extent *ext);
  // Messages of checkGroupShapes' failures (kept out of its hot loop).
  llvm::Error shapeError(int g, int i, int ref, const Extent *ext);
  llvm::Error batchDimError(int g, int i, int64_t S, int64_t batches);
  llvm::Error vectorLength(int g, int i, const Extent &e);
  llvm::Error endError(int g, int i, int64_t last);
  llvm::Error checkEnd(int g, int i, int64_t rowsStored);
  llvm::Error checkGroupLevels();
  bool sameSpatial() const;
  llvm::Error checkOutputVec();
  llvm::Error deviceTypeError(int g, int i, int32_t type);

  const KernelDef &def;
  const DLTensor *const *tensors;
  LaunchBinding &out;
  int nOps = 0;
  unsigned elemBytes[kMaxOperands] = {}; ///< per operand, set by run().
  bool dimSet[kMaxDims] = {};
  int dimFrom[kMaxDims][2] = {}; ///< (group, operand) that set each dim.
};

llvm::Error Binder::rowMajorExtent(int g, int i, const DLTensor &t,
                                   const int64_t *st, Extent &ext) {
  const int n = t.ndim;
  if (n < 1)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                "is 0-dimensional; a row-major operand needs at least one "
                "dimension (..., columns)");
  ext.cols = t.shape[n - 1];
  if (ext.numel == 0) {
    ext.rows = 0;
    for (int d = 0; d < n - 1; ++d)
      ext.rows = d ? ext.rows * t.shape[d] : t.shape[d];
    if (n == 1)
      ext.rows = 1;
    ext.rowStride = ext.cols;
    return llvm::Error::success();
  }
  if (ext.cols > 1 && st[n - 1] != 1)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("the last dimension (columns) must be packed "
                              "(stride 1); shape {0}, strides {1}",
                              shapeText(t), listText(st, n)));
  if (llvm::Error e = mergeRowDims(g, i, t, st, ext))
    return e;
  return checkRowStrides(g, i, t, st, ext);
}

/// The leading dims (size-1 dims skipped), fastest first, nest into one
/// row stride, or into two levels: the dims up to the first that breaks
/// the nesting are the inner rows, that dim and the slower ones (nesting
/// among themselves) the groups. A third level is refused.
llvm::Error Binder::mergeRowDims(int g, int i, const DLTensor &t,
                                 const int64_t *st, Extent &ext) {
  const int n = t.ndim;
  ext.rows = 1;
  ext.rowStride = ext.cols;
  bool found = false;
  int64_t expect = 0;
  int inner = -1, outer = -1;
  // Only per-element rows take two levels (a per-batch operand's batches
  // are one stride apart).
  const bool twoLevelOk = def.operands[i].map == IndexMap::PerElement;
  for (int d = n - 2; d >= 0; --d) {
    if (t.shape[d] == 1)
      continue;
    if (!found) {
      found = true;
      inner = d;
      ext.rowStride = st[d];
      ext.rows = t.shape[d];
    } else {
      if (st[d] != expect && !twoLevelOk)
        return fail(BITFOLD_ERROR_STRIDE, g, i,
                    llvm::formatv("dimensions {0}..{1} cannot be merged into "
                                  "one row dimension: stride[{0}] is {2}, "
                                  "rows need {3}; shape {4}, strides {5}",
                                  d, inner, st[d], expect, shapeText(t),
                                  listText(st, n)));
      if (st[d] != expect && outer >= 0)
        return fail(BITFOLD_ERROR_STRIDE, g, i,
                    llvm::formatv("dimensions {0}..{1} cannot be merged into "
                                  "two row levels (rows one stride apart in "
                                  "groups one stride apart): stride[{0}] is "
                                  "{2}, dims {3}..{1} need {4}; shape {5}, "
                                  "strides {6}",
                                  d, inner, st[d], outer, expect, shapeText(t),
                                  listText(st, n)));
      if (st[d] != expect) {
        outer = d;
        ext.levels = {ext.rows, st[d]};
      }
      if (__builtin_mul_overflow(ext.rows, t.shape[d], &ext.rows))
        return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "row count overflows");
    }
    if (__builtin_mul_overflow(st[d], t.shape[d], &expect))
      return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "strides overflow");
  }
  return llvm::Error::success();
}

/// Negative strides are refused; rows (and two-level groups) that overlap
/// or repeat only where mayRepeatRows allows.
llvm::Error Binder::checkRowStrides(int g, int i, const DLTensor &t,
                                    const int64_t *st, Extent &ext) {
  const int n = t.ndim;
  const keys::RowLevels lv = ext.levels;
  if (ext.rowStride < 0 || lv.outer < 0)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("negative row stride {0} is not supported; "
                              "strides {1}",
                              ext.rowStride < 0 ? ext.rowStride : lv.outer,
                              listText(st, n)));
  if (mayRepeatRows(i))
    return llvm::Error::success();
  if (ext.rows > 1 && ext.rowStride < ext.cols)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("row stride {0} is smaller than the {1} columns "
                              "(rows would overlap); shape {2}, strides {3}",
                              ext.rowStride, ext.cols, shapeText(t),
                              listText(st, n)));
  // Groups of rows must not overlap either: each starts past the last
  // element of the one before (no overflow: the strides' products were
  // checked while merging).
  const int64_t span = (lv.inner - 1) * ext.rowStride + ext.cols;
  if (lv.inner > 0 && lv.outer < span)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("groups of {0} rows lie {1} elements apart but "
                              "span {2} (rows would overlap); shape {3}, "
                              "strides {4}",
                              lv.inner, lv.outer, span, shapeText(t),
                              listText(st, n)));
  return llvm::Error::success();
}

llvm::Error Binder::pixelRank(int g, int i, const DLTensor &t,
                              llvm::StringRef layout) {
  if (t.ndim == 4 || t.ndim == 5)
    return llvm::Error::success();
  return fail(BITFOLD_ERROR_SHAPE, g, i,
              llvm::formatv("a {0} operand needs 4 (N, C, H, W) or 5 (N, C, "
                            "D, H, W) dimensions; found shape {1}",
                            layout, shapeText(t)));
}

llvm::Error Binder::channelsLastExtent(int g, int i, const DLTensor &t,
                                       const int64_t *st, Extent &ext) {
  const int n = t.ndim;
  if (llvm::Error e = pixelRank(g, i, t, "channels-last"))
    return e;
  ext.cols = t.shape[1];
  ext.shape = t.shape;
  ext.rowStride = ext.cols;
  int order[kMaxNdim] = {1};
  for (int d = n - 1; d >= 2; --d)
    order[n - d] = d;
  order[n - 1] = 0;
  int64_t expected[kMaxNdim];
  if (!denseStrides(t, order, expected))
    return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "size overflows");
  ext.rows = t.shape[0];
  for (int d = 2; d < n; ++d)
    if (__builtin_mul_overflow(ext.rows, t.shape[d], &ext.rows))
      return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "size overflows");
  if (ext.numel == 0)
    return llvm::Error::success();
  if (!stridesAre(t, st, expected))
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("is not dense channels-last: shape {0} has "
                              "strides {1}, channels-last needs {2} (e.g. "
                              "torch's .contiguous(memory_format="
                              "torch.channels_last{3})",
                              shapeText(t), listText(st, n),
                              listText(expected, n), n == 5 ? "_3d" : ""));
  return llvm::Error::success();
}

/// Dense images of [C, S]: memory order (fastest first) the trailing dims
/// k..n-1, then C, then dims 2..k-1, then N, for some 2 <= k < n. k = 2 is
/// contiguous NC[D]HW (S = D*H*W); k = 3 of a 5-D tensor is frames-major
/// (a contiguous (N, T, C, H, W) seen as (N, C, T, H, W): S = H*W, the
/// N*T images of the Wan VAE's frame reshapes). Pixel r (row-major over
/// the dims but C) then starts at (r / S) * C * S + r % S for every k,
/// which is all the kernel assumes. Any other stride pattern (channels-
/// last, permuted, expanded, overlapping or negative-stride views) is
/// refused, so the caller falls back to its own path with the reference's
/// bits.
llvm::Error Binder::channelsFirstExtent(int g, int i, const DLTensor &t,
                                        const int64_t *st, Extent &ext) {
  const int n = t.ndim;
  if (llvm::Error e = pixelRank(g, i, t, "channels-first"))
    return e;
  ext.cols = t.shape[1];
  ext.shape = t.shape;
  int64_t expected[kMaxNdim], contiguous[kMaxNdim];
  bool matched = false;
  for (int k = 2; k < n && !matched; ++k) {
    int order[kMaxNdim], m = 0;
    for (int d = n - 1; d >= k; --d)
      order[m++] = d;
    order[m++] = 1;
    for (int d = k - 1; d >= 2; --d)
      order[m++] = d;
    order[m++] = 0;
    if (!denseStrides(t, order, expected))
      return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "size overflows");
    if (k == 2)
      std::copy(expected, expected + n, contiguous);
    matched = stridesAre(t, st, expected);
  }
  if (!matched)
    std::copy(contiguous, contiguous + n, expected);
  ext.spatial = expected[1];
  ext.rowStride = ext.spatial;
  ext.rows = ext.cols > 0 ? ext.numel / ext.cols : 0;
  if (ext.numel == 0)
    return llvm::Error::success();
  if (!matched)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("is not dense channels-first (contiguous "
                              "NC[D]HW, or images of C x H*W such as a "
                              "contiguous (N, D, C, H, W) transposed): shape "
                              "{0} has strides {1}, contiguous needs {2}",
                              shapeText(t), listText(st, n),
                              listText(expected, n)));
  if (ext.spatial == 1)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("has one pixel per image (shape {0}): aten "
                              "then reduces C as the innermost dim; the "
                              "tensor is also channels-last, use that kernel",
                              shapeText(t)));
  return llvm::Error::success();
}

/// A per-row operand (an output, or an input such as a target index): the
/// R values of one strided vector (any shape whose
/// dims of size > 1 nest at one element stride: (R,), (B, T), a column of
/// a wider tensor), as rows of one column. A per_row(k) output with k > 1
/// is (R..., k): a row's k values contiguous, its rows nesting as above.
llvm::Error Binder::perRowExtent(int g, int i, const DLTensor &t,
                                 const int64_t *st, Extent &ext) {
  const int64_t k = def.operands[i].rowWidth;
  int rowDims = t.ndim;
  if (k > 1) {
    if (t.ndim < 1 || t.shape[t.ndim - 1] != k)
      return fail(BITFOLD_ERROR_SHAPE, g, i,
                  llvm::formatv("is per_row({0}): its last dim holds a "
                                "row's {0} values; found shape {1}",
                                k, shapeText(t)));
    if (st[t.ndim - 1] != 1)
      return fail(BITFOLD_ERROR_STRIDE, g, i,
                  llvm::formatv("is per_row({0}): a row's {0} values are "
                                "contiguous (last stride 1); shape {1} has "
                                "strides {2}",
                                k, shapeText(t), listText(st, t.ndim)));
    rowDims = t.ndim - 1;
  }
  ext.rows = ext.numel / k;
  ext.cols = k;
  ext.rowStride = k;
  int64_t expect = 0;
  for (int d = rowDims - 1; d >= 0 && ext.rows > 1; --d) {
    if (t.shape[d] == 1)
      continue;
    if (expect == 0)
      ext.rowStride = st[d];
    else if (st[d] != expect)
      return fail(BITFOLD_ERROR_STRIDE, g, i,
                  llvm::formatv("is per_row: its values must lie "
                                "one stride apart; shape {0} has strides {1}",
                                shapeText(t), listText(st, t.ndim)));
    if (__builtin_mul_overflow(st[d], t.shape[d], &expect))
      return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "size overflows");
  }
  if (ext.rowStride < k)
    return fail(BITFOLD_ERROR_STRIDE, g, i,
                llvm::formatv("is per_row with row stride {0}; it needs "
                              "a stride of at least {1} (its rows must not "
                              "overlap)",
                              ext.rowStride, k));
  return llvm::Error::success();
}

llvm::Error Binder::deviceTypeError(int g, int i, int32_t type) {
  if (type == kDLCPU)
    return fail(BITFOLD_ERROR_DEVICE, g, i,
                "is in host memory (kDLCPU); bitfold kernels read and write "
                "CUDA device memory (kDLCUDA)");
  if (type == kDLCUDAHost)
    return fail(BITFOLD_ERROR_DEVICE, g, i,
                "is pinned host memory (kDLCUDAHost); bitfold kernels read "
                "and write CUDA device memory (kDLCUDA)");
  return fail(BITFOLD_ERROR_DEVICE, g, i,
              llvm::formatv("is on DLPack device type {0}; bitfold kernels "
                            "need CUDA device memory (kDLCUDA)",
                            type));
}

llvm::Error Binder::checkDevice(int g, int i, const DLTensor &t) {
  // Read as an integer: a caller's value outside DLDeviceType's enumerators
  // must not be loaded as the enum (undefined behaviour).
  static_assert(sizeof(DLDeviceType) == sizeof(int32_t));
  int32_t type;
  std::memcpy(&type, &t.device.device_type, sizeof type);
  if (type != kDLCUDA && type != kDLCUDAManaged)
    return deviceTypeError(g, i, type);
  if (t.device.device_id < 0)
    return fail(BITFOLD_ERROR_DEVICE, g, i,
                llvm::formatv("has device id {0}", t.device.device_id));
  if (g == 0 && i == 0)
    out.device = t.device.device_id;
  else if (t.device.device_id != out.device)
    return fail(BITFOLD_ERROR_DEVICE, g, i,
                llvm::formatv("is on cuda:{0} but {1} is on cuda:{2}; all "
                              "tensors of a launch must be on one device",
                              t.device.device_id, tensorName(def, 0, 0),
                              out.device));
  return llvm::Error::success();
}

llvm::Error Binder::checkExtent(int g, int i, const DLTensor &t, Extent &ext) {
  if (t.ndim < 0 || t.ndim > kMaxNdim)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("has {0} dimensions; at most {1} are supported",
                              t.ndim, kMaxNdim));
  if (t.ndim > 0 && !t.shape)
    return fail(BITFOLD_ERROR_INVALID_ARGUMENT, g, i, "shape is NULL");
  ext.numel = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return fail(BITFOLD_ERROR_SHAPE, g, i,
                  llvm::formatv("dimension {0} has negative size {1}", d,
                                t.shape[d]));
    if (__builtin_mul_overflow(ext.numel, t.shape[d], &ext.numel))
      return fail(BITFOLD_ERROR_UNSUPPORTED, g, i, "element count overflows");
  }
  int64_t st[kMaxNdim];
  if (t.strides) {
    std::copy(t.strides, t.strides + t.ndim, st);
  } else { // DLPack: NULL strides = compact row-major.
    int64_t acc = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      st[d] = acc;
      // An empty tensor's other dims may multiply past int64 (numel is 0).
      if (d > 0 &&
          __builtin_mul_overflow(acc, std::max<int64_t>(t.shape[d], 1), &acc))
        return fail(BITFOLD_ERROR_UNSUPPORTED, g, i,
                    llvm::formatv("has shape {0}, whose compact strides "
                                  "overflow int64",
                                  shapeText(t)));
    }
  }
  if (def.operands[i].map == IndexMap::PerRow)
    return perRowExtent(g, i, t, st, ext);
  switch (def.operands[i].layout) {
  case Layout::ChannelsLast: return channelsLastExtent(g, i, t, st, ext);
  case Layout::ChannelsFirst: return channelsFirstExtent(g, i, t, st, ext);
  case Layout::RowMajor: break;
  }
  return rowMajorExtent(g, i, t, st, ext);
}

/// Why an operand's address cannot be bound (bindAddress).
enum class AddressFault { None, Null, Overflow, Element, Guard };

/// The checks of one view that depend on its address: its base (data +
/// byte_offset), its alignment to the elements and to the template's
/// guard, and the alignment the shape class reads (v's rows, row stride
/// and levels already set). One implementation for the full binding and
/// the re-binding of a prepared launch.
AddressFault bindAddress(const KernelDef &def, const OperandDecl &op,
                         const DLTensor &t, bool hasElements,
                         OperandView &v) {
  const unsigned elem = dsl::dtypeBytes(op.dtype);
  if (hasElements && !t.data)
    return AddressFault::Null;
  if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(t.data),
                             t.byte_offset, &v.base))
    return AddressFault::Overflow;
  if (hasElements && v.base % elem)
    return AddressFault::Element;
  if (int ref = referenceAlignBytes(def, op);
      hasElements && ref && v.base % unsigned(ref))
    return AddressFault::Guard;
  v.alignBytes =
      keys::viewAlignBytes(v.base, v.rows, uint64_t(v.rowStride) * elem);
  if (v.levels.inner > 0) // vectors must also fit every group's start
    v.alignBytes = std::min(
        v.alignBytes,
        keys::viewAlignBytes(v.base, 2, uint64_t(v.levels.outer) * elem));
  return AddressFault::None;
}

llvm::Error Binder::checkAddress(int g, int i, const DLTensor &t,
                                 const Extent &ext) {
  const OperandDecl &op = def.operands[i];
  OperandView &v = out.views[g][i];
  v.rows = ext.rows;
  v.rowStride = ext.rowStride;
  v.spatial = ext.spatial;
  v.levels = ext.levels;
  switch (bindAddress(def, op, t, ext.numel > 0, v)) {
  case AddressFault::None: return llvm::Error::success();
  case AddressFault::Null:
    return fail(BITFOLD_ERROR_INVALID_ARGUMENT, g, i,
                llvm::formatv("data pointer is NULL for shape {0}",
                              shapeText(t)));
  case AddressFault::Overflow:
    return fail(BITFOLD_ERROR_INVALID_ARGUMENT, g, i,
                llvm::formatv("data {0:x} + byte_offset {1} is beyond the "
                              "address space",
                              uint64_t(reinterpret_cast<uintptr_t>(t.data)),
                              t.byte_offset));
  case AddressFault::Element:
    return fail(BITFOLD_ERROR_ALIGNMENT, g, i,
                llvm::formatv("address {0:x} (data + byte_offset {1}) is not "
                              "aligned to its {2}-byte elements",
                              uint64_t(v.base), t.byte_offset,
                              dsl::dtypeBytes(op.dtype)));
  case AddressFault::Guard:
    return fail(BITFOLD_ERROR_ALIGNMENT, g, i,
                llvm::formatv("address {0:x} is not {1}-byte aligned; {2} "
                              "reproduces aten's vectorized layer norm, which "
                              "aten runs only when x and y are {1}-byte "
                              "aligned (otherwise it takes another kernel "
                              "with different bits)",
                              uint64_t(v.base), referenceAlignBytes(def, op),
                              def.name));
  }
  llvm_unreachable("every AddressFault is handled");
}

llvm::Error Binder::checkTensor(int g, int i, Extent &ext) {
  const OperandDecl &op = def.operands[i];
  const DLTensor *tp = tensors[g * nOps + i];
  if (!tp)
    return fail(BITFOLD_ERROR_INVALID_ARGUMENT, g, i, "is NULL");
  const DLTensor &t = *tp;
  if (llvm::Error e = checkDevice(g, i, t))
    return e;
  DLDataType want = toDLDataType(op.dtype);
  // float8 tensors may also come as their bytes (uint8): DLPack before 1.1
  // has no float8 codes, and torch's export of float8 varies by version.
  bool float8Bytes = (op.dtype == dsl::DType::F8E4M3FN ||
                      op.dtype == dsl::DType::F8E5M2) &&
                     t.dtype.code == kDLUInt && t.dtype.bits == 8;
  if ((t.dtype.code != want.code || t.dtype.bits != want.bits ||
       t.dtype.lanes != 1) &&
      !(float8Bytes && t.dtype.lanes == 1))
    return fail(BITFOLD_ERROR_DTYPE, g, i,
                llvm::formatv("expected {0}, found {1}",
                              describeDType(want), describeDType(t.dtype)));
  if (llvm::Error e = checkExtent(g, i, t, ext))
    return e;
  return checkAddress(g, i, t, ext);
}

llvm::Error Binder::shapeError(int g, int i, int ref, const Extent *ext) {
  const OperandDecl &op = def.operands[i];
  const Extent &e = ext[i];
  const int64_t R = ext[ref].rows, C = ext[ref].cols;
  const std::string &refName = def.operands[ref].name;
  const DLTensor &t = *tensors[g * nOps + i];
  const DLTensor &refT = *tensors[g * nOps + ref];
  if (op.map == IndexMap::PerRow && op.rowWidth > 1)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("is per_row({0}): it holds {0} values per row "
                              "of '{1}' ({2} rows: shape {3} without its last "
                              "dim, then {0}); found shape {4}",
                              op.rowWidth, refName, R, shapeText(refT),
                              shapeText(t)));
  if (op.map == IndexMap::PerRow)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("must hold one value per row of '{0}' ({1} "
                              "values: shape {2} without its last dim); "
                              "found shape {3}",
                              refName, R, shapeText(refT), shapeText(t)));
  if (op.map == IndexMap::PerColumn)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("must hold one value per column, {0} "
                              "values (shape ({0},)); found shape {1}",
                              C, shapeText(t)));
  if (op.map == IndexMap::PerElement)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("is {0} rows x {1} columns (shape {2}) but "
                              "'{3}' is {4} rows x {5} columns (shape {6})",
                              e.rows, e.cols, shapeText(t), refName, R, C,
                              shapeText(refT)));
  if (e.cols != C)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("has {0} columns (shape {1}) but '{2}' has "
                              "{3} (shape {4})",
                              e.cols, shapeText(t), refName, C,
                              shapeText(refT)));
  return fail(BITFOLD_ERROR_SHAPE, g, i,
              llvm::formatv("has {0} rows, one per batch, which does "
                            "not divide the {1} rows of '{2}' (rows = "
                            "batches x {3}); shapes {4} and {5}",
                            e.rows, R, refName, def.dims[op.batchDim],
                            shapeText(t), shapeText(refT)));
}

/// A vector(D) input: one dimension of D values; the first sets D, every
/// other vector of D must agree.
llvm::Error Binder::vectorLength(int g, int i, const Extent &e) {
  const int d = def.operands[i].batchDim;
  if (e.rows != 1)
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("is a vector({0}) input: one dimension of "
                              "{0} values, found {1} rows of {2}",
                              def.dims[d], e.rows, e.cols));
  if (!dimSet[d]) {
    dimSet[d] = true;
    out.dims[d] = e.cols;
    dimFrom[d][0] = g;
    dimFrom[d][1] = i;
  } else if (out.dims[d] != e.cols) {
    return fail(BITFOLD_ERROR_SHAPE, g, i,
                llvm::formatv("has {0} values but {1} = {2} (from {3})",
                              e.cols, def.dims[d], out.dims[d],
                              tensorName(def, dimFrom[d][0], dimFrom[d][1])));
  }
  return llvm::Error::success();
}

llvm::Error Binder::batchDimError(int g, int i, int64_t S, int64_t batches) {
  const int d = def.operands[i].batchDim;
  return fail(BITFOLD_ERROR_SHAPE, g, i,
              llvm::formatv("implies {0} = {1} rows per batch ({2} "
                            "batches), but {3} implies {0} = {4}",
                            def.dims[d], S, batches,
                            tensorName(def, dimFrom[d][0], dimFrom[d][1]),
                            out.dims[d]));
}

llvm::Error Binder::endError(int g, int i, int64_t last) {
  return fail(BITFOLD_ERROR_INVALID_ARGUMENT, g, i,
              llvm::formatv("its {0} elements from address {1:x} run past "
                            "the end of the address space",
                            last + 1, uint64_t(out.views[g][i].base)));
}

llvm::Error Binder::checkGroupShapes(int g, Extent *ext) {
  int ref = -1;
  for (int i = 0; i < nOps && ref < 0; ++i)
    if (def.operands[i].map == IndexMap::PerElement)
      ref = i;
  if (ref < 0)
    return runtimeError(BITFOLD_ERROR_INTERNAL,
                        def.name + " has no per-element operand to take the "
                                   "row count from");
  const int64_t R = ext[ref].rows, C = ext[ref].cols;
  if (g == 0)
    out.cols = C;
  else if (C != out.cols)
    return fail(BITFOLD_ERROR_SHAPE, g, ref,
                llvm::formatv("has {0} columns but group 0 has {1}; one "
                              "launch serves one column count",
                              C, out.cols));
  out.groupRows[g] = R;
  for (int i = 0; i < nOps; ++i) {
    const OperandDecl &op = def.operands[i];
    const Extent &e = ext[i];
    if (op.map == IndexMap::PerBatch) {
      if (e.cols != C || (R > 0 && (e.rows < 1 || R % e.rows)))
        return shapeError(g, i, ref, ext);
      const int64_t S = R > 0 ? R / e.rows : 1;
      const int d = op.batchDim;
      if (!dimSet[d]) {
        dimSet[d] = true;
        out.dims[d] = S;
        dimFrom[d][0] = g;
        dimFrom[d][1] = i;
      } else if (out.dims[d] != S && R > 0) {
        return batchDimError(g, i, S, e.rows);
      }
    } else if (op.map == IndexMap::Vector) {
      if (llvm::Error err = vectorLength(g, i, e))
        return err;
    } else if (e.cols != dsl::storedCols(op, C) ||
               e.rows != (op.map == IndexMap::PerColumn ? 1 : R)) {
      return shapeError(g, i, ref, ext);
    } else if (op.map == IndexMap::PerElement && e.shape && ext[ref].shape &&
               !sameShape(*tensors[g * nOps + i], *tensors[g * nOps + ref])) {
      return fail(BITFOLD_ERROR_SHAPE, g, i,
                  llvm::formatv("has shape {0} but '{1}' has {2}; "
                                "image operands share their shape (their "
                                "layouts may differ)",
                                shapeText(*tensors[g * nOps + i]),
                                def.operands[ref].name,
                                shapeText(*tensors[g * nOps + ref])));
    }
    const int64_t rowsStored =
        op.map == IndexMap::PerColumn || op.map == IndexMap::Vector ? 1
                                                                    : e.rows;
    if (llvm::Error err = checkEnd(g, i, rowsStored))
      return err;
  }
  return llvm::Error::success();
}

/// The largest element offset of operand i's view, and its last byte must
/// be addressable (base + byte_offset near 2^64).
llvm::Error Binder::checkEnd(int g, int i, int64_t rowsStored) {
  const OperandDecl &op = def.operands[i];
  const int64_t C = out.cols;
  OperandView &v = out.views[g][i];
  int64_t last = 0;
  const int64_t width =
      dsl::storedCols(op, C, llvm::ArrayRef(out.dims, def.dims.size()));
  // Channels-first pixels are two-level rows one element apart in images
  // of C * S, their columns S apart.
  const bool fits =
      v.spatial > 0
          ? keys::lastElementOffset(rowsStored, {v.spatial, C * v.spatial}, 1,
                                    C, v.spatial, last)
      : v.levels.inner > 0
          ? keys::lastElementOffset(rowsStored, v.levels, v.rowStride, width,
                                    1, last)
          : keys::lastElementOffset(rowsStored, v.rowStride, width, last);
  if (!fits)
    return fail(BITFOLD_ERROR_UNSUPPORTED, g, i,
                "addresses beyond 2^63 elements");
  uint64_t bytes = 0, end = 0;
  if (rowsStored > 0 && C > 0 &&
      (__builtin_mul_overflow(uint64_t(last) + 1, uint64_t(elemBytes[i]),
                              &bytes) ||
       __builtin_add_overflow(uint64_t(v.base), bytes, &end)))
    return endError(g, i, last);
  v.lastOffset = last;
  out.maxElementOffset = std::max(out.maxElementOffset, last);
  return llvm::Error::success();
}

/// Whether two views of the same dtype size touch a common byte.
bool overlaps(const OperandView &a, const OperandView &b, int64_t cols,
              unsigned elem, unsigned bElem, bool dense) {
  if (a.rows == 0 || b.rows == 0 || cols == 0)
    return false;
  uintptr_t aEnd = a.base + uintptr_t(a.lastOffset + 1) * elem;
  uintptr_t bEnd = b.base + uintptr_t(b.lastOffset + 1) * bElem;
  if (aEnd <= b.base || bEnd <= a.base)
    return false;
  // Same row stride (chunks of one wider tensor): the column windows may
  // interleave without touching. Channels-first views are dense: any
  // common byte is an overlap, and so it is (conservatively) for two-level
  // views.
  if (dense || a.spatial > 0 || b.spatial > 0 || a.levels.inner > 0 ||
      b.levels.inner > 0)
    return true;
  if (elem == bElem && a.rowStride == b.rowStride && a.rowStride >= cols &&
      (a.rows > 1 || b.rows > 1)) {
    int64_t diff = int64_t(b.base) - int64_t(a.base);
    if (diff % int64_t(elem) == 0) {
      int64_t s = a.rowStride;
      int64_t m = ((diff / int64_t(elem)) % s + s) % s;
      return m < cols || m > s - cols;
    }
  }
  return true;
}

/// Why an overlap of output `o` with operand `x` cannot run.
std::string overlapHint(const KernelDef &def, const OperandDecl &o,
                        const OperandDecl &x, bool exact) {
  if (!exact)
    return def.name + " can write over an input only exactly (same address, "
                      "strides and dtype)";
  if (def.folds.empty())
    return def.name + " cannot write over it";
  return llvm::formatv("{0} reads whole rows before writing; it runs in "
                       "place only where the program declares it (output {1} "
                       "... aliases {2})",
                       def.name, o.name, x.name)
      .str();
}

/// Outputs may overlap no other view, but exactly their own input where
/// the kernel allows it. Depends on the addresses: the full binding and a
/// prepared launch's re-binding run it.
llvm::Error checkOverlaps(const KernelDef &def, const LaunchBinding &out) {
  const int nOps = int(def.operands.size());
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < nOps; ++i) {
      const OperandDecl &o = def.operands[i];
      if (!o.isOutput)
        continue;
      unsigned elem = dsl::dtypeBytes(o.dtype);
      const OperandView &ov = out.views[g][i];
      for (int h = 0; h < def.groups; ++h)
        for (int j = 0; j < nOps; ++j) {
          if (h == g && j == i)
            continue;
          const OperandDecl &x = def.operands[j];
          const OperandView &xv = out.views[h][j];
          // Per-row views are rows of one column (two of them may
          // interleave); against a per-element view any common byte is an
          // overlap.
          // per_row(k) views of one k interleave as rows of k columns.
          bool rowO = o.map == IndexMap::PerRow, rowX = x.map == IndexMap::PerRow;
          if (!overlaps(ov, xv, rowO && rowX ? o.rowWidth : out.cols, elem,
                        dsl::dtypeBytes(x.dtype),
                        rowO != rowX || o.rowWidth != x.rowWidth))
            continue;
          // Elementwise kernels may write over their own input exactly;
          // kernels with folds only over an input the output declares
          // (`aliases`): each element is then re-read or kept by the thread
          // that overwrites it, after every fold of the row.
          bool exact = !x.isOutput && h == g && x.map == IndexMap::PerElement &&
                       o.map == IndexMap::PerElement && xv.base == ov.base &&
                       xv.rowStride == ov.rowStride &&
                       xv.spatial == ov.spatial && xv.levels == ov.levels &&
                       x.dtype == o.dtype;
          if (exact && (def.folds.empty() || o.aliasOf == j))
            continue;
          if (x.isOutput && (h < g || (h == g && j < i)))
            continue; // reported once, from the first output
          return runtimeError(
              BITFOLD_ERROR_UNSUPPORTED,
              def.name + ": " + tensorName(def, g, i) + ": " +
                  llvm::formatv("overlaps {0} in memory; {1}",
                                tensorName(def, h, j),
                                overlapHint(def, o, x, exact)));
        }
    }
  return llvm::Error::success();
}

llvm::Error Binder::run() {
  nOps = int(def.operands.size());
  for (int i = 0; i < nOps; ++i)
    elemBytes[i] = dsl::dtypeBytes(def.operands[i].dtype);
  for (int g = 0; g < def.groups; ++g) {
    Extent ext[kMaxOperands];
    for (int i = 0; i < nOps; ++i)
      if (llvm::Error e = checkTensor(g, i, ext[i]))
        return e;
    if (llvm::Error e = checkGroupShapes(g, ext))
      return e;
  }
  out.totalRows = 0;
  for (int g = 0; g < def.groups; ++g)
    out.totalRows += out.groupRows[g];
  for (size_t d = 0; d < def.dims.size(); ++d)
    if (!dimSet[d]) {
      if (out.totalRows > 0)
        return runtimeError(BITFOLD_ERROR_INTERNAL,
                            def.name + ": no operand determines dim '" +
                                def.dims[d] + "'");
      out.dims[d] = 1;
    }
  for (int i = 0; i < nOps; ++i) {
    out.alignBytes[i] = 16;
    for (int g = 0; g < def.groups; ++g)
      out.alignBytes[i] = std::min(out.alignBytes[i], out.views[g][i].alignBytes);
  }
  if (llvm::Error e = checkGroupLevels())
    return e;
  out.oneSpatial = keys::spatialSharable(def) && sameSpatial();
  const int64_t C = out.cols;
  if (C % def.colsMultipleOf || C < def.minCols || C > def.maxCols)
    return runtimeError(
        BITFOLD_ERROR_SHAPE,
        llvm::formatv("{0}: the column count must be a multiple of {1} in "
                      "[{2}, {3}], the conditions under which its reference "
                      "runs the kernel it reproduces; found {4} columns "
                      "(shape {5})",
                      def.name, def.colsMultipleOf, def.minCols, def.maxCols,
                      C, shapeText(*tensors[0])));
  if (llvm::Error e = checkOutputVec())
    return e;
  // A fold order that is the reference's only for a row range (aten's
  // generic reduction, docs/aten-reduce.md section 6); no rows, no launch.
  for (const dsl::FoldDecl &f : def.folds)
    for (int g = 0; g < def.groups; ++g)
      if (out.groupRows[g] > 0 && (out.groupRows[g] < f.order.minRows ||
                                   out.groupRows[g] > f.order.maxRows))
        return runtimeError(
            BITFOLD_ERROR_SHAPE,
            llvm::formatv("{0}: operand '{1}' has {2} rows; fold order '{3}' "
                          "is its reference's order only for {4}..{5} rows "
                          "(shape {6})",
                          def.name, def.operands[0].name, out.groupRows[g],
                          f.order.name, f.order.minRows, f.order.maxRows,
                          shapeText(*tensors[0])));
  return checkOverlaps(def, out);
}

/// The two-level rows of an operand are compiled into the kernel, so its
/// views in every group share them (q and k views of one fused QKV do).
/// A one-level view of at most one row fits any levels.
llvm::Error Binder::checkGroupLevels() {
  for (int i = 0; i < nOps; ++i) {
    int from = -1;
    for (int g = 0; g < def.groups; ++g) {
      const OperandView &v = out.views[g][i];
      if (v.levels.inner == 0 || out.groupRows[g] == 0)
        continue;
      if (from < 0) {
        from = g;
        out.levels[i] = v.levels;
        out.twoLevel = true;
      }
    }
    if (from < 0)
      continue;
    for (int g = 0; g < def.groups; ++g) {
      const OperandView &v = out.views[g][i];
      if (out.groupRows[g] == 0 || v.levels == out.levels[i] ||
          (v.levels.inner == 0 && v.rows <= 1))
        continue;
      const std::string mine =
          v.levels.inner
              ? llvm::formatv("has groups of {0} rows {1} elements apart",
                              v.levels.inner, v.levels.outer)
                    .str()
              : std::string("has its rows one stride apart");
      return fail(BITFOLD_ERROR_STRIDE, g, i,
                  llvm::formatv("{0} but {1} has groups of {2} rows {3} "
                                "apart; the groups of one launch share an "
                                "operand's row levels (the kernel is "
                                "compiled for them)",
                                mine, tensorName(def, from, i),
                                out.levels[i].inner, out.levels[i].outer));
    }
  }
  return llvm::Error::success();
}

/// Whether in every group with rows all channels-first operands have the
/// same S (a frames-major residual next to a contiguous conv output has
/// another: the launch then takes the kernel that reads each S).
bool Binder::sameSpatial() const {
  for (int g = 0; g < def.groups; ++g) {
    if (out.groupRows[g] == 0)
      continue;
    int64_t S = 0;
    for (int i = 0; i < nOps; ++i) {
      const int64_t s = out.views[g][i].spatial;
      if (s == 0)
        continue;
      if (S != 0 && s != S)
        return false;
      S = s;
    }
  }
  return true;
}

llvm::Error Binder::checkOutputVec() {
  // A strided-axis order is aten's for one output_vec_size, which S decides
  // once the template's alignment guard holds (docs/aten-reduce.md
  // section 9).
  for (const dsl::FoldDecl &f : def.folds) {
    if (!f.order.stridedAxis())
      continue;
    for (int g = 0; g < def.groups; ++g)
      for (int i = 0; i < nOps; ++i) {
        const int64_t S = out.views[g][i].spatial;
        if (S == 0 || out.groupRows[g] == 0)
          continue;
        const int ovs = dsl::folds::aten_output_vec_size(S);
        if (ovs != f.order.outputVec)
          return fail(BITFOLD_ERROR_SHAPE, g, i,
                      llvm::formatv("has {0} pixels per image, for which "
                                    "aten's output_vec_size is {1}; fold "
                                    "order '{2}' is its order for {3} "
                                    "(build the kernel with outvec={1})",
                                    S, ovs, f.order.name, f.order.outputVec));
      }
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error bitfold::runtime::checkDefLimits(const KernelDef &def) {
  if (def.groups < 1 || def.groups > kMaxGroups ||
      def.operands.size() > size_t(kMaxOperands) ||
      def.dims.size() > size_t(kMaxDims) ||
      def.scalars.size() > size_t(kMaxScalars))
    return runtimeError(
        BITFOLD_ERROR_UNSUPPORTED,
        llvm::formatv("{0}: {1} groups, {2} operands, {3} dims, {4} scalars "
                      "exceed the runtime's limits ({5}, {6}, {7}, {8})",
                      def.name, def.groups, def.operands.size(),
                      def.dims.size(), def.scalars.size(), kMaxGroups,
                      kMaxOperands, kMaxDims, kMaxScalars));
  for (const OperandDecl &op : def.operands)
    if (op.dtype == dsl::DType::I1)
      return runtimeError(BITFOLD_ERROR_UNSUPPORTED,
                          def.name + ": operand '" + op.name +
                              "' has no storage dtype");
  return llvm::Error::success();
}

int bitfold::runtime::referenceAlignBytes(const KernelDef &def,
                                          const OperandDecl &op) {
  // The template's guard (e.g. aten's vectorized layer norm runs only when
  // x and y are aligned to its 4-element vectors; docs/numerics.md 1 and 2).
  return op.guardAlignElems * int(dsl::dtypeBytes(op.dtype));
}

llvm::Error bitfold::runtime::bindTensors(const KernelDef &def,
                                          const DLTensor *const *tensors,
                                          int numTensors, LaunchBinding &out) {
  const int want = def.groups * int(def.operands.size());
  if (!tensors || numTensors != want) {
    std::string names;
    for (int g = 0; g < def.groups; ++g)
      for (const OperandDecl &op : def.operands) {
        if (!names.empty())
          names += ", ";
        names += op.name;
        if (def.groups > 1)
          names += llvm::formatv("[{0}]", g).str();
      }
    return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                        llvm::formatv("{0} takes {1} tensors ({2}); {3}", def.name,
                                      want, names,
                                      tensors ? std::to_string(numTensors) +
                                                    " given"
                                              : std::string("tensors is NULL")));
  }
  return Binder(def, tensors, out).run();
}

bool bitfold::runtime::rebindAddresses(const KernelDef &def,
                                       const DLTensor *const *tensors,
                                       const LaunchBinding &bound,
                                       LaunchBinding &out) {
  out = bound;
  const int nOps = int(def.operands.size());
  int align[kMaxOperands];
  std::fill(align, align + nOps, 16);
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < nOps; ++i) {
      const DLTensor &t = *tensors[g * nOps + i];
      OperandView &v = out.views[g][i];
      const bool hasElements = std::none_of(
          t.shape, t.shape + t.ndim, [](int64_t n) { return n == 0; });
      if (bindAddress(def, def.operands[i], t, hasElements, v) !=
          AddressFault::None)
        return false;
      // checkEnd's test, kept wherever the view has elements (stricter
      // than the full binding's at most, which then decides).
      uint64_t bytes = 0, end = 0;
      if (hasElements &&
          (__builtin_mul_overflow(uint64_t(v.lastOffset) + 1,
                                  uint64_t(dsl::dtypeBytes(def.operands[i].dtype)),
                                  &bytes) ||
           __builtin_add_overflow(uint64_t(v.base), bytes, &end)))
        return false;
      align[i] = std::min(align[i], v.alignBytes);
    }
  // Another alignment is another shape class: the full launch binds it.
  if (!std::equal(align, align + nOps, bound.alignBytes))
    return false;
  if (llvm::Error e = checkOverlaps(def, out)) {
    llvm::consumeError(std::move(e));
    return false;
  }
  return true;
}

std::string bitfold::runtime::describeDType(DLDataType t) {
  const char *base = "code";
  switch (t.code) {
  case kDLFloat: base = "f"; break;
  case kDLBfloat: base = "bf"; break;
  case kDLInt: base = "int"; break;
  case kDLUInt: base = "uint"; break;
  case kDLComplex: base = "complex"; break;
  case 10: // DLPack 1.1's float8 codes
  case 12:
    if (t.bits == 8 && t.lanes == 1)
      return t.code == 10 ? "float8_e4m3fn" : "float8_e5m2";
    break;
  default: break;
  }
  std::string s = llvm::formatv("{0}{1}", base, int(t.bits)).str();
  if (base[0] == 'c' && base[1] == 'o')
    s = llvm::formatv("type code {0}, {1} bits", int(t.code), int(t.bits)).str();
  if (t.lanes != 1)
    s += llvm::formatv(" x{0} lanes", int(t.lanes)).str();
  return s;
}

DLDataType bitfold::runtime::toDLDataType(dsl::DType t) {
  switch (t) {
  case dsl::DType::BF16: return DLDataType{kDLBfloat, 16, 1};
  case dsl::DType::F16: return DLDataType{kDLFloat, 16, 1};
  case dsl::DType::F32: return DLDataType{kDLFloat, 32, 1};
  // DLPack 1.1's kDLFloat8_e4m3fn (10) and kDLFloat8_e5m2 (12).
  case dsl::DType::F8E4M3FN: return DLDataType{10, 8, 1};
  case dsl::DType::F8E5M2: return DLDataType{12, 8, 1};
  case dsl::DType::I8: return DLDataType{kDLInt, 8, 1};
  case dsl::DType::I32: return DLDataType{kDLInt, 32, 1}; // per-row indices
  default: return DLDataType{kDLUInt, 1, 1};
  }
}
