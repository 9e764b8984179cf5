//===- tests/runtime/TwoLevelRowsBindingTest.cpp - Rows in two levels -----===//
//
// Row-major operands whose leading dims nest into two strides (keys::
// RowLevels): the q and k views of a fused QKV projection, (B, S, H, D)
// rows H per token D apart, tokens 3*H*D apart. What the binding derives
// (levels, row stride, alignment over both strides, the last offset), and
// what it refuses with which status: a third level, negative or
// overlapping group strides, levels on per-batch operands, groups of one
// launch that disagree, offsets past int64. Host only.
//
//===----------------------------------------------------------------------===//

#include "runtime/Status.h"
#include "runtime/TensorBinding.h"

#include "HostTensor.h"
#include "TemplateDef.h"

#include <gtest/gtest.h>

#include <vector>

using namespace bitfold;
using namespace bitfold::runtime;

namespace {

using View = bitfold::testing::Tensor;

constexpr int64_t kB = 2, kS = 5, kH = 4, kD = 64;
constexpr uint64_t kQkv = uint64_t(1) << 32, kOut = uint64_t(1) << 36;

/// A (B, S, H, D) view of a fused (B, S, 3 * H * D) projection: part
/// `part` (0 q, 1 k, 2 v) of `qkv`, plus `pad` elements per token.
View qkvPart(int part, int64_t pad = 0, uint64_t qkv = kQkv) {
  const int64_t token = 3 * kH * kD + pad;
  return View{{kB, kS, kH, kD},
              {kS * token, token, kD, 1},
              qkv + uint64_t(part * kH * kD) * 2};
}

View contiguous(uint64_t address, std::vector<int64_t> shape = {kB, kS, kH,
                                                                 kD}) {
  return View{std::move(shape), {}, address};
}

/// Binds qk_layernorm (bf16, D = 64) to x[0], y[0], x[1], y[1].
bitfold_status bindQk(View q, View qy, View k, View ky, LaunchBinding &b,
                      std::string &msg) {
  auto def = testutil::buildTemplate("qk_layernorm", "dtype=bf16", kD);
  if (!def)
    return BITFOLD_ERROR_INTERNAL;
  const DLTensor *ts[] = {q.get(), qy.get(), k.get(), ky.get()};
  return takeStatus(bindTensors(*def, ts, 4, b), msg);
}

TEST(TwoLevelRows, QkViewsOfAFusedProjectionBindInPlace) {
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(bindQk(qkvPart(0), contiguous(kOut), qkvPart(1),
                   contiguous(kOut * 2), b, msg),
            BITFOLD_SUCCESS)
      << msg;
  const int64_t token = 3 * kH * kD;
  for (int g = 0; g < 2; ++g) {
    const OperandView &x = b.views[g][0];
    EXPECT_EQ(x.base, kQkv + uint64_t(g * kH * kD) * 2);
    EXPECT_EQ(x.rows, kB * kS * kH);
    EXPECT_EQ(x.rowStride, kD);
    EXPECT_EQ(x.levels, (keys::RowLevels{kH, token}));
    EXPECT_EQ(x.alignBytes, 16);
    // Last row: group B*S - 1, head H - 1.
    EXPECT_EQ(x.lastOffset, (kB * kS - 1) * token + (kH - 1) * kD + kD - 1);
    const OperandView &y = b.views[g][1];
    EXPECT_EQ(y.levels.inner, 0) << "the output stays one level";
    EXPECT_EQ(y.rowStride, kD);
  }
  EXPECT_TRUE(b.twoLevel);
  EXPECT_EQ(b.levels[0], (keys::RowLevels{kH, token}));
  EXPECT_EQ(b.levels[1].inner, 0);
  EXPECT_EQ(b.groupRows[0], kB * kS * kH);

  // Contiguous views stay one level: nothing changes for them.
  LaunchBinding plain;
  ASSERT_EQ(bindQk(contiguous(kQkv), contiguous(kOut), contiguous(kQkv * 2),
                   contiguous(kOut * 2), plain, msg),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_FALSE(plain.twoLevel);
  EXPECT_EQ(plain.views[0][0].levels.inner, 0);
  EXPECT_EQ(plain.views[0][0].rowStride, kD);
}

TEST(TwoLevelRows, ChunkAndUnbindViewsOfA5DTensorBind) {
  // (B, S, 3, H, D).unbind(2): q = [:, :, 0], strides (S*3HD, 3HD, D, 1).
  const int64_t token = 3 * kH * kD;
  View q{{kB, kS, kH, kD}, {kS * token, token, kD, 1}, kQkv};
  View k{{kB, kS, kH, kD}, {kS * token, token, kD, 1}, kQkv + kH * kD * 2};
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(bindQk(q, contiguous(kOut), k, contiguous(kOut * 2), b, msg),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.levels[0], (keys::RowLevels{kH, token}));
  // A (B*S, H, D) view (tokens flattened) is the same map.
  View flat{{kB * kS, kH, kD}, {token, kD, 1}, kQkv};
  View flatK{{kB * kS, kH, kD}, {token, kD, 1}, kQkv + kH * kD * 2};
  LaunchBinding b2;
  ASSERT_EQ(bindQk(flat, contiguous(kOut, {kB * kS, kH, kD}), flatK,
                   contiguous(kOut * 2, {kB * kS, kH, kD}), b2, msg),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b2.levels[0], b.levels[0]);
  EXPECT_EQ(b2.views[0][0].lastOffset, b.views[0][0].lastOffset);
}

TEST(TwoLevelRows, AlignmentCoversTheGroupStride) {
  LaunchBinding b;
  std::string msg;
  // 2 elements of padding per token: groups 4-byte aligned only.
  ASSERT_EQ(bindQk(qkvPart(0, 2), contiguous(kOut), qkvPart(1, 2),
                   contiguous(kOut * 2), b, msg),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.views[0][0].alignBytes, 4);
  EXPECT_EQ(b.alignBytes[0], 4);
  EXPECT_EQ(b.alignBytes[1], 16);
  // 4 elements: 8 bytes, aten's vectorized layer norm guard (4 elements)
  // still holds for the bases.
  ASSERT_EQ(bindQk(qkvPart(0, 4), contiguous(kOut), qkvPart(1, 4),
                   contiguous(kOut * 2), b, msg),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.alignBytes[0], 8);
}

TEST(TwoLevelRows, AThirdLevelIsRefused) {
  // (B, S, H, D) with B, S and H each their own stride.
  View q{{kB, kS, kH, kD}, {100000, 3 * kH * kD, kD, 1}, kQkv};
  LaunchBinding b;
  std::string msg;
  EXPECT_EQ(bindQk(q, contiguous(kOut), qkvPart(1), contiguous(kOut * 2), b,
                   msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_EQ(msg, "qk_layernorm: tensor 0 ('x' of group 0): dimensions 0..2 "
                 "cannot be merged into two row levels (rows one stride "
                 "apart in groups one stride apart): stride[0] is 100000, "
                 "dims 1..2 need 3840; shape (2, 5, 4, 64), strides (100000, "
                 "768, 64, 1)");
}

TEST(TwoLevelRows, NegativeAndOverlappingGroupsAreRefused) {
  LaunchBinding b;
  std::string msg;
  // One batch of tokens walked backwards.
  View neg{{1, kS, kH, kD}, {0, -3 * kH * kD, kD, 1}, kQkv * 3};
  EXPECT_EQ(bindQk(neg, contiguous(kOut), qkvPart(1), contiguous(kOut * 2), b,
                   msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("negative row stride -768 is not supported"),
            std::string::npos)
      << msg;
  // Tokens 128 apart, but a token's 4 heads span 256: the reduced input's
  // rows would overlap.
  View over = qkvPart(0);
  over.strides = {kS * 128, 128, kD, 1};
  EXPECT_EQ(bindQk(over, contiguous(kOut), qkvPart(1), contiguous(kOut * 2),
                   b, msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_EQ(msg, "qk_layernorm: tensor 0 ('x' of group 0): groups of 4 rows "
                 "lie 128 elements apart but span 256 (rows would overlap); "
                 "shape (2, 5, 4, 64), strides (640, 128, 64, 1)");
  // A token expanded over the sequence (stride 0): the same, for x ...
  View expanded = qkvPart(0);
  expanded.strides[1] = 0;
  EXPECT_EQ(bindQk(expanded, contiguous(kOut), qkvPart(1),
                   contiguous(kOut * 2), b, msg),
            BITFOLD_ERROR_STRIDE);
  // ... and for the output.
  View outExpanded = contiguous(kOut);
  outExpanded.strides = {0, 0, kD, 1};
  EXPECT_EQ(bindQk(qkvPart(0), outExpanded, qkvPart(1), contiguous(kOut * 2),
                   b, msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("tensor 1 ('y' of group 0): groups of 4 rows lie 0 "
                     "elements apart"),
            std::string::npos)
      << msg;
}

TEST(TwoLevelRows, GroupsOfOneLaunchShareTheLevels) {
  LaunchBinding b;
  std::string msg;
  // k padded differently from q: two kernels' worth of levels.
  EXPECT_EQ(bindQk(qkvPart(0), contiguous(kOut), qkvPart(1, 8, kQkv * 2),
                   contiguous(kOut * 2), b, msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_EQ(msg, "qk_layernorm: tensor 2 ('x' of group 1): has groups of 4 "
                 "rows 776 elements apart but tensor 0 ('x' of group 0) has "
                 "groups of 4 rows 768 apart; the groups of one launch share "
                 "an operand's row levels (the kernel is compiled for them)");
  // A contiguous k next to a strided q: the same.
  EXPECT_EQ(bindQk(qkvPart(0), contiguous(kOut), contiguous(kQkv * 2),
                   contiguous(kOut * 2), b, msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("tensor 2 ('x' of group 1): has its rows one stride "
                     "apart but tensor 0 ('x' of group 0) has groups of 4 "
                     "rows 768 apart"),
            std::string::npos)
      << msg;
  // A group without rows takes no part.
  View empty = contiguous(kQkv * 2, {0, kS, kH, kD});
  View emptyY = contiguous(kOut * 2, {0, kS, kH, kD});
  EXPECT_EQ(bindQk(qkvPart(0), contiguous(kOut), empty, emptyY, b, msg),
            BITFOLD_SUCCESS)
      << msg;
}

TEST(TwoLevelRows, OnlyPerElementOperandsTakeTwoLevels) {
  // ln_modulate's scale is per batch: (B, 1, D) batches one stride apart;
  // as (B, 2, D) with a second stride it is not a per-batch operand at all,
  // but a (2, 3, D) x whose batches lie apart binds in two levels.
  auto def = testutil::buildTemplate("ln_modulate", "dtype=bf16", kD);
  ASSERT_TRUE(def);
  View x{{2, 3, kD}, {1000, kD, 1}, kQkv};
  View sc{{2, 1, kD}, {}, kQkv * 2}, sh{{2, 1, kD}, {}, kQkv * 3};
  View y = contiguous(kOut, {2, 3, kD});
  const DLTensor *ts[] = {x.get(), sc.get(), sh.get(), y.get()};
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(takeStatus(bindTensors(*def, ts, 4, b), msg), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.levels[0], (keys::RowLevels{3, 1000}));
  // A (2, 2, 1, D) scale with two strides: per-batch rows nest in one.
  View sc2{{2, 2, 1, kD}, {1000, kD, kD, 1}, kQkv * 2};
  View x2{{2, 2, 3, kD}, {}, kQkv}, sh2{{2, 2, 1, kD}, {}, kQkv * 3};
  View y2 = contiguous(kOut, {2, 2, 3, kD});
  const DLTensor *ts2[] = {x2.get(), sc2.get(), sh2.get(), y2.get()};
  EXPECT_EQ(takeStatus(bindTensors(*def, ts2, 4, b), msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("tensor 1 ('scale'): dimensions 0..1 cannot be merged "
                     "into one row dimension"),
            std::string::npos)
      << msg;
}

TEST(TwoLevelRows, OffsetsPastInt64AreRefused) {
  // (8 tokens, H, D), tokens 2^61 apart: the strides overflow int64.
  View q{{8, kH, kD}, {int64_t(1) << 61, kD, 1}, kQkv};
  View qy = contiguous(kOut, {8, kH, kD});
  View k = contiguous(kQkv * 2, {0, kH, kD}), ky = contiguous(kOut, {0, kH, kD});
  LaunchBinding b;
  std::string msg;
  EXPECT_EQ(bindQk(q, qy, k, ky, b, msg), BITFOLD_ERROR_UNSUPPORTED);
  EXPECT_NE(msg.find("strides overflow"), std::string::npos) << msg;
  // Two tokens: within int64, but from 3 * 2^62 past the address space.
  q.shape[0] = qy.shape[0] = 2;
  q.address = uint64_t(3) << 62;
  EXPECT_EQ(bindQk(q, qy, k, ky, b, msg), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("run past the end of the address space"),
            std::string::npos)
      << msg;
  // From 2^62 it fits, and indexes with 64 bits.
  q.address = uint64_t(1) << 62;
  ASSERT_EQ(bindQk(q, qy, k, ky, b, msg), BITFOLD_SUCCESS) << msg;
  EXPECT_EQ(b.maxElementOffset, (int64_t(1) << 61) + 3 * kD + kD - 1);
}

TEST(TwoLevelRows, LastOffsetMatchesChannelsFirst) {
  // The channels-first pixel map is two-level rows one element apart.
  int64_t last = 0;
  ASSERT_TRUE(keys::lastElementOffset(3 * 20, {20, 7 * 20}, 1, 7, 20, last));
  EXPECT_EQ(last, 3 * 7 * 20 - 1);
  ASSERT_TRUE(keys::lastElementOffset(10 * 4, {4, 768}, 64, 64, 1, last));
  EXPECT_EQ(last, 9 * 768 + 3 * 64 + 63);
  EXPECT_FALSE(keys::lastElementOffset(4, {2, INT64_MAX}, 1, 1, 1, last));
}

} // namespace
