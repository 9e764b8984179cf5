//===- tests/dsl/ChannelsFirstTest.cpp - Folds over a strided axis --------===//
//
// Channels-first programs (dsl::Layout::ChannelsFirst): aten's order for a
// reduction over a non-innermost dim (folds::aten_reduce_outer,
// docs/aten-reduce.md section 9) against the launch shapes the H200 probe
// confirmed (bench/results/2026-12-01-s3-chanfirst-probe.md) and a literal
// transcription of Reduce.cuh's outer path run on NCS data by the
// interpreter; the layout in the verifier and the text format.
//
//===----------------------------------------------------------------------===//

#include "dsl/Folds.h"
#include "dsl/Interp.h"
#include "dsl/Parser.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

using namespace bitfold;
using namespace bitfold::dsl;

namespace {

struct ProbedLaunch {
  int64_t cols, outputs;
  int outputVec, lanes, ctas;
};

/// (C, N*S, output_vec_size) -> block.y lanes per output and CTAs, for
/// every case of the H200 probe whose bits matched the emulator (S > 1).
const ProbedLaunch kProbed[] = {
    {2, 6, 2, 1, 1},
    {2, 15, 1, 1, 1},
    {2, 16, 4, 1, 1},
    {2, 32, 4, 1, 1},
    {2, 128, 1, 1, 1},
    {2, 128, 4, 1, 1},
    {2, 256, 4, 1, 1},
    {2, 3120, 4, 1, 1},
    {2, 6240, 4, 1, 1},
    {2, 24960, 1, 1, 1},
    {2, 24960, 4, 1, 1},
    {7, 6, 2, 1, 1},
    {7, 15, 1, 1, 1},
    {7, 16, 4, 1, 1},
    {7, 32, 4, 1, 1},
    {7, 128, 1, 1, 1},
    {7, 128, 4, 1, 1},
    {7, 256, 4, 1, 1},
    {7, 3120, 4, 1, 1},
    {7, 6240, 4, 1, 1},
    {7, 24960, 1, 1, 1},
    {7, 24960, 4, 1, 1},
    {12, 6, 2, 1, 1},
    {12, 15, 1, 1, 1},
    {12, 16, 4, 1, 1},
    {12, 32, 4, 1, 1},
    {12, 128, 1, 1, 1},
    {12, 128, 4, 1, 1},
    {12, 256, 4, 1, 1},
    {12, 3120, 4, 1, 1},
    {12, 6240, 4, 1, 1},
    {12, 24960, 1, 1, 1},
    {12, 24960, 4, 1, 1},
    {12, 1597440, 4, 1, 1},
    {33, 6, 2, 1, 1},
    {33, 15, 1, 1, 1},
    {33, 16, 4, 1, 1},
    {33, 32, 4, 1, 1},
    {33, 128, 1, 1, 1},
    {33, 128, 4, 1, 1},
    {33, 256, 4, 1, 1},
    {33, 3120, 4, 1, 1},
    {33, 6240, 4, 1, 1},
    {33, 24960, 1, 1, 1},
    {33, 24960, 4, 1, 1},
    {96, 6, 2, 1, 1},
    {96, 15, 1, 1, 1},
    {96, 16, 4, 1, 1},
    {96, 32, 4, 1, 1},
    {96, 128, 1, 1, 1},
    {96, 128, 4, 4, 1},
    {96, 256, 4, 4, 1},
    {96, 3120, 4, 4, 1},
    {96, 6240, 4, 4, 1},
    {96, 24960, 1, 1, 1},
    {96, 24960, 4, 4, 1},
    {96, 1597440, 4, 4, 1},
    {129, 6, 2, 1, 1},
    {129, 15, 1, 1, 1},
    {129, 16, 4, 1, 1},
    {129, 32, 4, 1, 1},
    {129, 128, 1, 1, 1},
    {129, 128, 4, 4, 1},
    {129, 256, 4, 4, 1},
    {129, 3120, 4, 4, 1},
    {129, 6240, 4, 4, 1},
    {129, 24960, 1, 1, 1},
    {129, 24960, 4, 4, 1},
    {192, 6, 2, 1, 1},
    {192, 15, 1, 1, 1},
    {192, 16, 4, 1, 1},
    {192, 32, 4, 1, 1},
    {192, 128, 1, 1, 1},
    {192, 128, 4, 4, 1},
    {192, 256, 4, 4, 1},
    {192, 3120, 4, 4, 1},
    {192, 6240, 4, 4, 1},
    {192, 24960, 1, 1, 1},
    {192, 24960, 4, 4, 1},
    {192, 399360, 4, 4, 1},
    {257, 6, 2, 128, 1},
    {257, 15, 1, 64, 1},
    {257, 16, 4, 32, 1},
    {257, 32, 4, 16, 1},
    {257, 128, 1, 16, 1},
    {257, 128, 4, 4, 1},
    {257, 256, 4, 4, 1},
    {257, 3120, 4, 4, 1},
    {257, 6240, 4, 4, 1},
    {257, 24960, 1, 16, 1},
    {257, 24960, 4, 4, 1},
    {384, 6, 2, 128, 1},
    {384, 15, 1, 64, 1},
    {384, 16, 4, 32, 1},
    {384, 32, 4, 16, 1},
    {384, 128, 1, 16, 1},
    {384, 128, 4, 4, 1},
    {384, 256, 4, 4, 1},
    {384, 3120, 4, 4, 1},
    {384, 6240, 4, 4, 1},
    {384, 24960, 1, 16, 1},
    {384, 24960, 4, 4, 1},
    {384, 99840, 4, 4, 1},
    {512, 6, 2, 128, 1},
    {512, 15, 1, 64, 1},
    {512, 16, 4, 32, 1},
    {512, 32, 4, 16, 1},
    {512, 128, 1, 16, 1},
    {512, 128, 4, 4, 1},
    {512, 256, 4, 4, 1},
    {512, 3120, 4, 4, 1},
    {512, 6240, 4, 4, 1},
    {512, 24960, 1, 16, 1},
    {512, 24960, 4, 4, 1},
    {1023, 6, 2, 128, 1},
    {1023, 15, 1, 64, 1},
    {1023, 16, 4, 32, 1},
    {1023, 32, 4, 16, 1},
    {1023, 128, 1, 16, 1},
    {1023, 128, 4, 4, 16},
    {1023, 256, 4, 4, 16},
    {1023, 3120, 4, 4, 16},
    {1023, 6240, 4, 4, 16},
    {1023, 24960, 1, 16, 1},
    {1023, 24960, 4, 4, 11},
    {1024, 6, 2, 128, 1},
    {1024, 15, 1, 64, 1},
    {1024, 16, 4, 32, 1},
    {1024, 32, 4, 16, 1},
    {1024, 128, 1, 16, 1},
    {1024, 128, 4, 4, 16},
    {1024, 256, 4, 4, 16},
    {1024, 1560, 4, 4, 16},
    {1024, 3120, 4, 4, 16},
    {1024, 6240, 4, 4, 16},
    {1024, 24960, 1, 16, 1},
    {1024, 24960, 4, 4, 11}
};

TEST(AtenReduceOuter, ConfigMatchesEveryProbedLaunch) {
  for (const ProbedLaunch &p : kProbed) {
    folds::AtenReduceConfig c =
        folds::aten_reduce_outer_config(p.cols, p.outputs, p.outputVec);
    EXPECT_EQ(c.blockWidth, 1);
    EXPECT_EQ(c.blockHeight, p.lanes)
        << "C " << p.cols << " outputs " << p.outputs << " ovs " << p.outputVec;
    EXPECT_EQ(c.ctas, p.ctas)
        << "C " << p.cols << " outputs " << p.outputs << " ovs " << p.outputVec;
  }
}

TEST(AtenReduceOuter, OneOrderServesItsWholeRowRange) {
  for (int ovs : {1, 2, 4})
    for (int64_t C = 2; C <= 1100; ++C) {
      FoldOrder o = folds::aten_reduce_outer(C, int64_t(1) << 30, ovs,
                                             folds::aten_norm_kernel(DType::F32));
      ASSERT_EQ(o.ctas, 1);
      ASSERT_LT(o.minRows, o.maxRows) << "C " << C << " ovs " << ovs;
      for (int64_t R : {o.minRows, o.minRows + ovs, 2 * o.minRows,
                        o.minRows * 7 + ovs, int64_t(1) << 24}) {
        folds::AtenReduceConfig c = folds::aten_reduce_outer_config(C, R, ovs);
        EXPECT_EQ(c.blockHeight, o.threads) << "C " << C << " R " << R;
        EXPECT_EQ(c.ctas, 1) << "C " << C << " R " << R;
      }
      // Below a CTA-split range the order is built for exactly one count.
      if (o.minRows > 32 * ovs) {
        FoldOrder below = folds::aten_reduce_outer(
            C, o.minRows - ovs, ovs, folds::aten_norm_kernel(DType::F32));
        EXPECT_EQ(below.minRows, below.maxRows);
      }
    }
}

TEST(AtenReduceOuter, BelowThirtyTwoVectorsOfPixelsTheOrderDependsOnTheClassOnly) {
  // Images of fewer than 32 * ovs pixels: block.x is lastPow2(R / ovs)
  // threads, so one order per class serves every count in it (where the
  // class's ends agree), and the class's range says which.
  int ranged = 0, exact = 0;
  for (int ovs : {1, 2, 4})
    for (int64_t C = 2; C <= 1100; C += (C < 64 ? 1 : 7))
      for (int64_t R = ovs; R < 32 * ovs; R += ovs) {
        const int64_t cls = folds::aten_reduce_outer_row_class(R, ovs);
        ASSERT_LE(cls, R);
        ASSERT_GT(2 * cls, R);
        FoldOrder o = folds::aten_reduce_outer(C, cls, ovs,
                                               folds::aten_norm_kernel(DType::F32));
        ASSERT_EQ(o.minRows, cls) << "C " << C << " R " << R;
        if (o.maxRows == cls && R != cls)
          continue; // served by exactly its own count only
        ++(o.maxRows > cls ? ranged : exact);
        ASSERT_LE(R, o.maxRows);
        folds::AtenReduceConfig c = folds::aten_reduce_outer_config(C, R, ovs);
        EXPECT_EQ(c.blockHeight, o.threads) << "C " << C << " R " << R;
        EXPECT_EQ(c.ctas, o.ctas) << "C " << C << " R " << R;
      }
  EXPECT_GT(ranged, 1000); // almost every class is one order
  // The classes of the smallest images (R < 2 ovs) are single counts.
  EXPECT_GT(exact, 0);
}

/// Reduce.cuh's outer path for one output, thread by thread: block.y
/// thread y of CTA c folds elements y + bh*c, + L, ... into vt0
/// accumulators (thread_reduce_impl), block_y_reduce, then the last CTA's
/// global reduce (partials y, y + bh, ..., then block_y_reduce).
float transcribedOuter(const std::vector<float> &col, int64_t outputs,
                       int ovs, bool norm) {
  const int64_t C = int64_t(col.size());
  folds::AtenReduceConfig cfg = folds::aten_reduce_outer_config(C, outputs, ovs);
  const int bh = cfg.blockHeight, G = cfg.ctas, vt0 = 4;
  const int64_t stride = int64_t(bh) * G;
  auto reduce = [&](float acc, float v) {
    return norm ? std::fma(v, v, acc) : acc + v;
  };
  auto yTree = [&](float *v) {
    for (int o = bh / 2; o >= 1; o /= 2)
      for (int y = 0; y < o; ++y)
        v[y] = v[y] + v[y + o];
  };
  std::vector<float> partial(G);
  for (int c = 0; c < G; ++c) {
    std::vector<float> v(bh);
    for (int y = 0; y < bh; ++y) {
      float acc[4] = {};
      int64_t idx = y + int64_t(bh) * c;
      while (idx + (vt0 - 1) * stride < C) {
        for (int i = 0; i < vt0; ++i)
          acc[i] = reduce(acc[i], col[idx + i * stride]);
        idx += stride * vt0;
      }
      for (int i = 0; i < vt0 && idx < C; ++i, idx += stride)
        acc[i] = reduce(acc[i], col[idx]);
      v[y] = ((acc[0] + acc[1]) + acc[2]) + acc[3];
    }
    yTree(v.data());
    partial[c] = v[0];
  }
  if (G == 1)
    return partial[0];
  std::vector<float> g(bh, 0.0f);
  for (int y = 0; y < bh; ++y)
    for (int c = y; c < G; c += bh)
      g[y] = g[y] + partial[c];
  yTree(g.data());
  return g[0];
}

/// A channels-first program whose output (every column of pixel r) is the
/// fold's raw state over column r's C values.
std::shared_ptr<const KernelDef> accumulatorProgram(const FoldOrder &order,
                                                    bool norm) {
  RowProgram p("aten_reduce_outer_probe");
  Expr x = p.input("x", DType::F32, Layout::ChannelsFirst).row();
  State s = p.fold(x, order, norm ? folds::norm_two_aten() : folds::sum());
  p.output("y", DType::F32, Layout::ChannelsFirst, s[0]);
  llvm::Expected<std::shared_ptr<const KernelDef>> def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

/// The interpreter runs `o` (aten's order for N*S pixels, or for their
/// class) on N images of C x S random values: every pixel's state equals
/// the transcription's for N*S outputs, bit for bit.
void expectInterpreterMatchesTranscription(const FoldOrder &o, int64_t N,
                                           int64_t C, int64_t S,
                                           std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-8, 7);
  const int64_t R = N * S;
  const int ovs = folds::aten_output_vec_size(S);
  for (bool norm : {false, true}) {
    auto def = accumulatorProgram(o, norm);
    ASSERT_TRUE(def);
    std::vector<float> x(size_t(R * C)), y(x.size(), NAN);
    for (float &v : x)
      v = std::ldexp(normal(rng), exponent(rng));
    Binding b;
    b.cols = C;
    b.groupRows = {R};
    HostTensor tx{DType::F32, x.data(), R, C * S, S};
    HostTensor ty{DType::F32, y.data(), R, C * S, S};
    b.tensors = {{tx, ty}};
    ASSERT_FALSE(bool(interpret(*def, b))) << o.name;
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> col(C);
      for (int64_t c = 0; c < C; ++c)
        col[c] = x[size_t(tx.offset(r, c))];
      float want = transcribedOuter(col, R, ovs, norm);
      float got = y[size_t(ty.offset(r, 0))];
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
          << o.name << (norm ? " norm" : " sum") << " N " << N << " C " << C
          << " S " << S << " pixel " << r;
      for (int64_t c = 1; c < C; ++c) // every column of the pixel
        ASSERT_EQ(std::bit_cast<uint32_t>(y[size_t(ty.offset(r, c))]),
                  std::bit_cast<uint32_t>(got));
    }
  }
}

