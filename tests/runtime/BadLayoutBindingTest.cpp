//===- tests/runtime/BadLayoutBindingTest.cpp - Hostile views, bound -------===//
//
// Hostile views walk through the binding of the row-major stock ops and
// the channels-last ones (conv_bias, wan_rmsnorm_silu): each dim's stride
// of the operand's dense layout made zero (expand), negative, halved
// (overlapping rows), padded (a slice), and every storage order of its
// dims, one operand at a time. Whatever binds must be addressed exactly:
// for every element of every operand, the kernel's address (base + (row *
// rowStride + col) * size; row-major rows are the leading dims flattened,
// in one level or two, keys::RowLevels; channels-last rows the pixels) is
// the element's own address, and no two
// elements of an output share an address. Whatever does not bind is
// refused with a status (never a crash): the caller's eager fallback then
// gives the reference's bits. Host only: no GPU, no compile.
//
//===----------------------------------------------------------------------===//

#include "runtime/Status.h"
#include "runtime/TensorBinding.h"

#include "TemplateDef.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

using namespace bitfold;
using namespace bitfold::runtime;
using dsl::IndexMap;

namespace {

std::shared_ptr<const dsl::KernelDef> build(const char *name,
                                            const char *params, int64_t C) {
  return bitfold::testutil::buildTemplate(name, params, C);
}

struct View {
  std::vector<int64_t> shape, strides;
  int64_t address = 0;
  DLTensor dl{};
  const DLTensor *get(DLDataType dtype) {
    dl.data = reinterpret_cast<void *>(address);
    dl.device = {kDLCUDA, 0};
    dl.ndim = int(shape.size());
    dl.dtype = dtype;
    dl.shape = shape.data();
    dl.strides = strides.data();
    return &dl;
  }
};

std::vector<int64_t> compact(const std::vector<int64_t> &shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = int(shape.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * shape[d + 1];
  return st;
}

constexpr int64_t kB = 2, kS = 8, kC = 128;

/// The operand's logical shape in the ops' own terms, at C columns
/// (channels): row-major (B, S, C), (B, 1, C) per batch, (C) per column;
/// channels-last (B, C, 3, 4, 5).
std::vector<int64_t> shapeOf(const dsl::OperandDecl &op, int64_t C) {
  if (op.layout == dsl::Layout::ChannelsLast && op.map == IndexMap::PerElement)
    return {kB, C, 3, 4, 5};
  switch (op.map) {
  case IndexMap::PerColumn: return {C};
  case IndexMap::PerBatch: return {kB, 1, C};
  case IndexMap::PerElement: break;
  }
  return {kB, kS, C};
}

/// The operand's dense strides in its own layout.
std::vector<int64_t> denseOf(const dsl::OperandDecl &op,
                             const std::vector<int64_t> &shape) {
  if (op.layout != dsl::Layout::ChannelsLast || shape.size() != 5)
    return compact(shape);
  const int64_t C = shape[1];
  return {C * 60, 1, C * 20, C * 5, C};
}

/// The element offset (from data) of the element at row-major position
/// `flat` of the logical shape: where it lies (`strides`), or where the
/// kernel reads it (the binding's base and row stride: row-major rows are
/// the leading dims flattened; channels-last rows are the pixels n*P + p).
int64_t offsetOf(const std::vector<int64_t> &shape,
                 const std::vector<int64_t> &strides, int64_t flat) {
  int64_t off = 0;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    off += (flat % shape[d]) * strides[d];
    flat /= shape[d];
  }
  return off;
}

int64_t kernelOffsetOf(const std::vector<int64_t> &shape, const OperandView &v,
                       int64_t flat) {
  const int64_t rowStride = v.rowStride;
  if (shape.size() != 5) { // (rows..., C), in one or two levels
    const int64_t r = flat / shape.back(), c = flat % shape.back();
    if (v.levels.inner > 0)
      return r / v.levels.inner * v.levels.outer +
             r % v.levels.inner * rowStride + c;
    return r * rowStride + c;
  }
  const int64_t P = shape[2] * shape[3] * shape[4];
  const int64_t n = flat / (shape[1] * P), c = flat / P % shape[1],
                p = flat % P;
  return (n * P + p) * rowStride + c;
}

/// Binds one group of `def` (C columns) with operand `bad` given `badView`
/// (its logical shape, any strides); the others dense at their own
/// addresses. On success, checks every element's address.
bitfold_status bindOne(const dsl::KernelDef &def, int64_t C, int bad,
                       const View &badView, std::string &msg) {
  const int n = int(def.operands.size());
  std::vector<View> views(n * def.groups);
  std::vector<const DLTensor *> ts;
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < n; ++i) {
      View &v = views[g * n + i];
      v.shape = shapeOf(def.operands[i], C);
      v.strides = denseOf(def.operands[i], v.shape);
      v.address = (int64_t(1) << 32) * (1 + g * n + i);
      if (g == 0 && i == bad)
        v = badView;
      ts.push_back(v.get(toDLDataType(def.operands[i].dtype)));
    }
  LaunchBinding b;
  bitfold_status s =
      takeStatus(bindTensors(def, ts.data(), int(ts.size()), b), msg);
  if (s != BITFOLD_SUCCESS)
    return s;
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < n; ++i) {
      const View &v = views[g * n + i];
      const OperandView &ov = b.views[g][i];
      const int64_t elem = dsl::dtypeBytes(def.operands[i].dtype);
      int64_t count = 1;
      for (int64_t e : v.shape)
        count *= e;
      std::set<int64_t> seen;
      for (int64_t flat = 0; flat < count; ++flat) {
        const int64_t kernelAt =
            int64_t(ov.base) + kernelOffsetOf(v.shape, ov, flat) * elem;
        const int64_t trueAt = v.address + offsetOf(v.shape, v.strides, flat) * elem;
        if (kernelAt != trueAt) {
          ADD_FAILURE() << def.name << " operand " << def.operands[i].name
                        << ": element " << flat << " addressed at " << kernelAt
                        << ", lies at " << trueAt;
          return BITFOLD_ERROR_INTERNAL;
        }
        if (def.operands[i].isOutput && !seen.insert(trueAt).second) {
          ADD_FAILURE() << def.name << ": output " << def.operands[i].name
                        << " writes address " << trueAt << " twice";
          return BITFOLD_ERROR_INTERNAL;
        }
      }
    }
  return s;
}

