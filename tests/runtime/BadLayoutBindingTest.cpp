//===- tests/runtime/BadLayoutBindingTest.cpp - Hostile views, bound -------===//
//
// Views that are neither contiguous nor channels-last walk through the
// binding of every row-major stock op: each dim's stride made zero
// (expand), negative, halved (overlapping rows), padded (a slice), and
// every permutation of the dims, one operand at a time. Whatever binds
// must be addressed exactly: for every element of every operand, the
// kernel's address (base + (row * rowStride + col) * size, the row being
// the leading dims flattened) is the element's own address, and no two
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

/// The operand's logical shape in the ops' own terms.
std::vector<int64_t> shapeOf(const dsl::OperandDecl &op) {
  switch (op.map) {
  case IndexMap::PerColumn: return {kC};
  case IndexMap::PerBatch: return {kB, 1, kC};
  case IndexMap::PerElement: break;
  }
  return {kB, kS, kC};
}

/// The element offsets (in elements, from data) of a view, in row-major
/// order of its logical indices.
std::vector<int64_t> offsets(const View &v) {
  int64_t n = 1;
  for (int64_t s : v.shape)
    n *= s;
  std::vector<int64_t> out;
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, off = 0;
    for (int d = int(v.shape.size()) - 1; d >= 0; --d) {
      off += (rest % v.shape[d]) * v.strides[d];
      rest /= v.shape[d];
    }
    out.push_back(off);
  }
  return out;
}

/// Binds one group of `def` with operand `bad` given `badView` (its logical
/// shape, permuted storage allowed); the others dense at their own
/// addresses. On success, checks every element's address.
bitfold_status bindOne(const dsl::KernelDef &def, int bad, const View &badView,
                       std::string &msg) {
  const int n = int(def.operands.size());
  std::vector<View> views(n * def.groups);
  std::vector<const DLTensor *> ts;
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < n; ++i) {
      View &v = views[g * n + i];
      v.shape = shapeOf(def.operands[i]);
      v.strides = compact(v.shape);
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
      std::vector<int64_t> offs = offsets(v);
      std::set<int64_t> seen;
      for (size_t flat = 0; flat < offs.size(); ++flat) {
        const int64_t r = int64_t(flat) / kC, c = int64_t(flat) % kC;
        const int64_t kernelAt = int64_t(ov.base) + (r * ov.rowStride + c) * elem;
        const int64_t trueAt = v.address + offs[flat] * elem;
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

/// Every hostile view of an operand of `shape`: one dim's stride zero,
/// negative, halved, padded; every permutation of the storage order.
std::vector<std::pair<std::string, View>>
hostileViews(const std::vector<int64_t> &shape) {
  std::vector<std::pair<std::string, View>> out;
  const int nd = int(shape.size());
  const std::vector<int64_t> dense = compact(shape);
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
};

TEST(BadLayoutBinding, EveryHostileViewIsAddressedExactlyOrRefused) {
  int bound = 0, refused = 0;
  for (const OpCase &oc : {
           OpCase{"residual_gate", "dtype=bf16,gate=per_batch"},
           OpCase{"residual_gate", "dtype=bf16,gate=full"},
           OpCase{"residual_gate", "dtype=f32,gate=global"},
           OpCase{"ln_modulate", "dtype=bf16"},
           OpCase{"qk_layernorm", "dtype=bf16"},
           OpCase{"hf_rmsnorm", "dtype=bf16,weight=bf16,residual=1,modulate=1"},
       }) {
    auto def = build(oc.name, oc.params, kC);
    ASSERT_TRUE(def);
    for (int i = 0; i < int(def->operands.size()); ++i)
      for (auto &[what, view] : hostileViews(shapeOf(def->operands[i]))) {
        std::string msg;
        bitfold_status s = bindOne(*def, i, view, msg);
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
  EXPECT_EQ(bindOne(*gate, g, View{{kB, 1, kC}, {0, kC, 1}, 1 << 20}, msg),
            BITFOLD_SUCCESS)
      << msg;
  // The update, one row expanded over every row: binds for an elementwise
  // kernel.
  auto full = build("residual_gate", "dtype=bf16,gate=full", kC);
  ASSERT_TRUE(full);
  View rowBroadcast{{kB, kS, kC}, {0, 0, 1}, 1 << 20};
  EXPECT_EQ(bindOne(*full, 1, rowBroadcast, msg), BITFOLD_SUCCESS) << msg;
  // ... but never as the output.
  EXPECT_EQ(bindOne(*full, 3, rowBroadcast, msg), BITFOLD_ERROR_STRIDE);
  // ln_modulate's scale expanded over the batch: per-batch, elementwise.
  auto ln = build("ln_modulate", "dtype=bf16", kC);
  ASSERT_TRUE(ln);
  EXPECT_EQ(bindOne(*ln, 1, View{{kB, 1, kC}, {0, 0, 1}, 1 << 20}, msg),
            BITFOLD_SUCCESS)
      << msg;
  // Its x, the reduced input, repeated: refused (aten's layer_norm copies
  // such a view first; the order of that copy is the kernel's only where
  // the rows are real).
  EXPECT_EQ(bindOne(*ln, 0, rowBroadcast, msg), BITFOLD_ERROR_STRIDE);
}

} // namespace