TEST(AtenReduceOuter, InterpreterOnNcsDataMatchesTheTranscription) {
  std::mt19937 rng(7);
  struct Case { int64_t N, C, S; };
  // Splits across block.y (C = 96, 384 at ovs 4; 384 at ovs 2, 1), one
  // thread per output (C = 12, odd S), CTA groups (C = 1024, S = 128).
  std::vector<Case> cases{Case{1, 96, 64},   Case{2, 12, 35},
                          Case{1, 384, 130},  Case{1, 384, 99},
                          Case{1, 1024, 128}, Case{3, 33, 24},
                          Case{1, 257, 40}};
  // Every width a rolled kernel serves (the Wan VAE's 96..384 and more),
  // at an even (ovs 4) and an odd (ovs 1) spatial size.
  for (int64_t C : {96, 160, 192, 256, 384, 512, 1000})
    for (int64_t S : {128, 129})
      cases.push_back(Case{1, C, S});
  for (Case k : cases) {
    const int ovs = folds::aten_output_vec_size(k.S);
    FoldOrder o = folds::aten_reduce_outer(k.C, k.N * k.S, ovs,
                                           folds::aten_norm_kernel(DType::F32));
    expectInterpreterMatchesTranscription(o, k.N, k.C, k.S, rng);
  }
}