/// Every hostile view of an operand of `shape` whose dense strides are
/// `dense`: one dim's stride zero, negative, halved, padded; every
/// permutation of the storage order.
std::vector<std::pair<std::string, View>>
hostileViews(const std::vector<int64_t> &shape,
             const std::vector<int64_t> &dense) {
  std::vector<std::pair<std::string, View>> out;
  const int nd = int(shape.size());
  const int64_t base = int64_t(1) << 40;
  for (int d = 0; d < nd; ++d) {
    for (int kind = 0; kind < 4; ++kind) {
      View v{shape, dense, base};
      const char *what[] = {"zero", "negative", "halved", "padded"};
      if (kind == 0)
        v.strides[d] = 0;
      else if (kind == 1)
        v.strides[d] = -v.strides[d];
      else if (kind == 2)
        v.strides[d] = std::max<int64_t>(v.strides[d] / 2, 1);
      else
        for (int e = 0; e <= d; ++e) // a slice of a wider tensor
          v.strides[e] = e == nd - 1 ? 2 : v.strides[e] * 2;
      out.push_back({std::string(what[kind]) + " stride of dim " +
                         std::to_string(d),
                     v});
    }
  }
  std::vector<int> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  do { // storage order perm[0] slowest .. perm[nd-1] fastest
    View v{shape, std::vector<int64_t>(nd), base};
    int64_t acc = 1;
    for (int k = nd - 1; k >= 0; --k) {
      v.strides[perm[k]] = acc;
      acc *= shape[perm[k]];
    }
    std::string name = "storage order";
    for (int p : perm)
      name.append(1, ' ').append(std::to_string(p));
    out.push_back({name, v});
  } while (std::next_permutation(perm.begin(), perm.end()));
  return out;
}

