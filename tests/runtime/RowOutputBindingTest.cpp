//===- tests/runtime/RowOutputBindingTest.cpp - per_row and aliases -------===//
//
// What the binding decides for per-row outputs and inputs (one value per
// row, any shape whose values lie one stride apart; an i32 input is an
// int32 tensor) and for in-place outputs
// (`aliases`): the same tensor runs in place, distinct tensors run, any
// other overlap, or in place without the declaration, is refused with the
// reason. Host only: no GPU, no compile.
//
//===----------------------------------------------------------------------===//

#include "runtime/Status.h"
#include "runtime/TensorBinding.h"

#include "dsl/Parser.h"
#include "tests/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

using namespace bitfold;
using namespace bitfold::runtime;

namespace {

std::string zooText(const char *name) {
  std::ifstream f(std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo/" + name +
                  ".bfk");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::shared_ptr<const dsl::KernelDef> parse(const std::string &text) {
  auto def = dsl::parseKernel(text);
  EXPECT_TRUE(bool(def)) << llvm::toString(def.takeError());
  return def ? *def : nullptr;
}

using bitfold::testing::Tensor;

const DLDataType kF32{kDLFloat, 32, 1};

bitfold_status bind(const dsl::KernelDef &def, std::vector<Tensor *> ts,
                    std::string &msg, LaunchBinding *out = nullptr) {
  std::vector<const DLTensor *> dl;
  for (Tensor *t : ts)
    dl.push_back(t->get());
  LaunchBinding b;
  bitfold_status s =
      takeStatus(bindTensors(def, dl.data(), int(dl.size()), b), msg);
  if (out)
    *out = b;
  return s;
}

TEST(RowOutputBinding, PerRowOutputsBindAsOneValuePerRow) {
  auto def = parse(zooText("layer_norm_stats"));
  ASSERT_TRUE(def);
  Tensor x{{4, 6, 1024}, {}, 0x1000000}, y{{4, 6, 1024}, {}, 0x2000000};
  Tensor mean{{24}, {}, 0x3000000, kF32};
  Tensor rstd{{4, 6, 1}, {}, 0x4000000, kF32}; // torch's [..., 1] statistics
  std::string msg;
  LaunchBinding b;
  ASSERT_EQ(bind(*def, {&x, &y, &mean, &rstd}, msg, &b), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.groupRows[0], 24);
  EXPECT_EQ(b.views[0][2].rows, 24);
  EXPECT_EQ(b.views[0][2].rowStride, 1);
  EXPECT_EQ(b.views[0][3].lastOffset, 23);
}

TEST(RowOutputBinding, APerRowOutputMayBeAColumnOfAWiderTensor) {
  auto def = parse(zooText("layer_norm_stats"));
  ASSERT_TRUE(def);
  Tensor x{{24, 1024}, {}, 0x1000000}, y{{24, 1024}, {}, 0x2000000};
  // mean and rstd interleaved in one [24, 2] tensor.
  Tensor mean{{24}, {2}, 0x3000000, kF32}, rstd{{24}, {2}, 0x3000004, kF32};
  std::string msg;
  LaunchBinding b;
  ASSERT_EQ(bind(*def, {&x, &y, &mean, &rstd}, msg, &b), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.views[0][2].rowStride, 2);
  EXPECT_EQ(b.views[0][2].lastOffset, 46);
}

TEST(RowOutputBinding, APerRowOutputOfAnotherLengthIsRefusedWithTheShapes) {
  auto def = parse(zooText("layer_norm_stats"));
  ASSERT_TRUE(def);
  Tensor x{{24, 1024}, {}, 0x1000000}, y{{24, 1024}, {}, 0x2000000};
  Tensor mean{{23}, {}, 0x3000000, kF32}, rstd{{24}, {}, 0x4000000, kF32};
  std::string msg;
  EXPECT_EQ(bind(*def, {&x, &y, &mean, &rstd}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("must hold one value per row of 'x' (24 values"),
            std::string::npos)
      << msg;
}

TEST(RowOutputBinding, PerRowValuesThatDoNotLieOneStrideApartAreRefused) {
  auto def = parse(zooText("layer_norm_stats"));
  ASSERT_TRUE(def);
  Tensor x{{4, 6, 1024}, {}, 0x1000000}, y{{4, 6, 1024}, {}, 0x2000000};
  Tensor mean{{4, 6}, {1, 4}, 0x3000000, kF32}; // a transposed view
  Tensor rstd{{4, 6}, {}, 0x4000000, kF32};
  std::string msg;
  EXPECT_EQ(bind(*def, {&x, &y, &mean, &rstd}, msg), BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("its values must lie one stride apart"),
            std::string::npos)
      << msg;
}

TEST(RowOutputBinding, APerRowKOutputBindsAsRowsOfKContiguousValues) {
  auto def = parse(zooText("layer_norm_stats2"));
  ASSERT_TRUE(def);
  Tensor x{{4, 6, 1024}, {}, 0x1000000}, y{{4, 6, 1024}, {}, 0x2000000};
  Tensor stats{{4, 6, 2}, {}, 0x3000000, kF32};
  std::string msg;
  LaunchBinding b;
  ASSERT_EQ(bind(*def, {&x, &y, &stats}, msg, &b), BITFOLD_SUCCESS) << msg;
  EXPECT_EQ(b.views[0][2].rows, 24);
  EXPECT_EQ(b.views[0][2].rowStride, 2);
  EXPECT_EQ(b.views[0][2].lastOffset, 47);
  // Two columns of a wider [24, 3] tensor: rows 3 apart.
  Tensor wide{{24, 2}, {3, 1}, 0x3000000, kF32};
  Tensor x2{{24, 1024}, {}, 0x1000000}, y2{{24, 1024}, {}, 0x2000000};
  ASSERT_EQ(bind(*def, {&x2, &y2, &wide}, msg, &b), BITFOLD_SUCCESS) << msg;
  EXPECT_EQ(b.views[0][2].rowStride, 3);
  EXPECT_EQ(b.views[0][2].lastOffset, 70);
}

TEST(RowOutputBinding, APerRowKOutputOfAnotherShapeIsRefusedWithTheShapes) {
  auto def = parse(zooText("layer_norm_stats2"));
  ASSERT_TRUE(def);
  Tensor x{{24, 1024}, {}, 0x1000000}, y{{24, 1024}, {}, 0x2000000};
  Tensor flat{{48}, {}, 0x3000000, kF32}; // no last dim of 2
  std::string msg;
  EXPECT_EQ(bind(*def, {&x, &y, &flat}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("is per_row(2): its last dim holds a row's 2 values; "
                     "found shape (48,)"),
            std::string::npos)
      << msg;
  Tensor fewer{{23, 2}, {}, 0x3000000, kF32};
  EXPECT_EQ(bind(*def, {&x, &y, &fewer}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("is per_row(2): it holds 2 values per row of 'x' (24 "
                     "rows"),
            std::string::npos)
      << msg;
}

TEST(RowOutputBinding, APerRowKOutputNeedsContiguousNonOverlappingRows) {
  auto def = parse(zooText("layer_norm_stats2"));
  ASSERT_TRUE(def);
  Tensor x{{24, 1024}, {}, 0x1000000}, y{{24, 1024}, {}, 0x2000000};
  Tensor transposed{{24, 2}, {1, 24}, 0x3000000, kF32};
  std::string msg;
  EXPECT_EQ(bind(*def, {&x, &y, &transposed}, msg), BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("a row's 2 values are contiguous (last stride 1)"),
            std::string::npos)
      << msg;
  Tensor overlapping{{24, 2}, {1, 1}, 0x3000000, kF32};
  EXPECT_EQ(bind(*def, {&x, &y, &overlapping}, msg), BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("it needs a stride of at least 2"), std::string::npos)
      << msg;
}

TEST(RowOutputBinding, APerRowOutputOfOneValueRefusesARowsByTwoTensor) {
  auto def = parse(zooText("layer_norm_stats"));
  ASSERT_TRUE(def);
  Tensor x{{24, 1024}, {}, 0x1000000}, y{{24, 1024}, {}, 0x2000000};
  Tensor mean{{24, 2}, {}, 0x3000000, kF32}, rstd{{24}, {}, 0x4000000, kF32};
  std::string msg;
  EXPECT_EQ(bind(*def, {&x, &y, &mean, &rstd}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("must hold one value per row of 'x' (24 values"),
            std::string::npos)
      << msg;
}

TEST(RowOutputBinding, APerRowInt32InputBindsAsOneTargetPerRow) {
  auto def = parse(zooText("cross_entropy"));
  ASSERT_TRUE(def);
  const DLDataType i32{kDLInt, 32, 1}, i64{kDLInt, 64, 1};
  Tensor x{{4, 6, 8192}, {}, 0x1000000}, loss{{4, 6}, {}, 0x2000000};
  Tensor target{{4, 6}, {}, 0x3000000, i32};
  std::string msg;
  LaunchBinding b;
  ASSERT_EQ(bind(*def, {&x, &target, &loss}, msg, &b), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.views[0][1].rows, 24);
  EXPECT_EQ(b.views[0][1].rowStride, 1);
  EXPECT_EQ(b.views[0][1].lastOffset, 23);
  // torch's int64 targets are refused by dtype (the caller converts).
  Tensor wide{{4, 6}, {}, 0x3000000, i64};
  EXPECT_EQ(bind(*def, {&x, &wide, &loss}, msg), BITFOLD_ERROR_DTYPE);
  EXPECT_NE(msg.find("expected int32, found int64"), std::string::npos) << msg;
  Tensor shortT{{23}, {}, 0x3000000, i32};
  EXPECT_EQ(bind(*def, {&x, &shortT, &loss}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("must hold one value per row of 'x' (24 values"),
            std::string::npos)
      << msg;
}

TEST(RowOutputBinding, AVectorInputSetsItsDimFromItsLength) {
  auto def = parse(zooText("group_norm_affine"));
  ASSERT_TRUE(def);
  Tensor x{{64, 1024}, {}, 0x1000000}, y{{64, 1024}, {}, 0x2000000};
  Tensor gamma{{96}, {}, 0x3000000}, beta{{96}, {}, 0x4000000};
  std::string msg;
  LaunchBinding b;
  ASSERT_EQ(bind(*def, {&x, &gamma, &beta, &y}, msg, &b), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.dims[0], 96);
  EXPECT_EQ(b.views[0][1].lastOffset, 95);
  Tensor shortBeta{{48}, {}, 0x4000000};
  EXPECT_EQ(bind(*def, {&x, &gamma, &shortBeta, &y}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("has 48 values but C = 96"), std::string::npos) << msg;
  Tensor square{{8, 12}, {}, 0x3000000};
  EXPECT_EQ(bind(*def, {&x, &square, &beta, &y}, msg), BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("is a vector(C) input: one dimension"), std::string::npos)
      << msg;
}

struct AddNorm {
  Tensor x{{8, 512}, {}, 0x1000000}, r{{8, 512}, {}, 0x2000000};
  Tensor w{{512}, {}, 0x3000000};
  Tensor h{{8, 512}, {}, 0x4000000}, y{{8, 512}, {}, 0x5000000};
};

TEST(RowOutputBinding, ADeclaredInPlaceKernelRunsInPlaceAndOutOfPlace) {
  auto def = parse(zooText("fused_add_rms_norm"));
  ASSERT_TRUE(def);
  AddNorm t;
  std::string msg;
  EXPECT_EQ(bind(*def, {&t.x, &t.r, &t.w, &t.h, &t.y}, msg), BITFOLD_SUCCESS)
      << msg;
  Tensor h2 = t.r, y2 = t.x; // the inputs themselves
  EXPECT_EQ(bind(*def, {&t.x, &t.r, &t.w, &h2, &y2}, msg), BITFOLD_SUCCESS)
      << msg;
}

TEST(RowOutputBinding, AliasingThatIsNotExactOrNotDeclaredIsRefused) {
  std::string text = zooText("fused_add_rms_norm");
  auto def = parse(text);
  ASSERT_TRUE(def);
  AddNorm t;
  std::string msg;
  Tensor shifted = t.x; // x one row on: overlaps x without being x
  shifted.address += 512 * 2;
  shifted.shape = {7, 512};
  Tensor x7 = t.x, r7 = t.r, h7 = t.h;
  x7.shape = r7.shape = h7.shape = {7, 512};
  EXPECT_EQ(bind(*def, {&x7, &r7, &t.w, &h7, &shifted}, msg),
            BITFOLD_ERROR_UNSUPPORTED);
  EXPECT_NE(msg.find("overlaps tensor 0 ('x') in memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("only exactly"), std::string::npos) << msg;
  // y over residual: an exact overlap the program does not declare.
  Tensor y2 = t.r;
  EXPECT_EQ(bind(*def, {&t.x, &t.r, &t.w, &t.h, &y2}, msg),
            BITFOLD_ERROR_UNSUPPORTED);
  EXPECT_NE(msg.find("runs in place only where the program declares it"),
            std::string::npos)
      << msg;
}

} // namespace