TEST(AtenReduceOuter, SmallImagesFoldInTheOrderOfTheirClass) {
  // Below 32 * ovs pixels the order built for the class's smallest count
  // is aten's at every count of its range (block.y lanes 1 .. 256).
  std::mt19937 rng(11);
  int served = 0;
  for (int64_t C : {33, 96, 192, 256, 384, 1000})
    for (int64_t S : {2, 3, 4, 6, 8, 9, 12, 20, 36, 60, 100})
      for (int64_t N : {1, 2}) {
        const int ovs = folds::aten_output_vec_size(S);
        if (N * S >= 32 * ovs)
          continue;
        FoldOrder o = folds::aten_reduce_outer(
            C, folds::aten_reduce_outer_row_class(N * S, ovs), ovs,
            folds::aten_norm_kernel(DType::F32));
        if (N * S > o.maxRows)
          continue; // the class's ends disagree: its own count only
        ++served;
        expectInterpreterMatchesTranscription(o, N, C, S, rng);
      }
  EXPECT_GT(served, 60);
}

TEST(ChannelsFirst, TextRoundTripsWithTheLayoutAndOutputVector) {
  FoldOrder o = folds::aten_reduce_outer(96, int64_t(1) << 30, 4,
                                         folds::aten_norm_kernel(DType::BF16));
  auto def = accumulatorProgram(o, true);
  ASSERT_TRUE(def);
  EXPECT_NE(def->canonicalText.find("channels_first"), std::string::npos);
  EXPECT_NE(def->canonicalText.find(" outvec 4"), std::string::npos)
      << def->canonicalText;
  auto back = parseKernel(def->canonicalText);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ((*back)->canonicalText, def->canonicalText);
  EXPECT_EQ((*back)->folds[0].order, o);
}

