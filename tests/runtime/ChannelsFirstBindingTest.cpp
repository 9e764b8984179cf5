//===- tests/runtime/ChannelsFirstBindingTest.cpp - NC[D]HW launches ------===//
//
// What the binding decides for channels-first kernels (wan_rmsnorm_silu and
// conv_bias with layout=channels_first): dense images of C x S (contiguous
// NC[D]HW, or frames-major) bind as pixel rows whose C elements lie S
// apart, each operand with its own S (LaunchBinding::oneSpatial where all
// are one); every other stride pattern
// (permuted, channels-last, sliced, expanded, overlapping, negative), one
// pixel per image, images of different sizes, a misaligned x, an S whose
// output_vec_size is not the order's, an output over its input: refused with
// a status the caller falls back on. Host only: no GPU, no compile.
//
//===----------------------------------------------------------------------===//

#include "runtime/Status.h"
#include "runtime/TensorBinding.h"
#include "templates/Registry.h"

#include "TemplateDef.h"
#include "tests/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <vector>

using namespace bitfold;
using namespace bitfold::runtime;

namespace {

std::shared_ptr<const dsl::KernelDef> build(const char *name,
                                            const char *params, int64_t C) {
  return bitfold::testutil::buildTemplate(name, params, C);
}

using bitfold::testing::Tensor;

/// conv_bias (x, bias, y) with x as given and y dense at its own address.
bitfold_status bindConv(Tensor x, std::string *msg = nullptr,
                        LaunchBinding *out = nullptr) {
  auto def = build("conv_bias", "layout=channels_first", x.shape[1]);
  Tensor bias{{x.shape[1]}, {}, 0x7000000};
  Tensor y{x.shape, {}, 0x9000000};
  const DLTensor *ts[] = {x.get(), bias.get(), y.get()};
  LaunchBinding b;
  std::string m;
  bitfold_status s = takeStatus(bindTensors(*def, ts, 3, b), m);
  if (msg)
    *msg = m;
  if (out)
    *out = b;
  return s;
}

TEST(ChannelsFirstBinding, DenseNcdhwBindsPixelRowsWithTheSpatialStride) {
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(bindConv(Tensor{{2, 96, 4, 6, 8}, {}, 0x1000000}, &msg, &b),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.cols, 96);
  EXPECT_EQ(b.groupRows[0], 2 * 4 * 6 * 8);
  EXPECT_EQ(b.views[0][0].spatial, 4 * 6 * 8);
  EXPECT_EQ(b.views[0][0].rowStride, 4 * 6 * 8);
  EXPECT_EQ(b.views[0][1].spatial, 0); // the per-channel bias
  EXPECT_TRUE(b.oneSpatial);              // x and y: one S
  EXPECT_EQ(b.maxElementOffset, 2 * 96 * 4 * 6 * 8 - 1);
  // Explicit strides that say the same, and size-1 dims with any stride.
  EXPECT_EQ(bindConv(Tensor{{1, 8, 1, 4, 4}, {999, 16, 5, 4, 1}, 0x1000000}),
            BITFOLD_SUCCESS);
}

TEST(ChannelsFirstBinding, EveryOtherStridePatternIsRefused) {
  const std::vector<int64_t> shape{2, 8, 3, 4, 5};
  struct Case {
    const char *what;
    std::vector<int64_t> strides;
  };
  for (const Case &c : {
           Case{"channels-last", {480, 1, 160, 40, 8}},
           Case{"H and W swapped", {480, 60, 20, 1, 4}},
           Case{"sliced width (padded rows)", {768, 96, 32, 8, 1}},
           Case{"expanded batch", {0, 60, 20, 5, 1}},
           Case{"expanded channels", {60, 0, 20, 5, 1}},
           Case{"overlapping channels", {480, 30, 20, 5, 1}},
           Case{"negative width", {480, 60, 20, 5, -1}},
           Case{"negative channels", {480, -60, 20, 5, 1}},
       }) {
    std::string msg;
    EXPECT_EQ(bindConv(Tensor{shape, c.strides, 0x1000000}, &msg),
              BITFOLD_ERROR_STRIDE)
        << c.what << ": " << msg;
  }
}

TEST(ChannelsFirstBinding, FramesMajorTensorsBindAsImagesOfHW) {
  // (N, C, T, H, W) stored as a contiguous (N, T, C, H, W): the N*T images
  // are C x H*W, so S = H*W and pixel r starts at (r / S) * C * S + r % S.
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(bindConv(Tensor{{2, 8, 3, 4, 5}, {480, 20, 160, 5, 1}, 0x1000000},
                     &msg, &b),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.groupRows[0], 2 * 3 * 4 * 5);
  EXPECT_EQ(b.views[0][0].spatial, 4 * 5);
  EXPECT_EQ(b.views[0][2].spatial, 3 * 4 * 5); // y is contiguous NCDHW
  EXPECT_FALSE(b.oneSpatial);
  EXPECT_EQ(b.maxElementOffset, 2 * 8 * 3 * 4 * 5 - 1);
  // Images of C x W (rows of H outer too): the same rule, S = W.
  ASSERT_EQ(bindConv(Tensor{{2, 8, 3, 4, 5}, {480, 5, 160, 40, 1}, 0x1000000},
                     &msg, &b),
            BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.views[0][0].spatial, 5);
}

TEST(ChannelsFirstBinding, AResidualInAnotherImageLayoutBindsWithItsOwnS) {
  // The Wan VAE's residual blocks: x from a conv (contiguous NCDHW), the
  // residual frames-major. Each operand keeps its own S.
  auto def = build("conv_bias", "layout=channels_first,residual=1", 8);
  Tensor x{{1, 8, 4, 6, 6}, {}, 0x1000000}, bias{{8}, {}, 0x7000000},
      h{{1, 8, 4, 6, 6}, {1152, 36, 288, 6, 1}, 0x3000000},
      y{{1, 8, 4, 6, 6}, {}, 0x9000000};
  const DLTensor *ts[] = {x.get(), bias.get(), h.get(), y.get()};
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(takeStatus(bindTensors(*def, ts, 4, b), msg), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.views[0][0].spatial, 4 * 6 * 6);
  EXPECT_EQ(b.views[0][2].spatial, 6 * 6);
  // Not one S: the launch takes the kernel that reads each operand's own.
  EXPECT_FALSE(b.oneSpatial);
  Tensor hDense{{1, 8, 4, 6, 6}, {}, 0x3000000};
  const DLTensor *dense[] = {x.get(), bias.get(), hDense.get(), y.get()};
  ASSERT_EQ(takeStatus(bindTensors(*def, dense, 4, b), msg), BITFOLD_SUCCESS)
      << msg;
  EXPECT_TRUE(b.oneSpatial);
  // The same pixel count in another shape is not the same pixels.
  Tensor h2{{1, 8, 2, 12, 6}, {}, 0x3000000};
  const DLTensor *ts2[] = {x.get(), bias.get(), h2.get(), y.get()};
  EXPECT_EQ(takeStatus(bindTensors(*def, ts2, 4, b), msg), BITFOLD_ERROR_SHAPE)
      << msg;
  EXPECT_NE(msg.find("share their shape"), std::string::npos) << msg;
}

TEST(ChannelsFirstBinding, AContiguousResidualUnderAChannelsLastXBinds) {
  // The Wan VAE in channels_last_3d: x and y from a conv (channels-last),
  // the shortcut contiguous NCDHW (one frame here) or frames-major. x and
  // y bind as pixel rows of C, h with its own S; the same pixels only.
  auto def = build("conv_bias", "residual=1,residual_layout=channels_first", 8);
  const std::vector<int64_t> cl{8 * 36, 1, 8 * 36, 8 * 6, 8};
  Tensor x{{1, 8, 1, 6, 6}, cl, 0x1000000}, bias{{8}, {}, 0x7000000},
      h{{1, 8, 1, 6, 6}, {}, 0x3000000}, y{{1, 8, 1, 6, 6}, cl, 0x9000000};
  const DLTensor *ts[] = {x.get(), bias.get(), h.get(), y.get()};
  LaunchBinding b;
  std::string msg;
  ASSERT_EQ(takeStatus(bindTensors(*def, ts, 4, b), msg), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.groupRows[0], 36);
  EXPECT_EQ(b.views[0][0].spatial, 0);
  EXPECT_EQ(b.views[0][0].rowStride, 8);
  EXPECT_EQ(b.views[0][2].spatial, 36);
  const std::vector<int64_t> framesMajor{4 * 8 * 36, 36, 8 * 36, 6, 1};
  const std::vector<int64_t> cl4{4 * 8 * 36, 1, 8 * 36, 8 * 6, 8};
  Tensor x4{{1, 8, 4, 6, 6}, cl4, 0x1000000}, y4{{1, 8, 4, 6, 6}, cl4, 0x9000000},
      hf{{1, 8, 4, 6, 6}, framesMajor, 0x3000000};
  const DLTensor *ts4[] = {x4.get(), bias.get(), hf.get(), y4.get()};
  ASSERT_EQ(takeStatus(bindTensors(*def, ts4, 4, b), msg), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(b.views[0][2].spatial, 36);
  // The same pixel count in another shape is not the same pixels.
  Tensor h2{{1, 8, 4, 3, 12}, {}, 0x3000000};
  const DLTensor *ts2[] = {x4.get(), bias.get(), h2.get(), y4.get()};
  EXPECT_EQ(takeStatus(bindTensors(*def, ts2, 4, b), msg), BITFOLD_ERROR_SHAPE)
      << msg;
  EXPECT_NE(msg.find("share their shape"), std::string::npos) << msg;
  // A channels-last residual is the other kernel's (residual_layout=same).
  const DLTensor *ts3[] = {x4.get(), bias.get(), x4.get(), y4.get()};
  EXPECT_EQ(takeStatus(bindTensors(*def, ts3, 4, b), msg), BITFOLD_ERROR_STRIDE)
      << msg;
}

TEST(ChannelsFirstBinding, OnePixelPerImageIsLeftToTheChannelsLastKernel) {
  std::string msg;
  EXPECT_EQ(bindConv(Tensor{{4, 96, 1, 1, 1}, {}, 0x1000000}, &msg),
            BITFOLD_ERROR_STRIDE);
  EXPECT_NE(msg.find("channels-last"), std::string::npos) << msg;
}

TEST(ChannelsFirstBinding, ImagesOfDifferentSizesAreRefused) {
  auto def = build("conv_bias", "layout=channels_first", 8);
  Tensor x{{1, 8, 4, 4, 4}, {}, 0x1000000}, bias{{8}, {}, 0x7000000},
      y{{2, 8, 2, 4, 4}, {}, 0x9000000};
  const DLTensor *ts[] = {x.get(), bias.get(), y.get()};
  LaunchBinding b;
  std::string msg;
  EXPECT_EQ(takeStatus(bindTensors(*def, ts, 3, b), msg), BITFOLD_ERROR_SHAPE)
      << msg;
}

/// wan_rmsnorm_silu (x, gamma, y), form f32, no bias.
bitfold_status bindWan(const char *params, Tensor x, uintptr_t yAddress,
                       std::string &msg) {
  auto def = build("wan_rmsnorm_silu", params, x.shape[1]);
  Tensor gamma{{x.shape[1]}, {}, 0x7000000};
  Tensor y{x.shape, {}, yAddress};
  const DLTensor *ts[] = {x.get(), gamma.get(), y.get()};
  LaunchBinding b;
  return takeStatus(bindTensors(*def, ts, 3, b), msg);
}

TEST(ChannelsFirstBinding, WanBindsOnlyTheOutputVectorItsOrderWasBuiltFor) {
  const char *ov4 = "layout=channels_first,form=f32,bias=0";
  const char *ov2 = "layout=channels_first,form=f32,bias=0,outvec=2";
  std::string msg;
  EXPECT_EQ(bindWan(ov4, Tensor{{1, 96, 4, 8, 8}, {}, 0x1000000}, 0x9000000, msg),
            BITFOLD_SUCCESS)
      << msg;
  // S = 150: aten's output_vec_size is 2, not the order's 4.
  EXPECT_EQ(bindWan(ov4, Tensor{{1, 96, 2, 5, 15}, {}, 0x1000000}, 0x9000000, msg),
            BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("outvec=2"), std::string::npos) << msg;
  EXPECT_EQ(bindWan(ov2, Tensor{{1, 96, 1, 5, 14}, {}, 0x1000000}, 0x9000000, msg),
            BITFOLD_SUCCESS)
      << msg;
}

TEST(ChannelsFirstBinding, WanRefusesAMisalignedXAndFewPixels) {
  const char *p = "layout=channels_first,bias=0";
  std::string msg;
  // x one element off a 4-element boundary: aten's vector size would shrink.
  EXPECT_EQ(bindWan(p, Tensor{{1, 96, 4, 8, 8}, {}, 0x1000002}, 0x9000000, msg),
            BITFOLD_ERROR_ALIGNMENT);
  // 16 pixels: below the row range of the order for 32 * ovs pixels and
  // more (block.x is not a warp); their class has its own definition.
  EXPECT_EQ(bindWan(p, Tensor{{1, 96, 1, 4, 4}, {}, 0x1000000}, 0x9000000, msg),
            BITFOLD_ERROR_SHAPE);
}

TEST(ChannelsFirstBinding, ASmallImageBindsToTheDefinitionOfItsPixelClass) {
  auto desc = templates::Registry::global().lookup("wan_rmsnorm_silu");
  ASSERT_TRUE(bool(desc));
  auto values = (*desc)->parseParams("layout=channels_first,bias=0,outvec=4");
  ASSERT_TRUE(bool(values));
  // 16..31 pixels at ovs 4 are one class (block.x = 4 threads).
  EXPECT_EQ((*desc)->rowClass(*values, 20), 16);
  EXPECT_EQ((*desc)->rowClass(*values, 31), 16);
  EXPECT_EQ((*desc)->rowClass(*values, 128), 128);
  EXPECT_EQ((*desc)->rowClass(*values, 1 << 20), 128);
  auto def = (*desc)->definition(*values, 96, 20);
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  auto bind = [&](Tensor x, std::string &msg) {
    Tensor gamma{{96}, {}, 0x7000000};
    Tensor y{x.shape, {}, 0x9000000};
    const DLTensor *ts[] = {x.get(), gamma.get(), y.get()};
    LaunchBinding b;
    return takeStatus(bindTensors(**def, ts, 3, b), msg);
  };
  std::string msg;
  EXPECT_EQ(bind(Tensor{{1, 96, 1, 4, 4}, {}, 0x1000000}, msg), BITFOLD_SUCCESS)
      << msg;
  EXPECT_EQ(bind(Tensor{{1, 96, 1, 4, 7}, {}, 0x1000000}, msg), BITFOLD_SUCCESS)
      << msg;
  // 32 pixels are the next class: not this definition's order.
  EXPECT_EQ(bind(Tensor{{2, 96, 1, 4, 4}, {}, 0x1000000}, msg),
            BITFOLD_ERROR_SHAPE);
  EXPECT_NE(msg.find("rows"), std::string::npos) << msg;
}

TEST(ChannelsFirstBinding, WanOutputOverItsInputIsRefused) {
  std::string msg;
  EXPECT_EQ(bindWan("layout=channels_first,bias=0",
                    Tensor{{1, 96, 4, 8, 8}, {}, 0x1000000}, 0x1000000, msg),
            BITFOLD_ERROR_UNSUPPORTED)
      << msg;
}

} // namespace
