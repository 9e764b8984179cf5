//===- tests/runtime/RebindBindingTest.cpp - A prepared launch's re-binding ===//
//
// rebindAddresses (a prepared launch's warm path) must agree with the full
// binding at every address: it accepts exactly where bindTensors succeeds
// with the first launch's shape class (the same alignment), and then gives
// the same binding; everywhere else (NULL data, misaligned elements,
// overlaps, ends past the address space, another alignment class) it
// declines, so the full binding runs and says why. Random addresses over
// the stock row-major and channels-last kernels and fused-QKV views. Host
// only.
//
//===----------------------------------------------------------------------===//

#include "runtime/Status.h"
#include "runtime/TensorBinding.h"

#include "HostTensor.h"
#include "TemplateDef.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace bitfold;
using namespace bitfold::runtime;
using dsl::IndexMap;

namespace {

using View = bitfold::testing::Tensor;

std::vector<int64_t> compact(const std::vector<int64_t> &shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int d = int(shape.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * shape[d + 1];
  return st;
}

/// Dense tensors of every operand of `def` at C columns, tensor k at
/// (k + 1) << 32: row-major (2, 8, C), per batch (2, 1, C), per column
/// (C), channels-last (2, C, 3, 4, 5).
std::vector<View> denseViews(const dsl::KernelDef &def, int64_t C) {
  std::vector<View> v;
  for (int g = 0; g < def.groups; ++g)
    for (const dsl::OperandDecl &op : def.operands) {
      std::vector<int64_t> shape{2, 8, C}, strides;
      if (op.layout == dsl::Layout::ChannelsLast &&
          op.map == IndexMap::PerElement) {
        shape = {2, C, 3, 4, 5};
        strides = {C * 60, 1, C * 20, C * 5, C};
      } else if (op.map == IndexMap::PerColumn) {
        shape = {C};
      } else if (op.map == IndexMap::PerBatch) {
        shape = {2, 1, C};
      }
      if (strides.empty())
        strides = compact(shape);
      View t{shape, strides, uintptr_t(v.size() + 1) << 32};
      t.dtype = toDLDataType(op.dtype);
      v.push_back(t);
    }
  return v;
}

/// The q and k views of a fused (2, 5, 3 * 4 * 64) projection (rows in two
/// levels) and their contiguous outputs: qk_layernorm's x[0], y[0], x[1],
/// y[1].
std::vector<View> fusedQkViews() {
  const int64_t token = 3 * 4 * 64;
  auto part = [&](int p) {
    return View{{2, 5, 4, 64}, {5 * token, token, 64, 1},
                (uintptr_t(1) << 32) + uintptr_t(p * 4 * 64) * 2};
  };
  auto out = [](int k) {
    return View{{2, 5, 4, 64}, {}, uintptr_t(k) << 32};
  };
  return {part(0), out(2), part(1), out(3)};
}

/// Moves each tensor somewhere new: mostly its own region at another
/// offset (aligned or not), sometimes NULL, onto another tensor (exactly
/// or a few elements off) or near the end of the address space.
void scatter(std::vector<View> &v, const std::vector<uintptr_t> &home,
             std::mt19937_64 &rng) {
  static const uintptr_t offsets[] = {0, 0, 0, 16, 32, 48, 2, 4, 8, 1, 6};
  for (size_t k = 0; k < v.size(); ++k) {
    const unsigned pick = unsigned(rng() % 100);
    const size_t other = size_t(rng() % v.size());
    if (pick < 4)
      v[k].address = 0;
    else if (pick < 14)
      v[k].address = v[other].address;
    else if (pick < 19)
      v[k].address = v[other].address + 2 * (1 + rng() % 70);
    else if (pick < 22)
      v[k].address = ~uintptr_t(0) - 64 * (rng() % 4);
    else
      v[k].address = home[k] + 64 * (rng() % 4) +
                     offsets[rng() % std::size(offsets)];
  }
}

/// Compares the rebinding with the full binding at many addresses; counts
/// what happened (accepted, declined over an error, declined over the
/// class) so the test shows each case ran.
void expectRebindAgrees(const dsl::KernelDef &def, std::vector<View> views,
                        int trials, uint64_t seed) {
  const int n = int(views.size());
  std::vector<const DLTensor *> ts;
  for (View &t : views)
    ts.push_back(t.get());
  LaunchBinding bound;
  ASSERT_FALSE(bool(bindTensors(def, ts.data(), n, bound))) << def.name;
  std::vector<uintptr_t> home;
  for (const View &t : views)
    home.push_back(t.address);
  std::mt19937_64 rng(seed);
  int accepted = 0, failed = 0, otherClass = 0;
  for (int trial = 0; trial < trials; ++trial) {
    scatter(views, home, rng);
    for (int k = 0; k < n; ++k)
      ts[k] = views[k].get();
    LaunchBinding full, re;
    llvm::Error e = bindTensors(def, ts.data(), n, full);
    const bool ok = !e;
    llvm::consumeError(std::move(e));
    const bool sameClass =
        ok && std::equal(full.alignBytes,
                         full.alignBytes + def.operands.size(),
                         bound.alignBytes);
    const bool rebound = rebindAddresses(def, ts.data(), bound, re);
    ASSERT_EQ(rebound, sameClass) << def.name << " trial " << trial;
    accepted += rebound;
    failed += !ok;
    otherClass += ok && !sameClass;
    if (!rebound)
      continue;
    for (int g = 0; g < def.groups; ++g)
      for (size_t i = 0; i < def.operands.size(); ++i) {
        const OperandView &a = re.views[g][i], &b = full.views[g][i];
        EXPECT_EQ(a.base, b.base) << def.name << " trial " << trial;
        EXPECT_EQ(a.alignBytes, b.alignBytes);
        EXPECT_EQ(a.rows, b.rows);
        EXPECT_EQ(a.rowStride, b.rowStride);
        EXPECT_EQ(a.lastOffset, b.lastOffset);
        EXPECT_EQ(a.levels, b.levels);
      }
    EXPECT_EQ(re.totalRows, full.totalRows);
    EXPECT_EQ(re.cols, full.cols);
    EXPECT_EQ(re.maxElementOffset, full.maxElementOffset);
  }
  EXPECT_GT(accepted, 0) << def.name;
  EXPECT_GT(failed, 0) << def.name;
  EXPECT_GT(otherClass, 0) << def.name;
}

struct Case {
  const char *name, *params;
  int64_t cols;
};

TEST(Rebind, AgreesWithTheFullBindingAtRandomAddresses) {
  for (const Case &c : {Case{"ln_modulate", "dtype=bf16", 256},
                        Case{"hf_rmsnorm", "dtype=bf16", 128},
                        Case{"rmsnorm_modulate", "dtype=bf16", 2048},
                        Case{"residual_gate", "dtype=bf16,gate=per_batch", 128},
                        Case{"residual_gate", "dtype=f32,gate=global", 64},
                        Case{"conv_bias", "dtype=bf16", 96},
                        Case{"qk_layernorm", "dtype=bf16", 64}}) {
    auto def = testutil::buildTemplate(c.name, c.params, c.cols);
    ASSERT_TRUE(def) << c.name;
    expectRebindAgrees(*def, denseViews(*def, c.cols), 3000, c.cols);
  }
}

TEST(Rebind, AgreesOnFusedQkvViewsInTwoLevels) {
  auto def = testutil::buildTemplate("qk_layernorm", "dtype=bf16", 64);
  ASSERT_TRUE(def);
  expectRebindAgrees(*def, fusedQkViews(), 3000, 7);
}

} // namespace