struct OpCase {
  const char *name, *params;
  int64_t C;
};

TEST(BadLayoutBinding, EveryHostileViewIsAddressedExactlyOrRefused) {
  int bound = 0, refused = 0;
  for (const OpCase &oc : {
           OpCase{"residual_gate", "dtype=bf16,gate=per_batch", kC},
           OpCase{"residual_gate", "dtype=bf16,gate=full", kC},
           OpCase{"residual_gate", "dtype=f32,gate=global", kC},
           OpCase{"ln_modulate", "dtype=bf16", kC},
           OpCase{"qk_layernorm", "dtype=bf16", kC},
           OpCase{"hf_rmsnorm", "dtype=bf16,weight=bf16,residual=1,modulate=1",
                  kC},
           OpCase{"conv_bias", "dtype=bf16,bias_dtype=bf16,residual=1", 12},
           OpCase{"wan_rmsnorm_silu",
                  "dtype=bf16,form=x,gamma=bf16,bias=1,conv_bias=1", 12},
       }) {
    auto def = build(oc.name, oc.params, oc.C);
    ASSERT_TRUE(def);
    for (int i = 0; i < int(def->operands.size()); ++i) {
      const dsl::OperandDecl &op = def->operands[i];
      const std::vector<int64_t> shape = shapeOf(op, oc.C);
      for (auto &[what, view] : hostileViews(shape, denseOf(op, shape))) {
        std::string msg;
        bitfold_status s = bindOne(*def, oc.C, i, view, msg);
        ASSERT_NE(s, BITFOLD_ERROR_INTERNAL)
            << oc.name << " " << def->operands[i].name << ": " << what;
        if (s == BITFOLD_SUCCESS) {
          ++bound;
          continue;
        }
        ++refused;
        EXPECT_FALSE(msg.empty()) << oc.name << ": " << what;
      }
    }
  }
  // Both outcomes occur (the walk is not vacuous).
  EXPECT_GT(bound, 0);
  EXPECT_GT(refused, 0);
}

TEST(BadLayoutBinding, BroadcastInputsOfElementwiseUseBindOutputsAndReducedInputsDoNot) {
  // residual_gate's gate expanded over the batch, (1, 1, C) -> (B, 1, C):
  // stride 0 between its rows, read elementwise: binds.
  auto gate = build("residual_gate", "dtype=bf16,gate=per_batch", kC);
  ASSERT_TRUE(gate);
  const int g = 2; // residual, update, gate, out
  ASSERT_EQ(gate->operands[g].map, IndexMap::PerBatch);
  std::string msg;
  EXPECT_EQ(bindOne(*gate, kC, g, View{{kB, 1, kC}, {0, kC, 1}, 1 << 20}, msg),
            BITFOLD_SUCCESS)
      << msg;
  // The update, one row expanded over every row: binds for an elementwise
  // kernel.
  auto full = build("residual_gate", "dtype=bf16,gate=full", kC);
  ASSERT_TRUE(full);
  View rowBroadcast{{kB, kS, kC}, {0, 0, 1}, 1 << 20};
  EXPECT_EQ(bindOne(*full, kC, 1, rowBroadcast, msg), BITFOLD_SUCCESS) << msg;
  // ... but never as the output.
  EXPECT_EQ(bindOne(*full, kC, 3, rowBroadcast, msg), BITFOLD_ERROR_STRIDE);
  // ln_modulate's scale expanded over the batch: per-batch, elementwise.
  auto ln = build("ln_modulate", "dtype=bf16", kC);
  ASSERT_TRUE(ln);
  EXPECT_EQ(bindOne(*ln, kC, 1, View{{kB, 1, kC}, {0, 0, 1}, 1 << 20}, msg),
            BITFOLD_SUCCESS)
      << msg;
  // Its x, the reduced input, repeated: refused (aten's layer_norm copies
  // such a view first; the order of that copy is the kernel's only where
  // the rows are real).
  EXPECT_EQ(bindOne(*ln, kC, 0, rowBroadcast, msg), BITFOLD_ERROR_STRIDE);
}

} // namespace