TEST(ChannelsFirst, VerifierRefusesMixedLayoutsAndMisplacedOrders) {
  FoldOrder outer = folds::aten_reduce_outer(96, int64_t(1) << 30, 4,
                                             folds::aten_norm_kernel(DType::BF16));
  { // a row-major per-element operand among channels-first ones
    RowProgram p("mixed");
    Expr x = p.input("x", DType::F32, Layout::ChannelsFirst).row();
    Expr h = p.input("h", DType::F32, Layout::RowMajor).row();
    State s = p.fold(x, outer, folds::sum());
    p.output("y", DType::F32, Layout::ChannelsFirst, s[0] + h);
    auto def = p.build();
    ASSERT_FALSE(bool(def));
    EXPECT_NE(llvm::toString(def.takeError()).find("rows must be the same "
                                                   "pixels"),
              std::string::npos);
  }
  { // a strided-axis order in a row-major program
    RowProgram p("rowmajor_outer");
    Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
    State s = p.fold(x, outer, folds::sum());
    p.output("y", DType::F32, Layout::RowMajor, s[0]);
    auto def = p.build();
    ASSERT_FALSE(bool(def));
    EXPECT_NE(llvm::toString(def.takeError()).find("has none"),
              std::string::npos);
  }
  { // a row-axis order in a channels-first program
    RowProgram p("chanfirst_inner");
    Expr x = p.input("x", DType::F32, Layout::ChannelsFirst).row();
    State s = p.fold(x, folds::aten_reduce(96, 16,
                                           folds::aten_norm_kernel(DType::F32)),
                     folds::sum());
    p.output("y", DType::F32, Layout::ChannelsFirst, s[0]);
    auto def = p.build();
    ASSERT_FALSE(bool(def));
    EXPECT_NE(llvm::toString(def.takeError()).find("needs an outvec"),
              std::string::npos);
  }
}

TEST(ChannelsFirst, AnElementwiseProgramWithChannelsLastOutputsMayReadImages) {
  // A channels-last conv output plus a contiguous residual: the program
  // runs row plans over the outputs' pixels and reads h S apart. Only
  // inputs may be channels-first there, and only without folds.
  auto mixed = [](Layout out, Layout out2, bool fold) {
    RowProgram p("cl_plus_images");
    Expr x = p.input("x", DType::F32, Layout::ChannelsLast).row();
    Expr h = p.input("h", DType::F32, Layout::ChannelsFirst).row();
    Expr v = x + h;
    if (fold)
      v = v + p.fold(x, folds::warp_butterfly(1), folds::sum())[0];
    p.output("y", DType::F32, out, v);
    if (out2 != Layout::RowMajor)
      p.output("y2", DType::F32, out2, v);
    return p.build();
  };
  auto ok = mixed(Layout::ChannelsLast, Layout::RowMajor, false);
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  EXPECT_FALSE(isChannelsFirst(**ok));
  auto errorOf = [](auto d) {
    return d ? std::string("built") : llvm::toString(d.takeError());
  };
  EXPECT_NE(errorOf(mixed(Layout::ChannelsLast, Layout::ChannelsFirst, false))
                .find("output 'y2' is channels_first"),
            std::string::npos);
  EXPECT_NE(errorOf(mixed(Layout::ChannelsLast, Layout::RowMajor, true))
                .find("rows must be the same pixels"),
            std::string::npos);
  // A channels-first output makes the program channels-first, as before.
  auto cf = mixed(Layout::ChannelsFirst, Layout::RowMajor, false);
  EXPECT_NE(errorOf(std::move(cf)).find("operand 'x' is channels_last"),
            std::string::npos);
}

TEST(ChannelsFirst, InterpreterRefusesAViewWithoutTheSpatialSize) {
  FoldOrder o = folds::aten_reduce_outer(12, 64, 4,
                                         folds::aten_norm_kernel(DType::F32));
  auto def = accumulatorProgram(o, false);
  ASSERT_TRUE(def);
  std::vector<float> x(64 * 12), y(64 * 12);
  Binding b;
  b.cols = 12;
  b.groupRows = {64};
  b.tensors = {{HostTensor{DType::F32, x.data(), 64, 12},
                HostTensor{DType::F32, y.data(), 64, 12}}};
  llvm::Error e = interpret(*def, b);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("the spatial size S"),
            std::string::npos);
}

} // namespace
