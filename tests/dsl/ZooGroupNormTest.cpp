//===- tests/dsl/ZooGroupNormTest.cpp - GroupNorm in aten's order ---------===//
//
// examples/zoo/group_norm.bfk in the interpreter against a C++
// transcription of aten's group_norm_kernel.cu (RowwiseMomentsCUDAKernel:
// 512 threads, WelfordOps, cuda_utils::BlockReduce; then the elementwise
// (x - mean) * rstd with mean and rstd read back from their bf16 tensors,
// or with gamma/beta: ComputeFusedParamsCUDAKernel's a, b per (n, c) and
// a * x + b), every output bit for bit.
//
//===----------------------------------------------------------------------===//

#include "dsl/Interp.h"
#include "dsl/Parser.h"
#include "tests/dsl/KernelTexts.h"

#include "gtest/gtest.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

using namespace bitfold;
using namespace bitfold::dsl;

namespace {

using KernelDefRef = std::shared_ptr<const KernelDef>;

/// WelfordData<float, int64_t> and WelfordOps's reduce and combine, with
/// nvcc's contractions (a*b + c -> fma).
struct Welford {
  float mean = 0, m2 = 0;
  int64_t n = 0;
  float nf = 0;
};

Welford reduce(Welford a, float x) {
  int64_t n = a.n + 1;
  float nf = float(n);
  float delta = x - a.mean;
  float mean = a.mean + delta / nf;
  return {mean, std::fma(delta, x - mean, a.m2), n, nf};
}

Welford combine(const Welford &a, const Welford &b) {
  if (a.nf == 0)
    return b;
  if (b.nf == 0)
    return a;
  float delta = b.mean - a.mean;
  float count = a.nf + b.nf;
  float nb = b.nf / count;
  return {std::fma(delta, nb, a.mean),
          std::fma(delta * delta * a.nf, nb, a.m2 + b.m2), -1, count};
}

/// One row: thread j of 512 reduces elements j, j + 512, ...; each warp
/// by shfl_down 16..1; warp 0 the 16 warp results (identity beyond).
Welford rowMoments(const std::vector<float> &row) {
  std::vector<Welford> lane(512);
  for (size_t j = 0; j < row.size(); ++j)
    lane[j % 512] = reduce(lane[j % 512], row[j]);
  auto warpReduce = [](std::vector<Welford> w) {
    for (int o = 16; o > 0; o >>= 1)
      for (int i = 0; i < 32; ++i)
        w[i] = combine(w[i], i + o < 32 ? w[i + o] : w[i]);
    return w[0];
  };
  std::vector<Welford> warps(32);
  for (int w = 0; w < 16; ++w)
    warps[w] = warpReduce(std::vector<Welford>(lane.begin() + 32 * w,
                                               lane.begin() + 32 * w + 32));
  return warpReduce(warps);
}

TEST(ZooKernels, GroupNormMatchesAtenRowwiseMomentsAndItsElementwise) {
  std::string path =
      std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo/group_norm.bfk";
  auto parsed = parseKernel(bitfold::testing::readFile(path), path);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  const KernelDef &def = **parsed;
  // Rows of 4 channels x 300 pixels: 1200 elements, so lanes own 2 or 3
  // (the uneven counts exercise the combine's division).
  const int64_t R = 6, C = 1200;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.5f, 3.0f);
  std::vector<uint16_t> x(R * C), y(R * C, 0xFFFF), mean(R, 0xFFFF),
      rstd(R, 0xFFFF);
  for (uint16_t &b : x)
    b = floatToBf16Bits(nd(rng));
  Binding b;
  b.cols = C;
  b.groupRows = {R};
  b.tensors = {{{DType::BF16, x.data(), R, C},
                {DType::BF16, y.data(), R, C},
                {DType::BF16, mean.data(), R, 1},
                {DType::BF16, rstd.data(), R, 1}}};
  b.scalars = {1e-5f};
  ASSERT_FALSE(bool(interpret(def, b)));
  const float eps = bf16BitsToFloat(floatToBf16Bits(1e-5f)); // static_cast<T>
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> row(C);
    for (int64_t c = 0; c < C; ++c)
      row[c] = bf16BitsToFloat(x[r * C + c]);
    Welford w = rowMoments(row);
    float var = w.m2 / w.nf;
    // rsqrtf of a normal value: rsqrt.approx (the interpreter's correctly
    // rounded stand-in for it).
    float rs = correctlyRoundedApprox().rsqrtApproxFtz(var + eps);
    EXPECT_EQ(mean[r], floatToBf16Bits(w.mean)) << "row " << r;
    EXPECT_EQ(rstd[r], floatToBf16Bits(rs)) << "row " << r;
    // y reads mean and rstd back from their bf16 tensors.
    const float meanB = bf16BitsToFloat(floatToBf16Bits(w.mean));
    const float rstdB = bf16BitsToFloat(floatToBf16Bits(rs));
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(y[r * C + c], floatToBf16Bits((row[c] - meanB) * rstdB))
          << r << "," << c;
  }
}

KernelDefRef zooKernel(const char *name) {
  std::string path =
      std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo/" + name + ".bfk";
  auto parsed = parseKernel(bitfold::testing::readFile(path), path);
  if (!parsed) {
    ADD_FAILURE() << llvm::toString(parsed.takeError());
    return nullptr;
  }
  return *parsed;
}

TEST(ZooKernels, GroupNormAffineReadsGammaAndBetaAtEachElementsChannel) {
  KernelDefRef def = zooKernel("group_norm_affine");
  ASSERT_TRUE(def);
  // N = 2 images of C = 64 channels (32 groups of 2) and HxW = 600 pixels:
  // rows of 2 * 600 elements.
  const int64_t G = 32, N = 2, cpg = 2, HW = 600, C = G * cpg;
  const int64_t R = N * G, cols = cpg * HW;
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(-0.25f, 2.0f);
  std::vector<uint16_t> x(R * cols), gamma(C), beta(C), y(R * cols, 0xFFFF);
  for (uint16_t &b : x)
    b = floatToBf16Bits(nd(rng));
  for (int64_t c = 0; c < C; ++c) {
    gamma[c] = floatToBf16Bits(1.0f + 0.01f * float(c));
    beta[c] = floatToBf16Bits(0.5f - 0.02f * float(c));
  }
  Binding b;
  b.cols = cols;
  b.groupRows = {R};
  b.dims = {C};
  b.tensors = {{{DType::BF16, x.data(), R, cols},
                {DType::BF16, gamma.data(), 1, C},
                {DType::BF16, beta.data(), 1, C},
                {DType::BF16, y.data(), R, cols}}};
  b.scalars = {1e-6f};
  ASSERT_FALSE(bool(interpret(*def, b)));
  const float eps = bf16BitsToFloat(floatToBf16Bits(1e-6f));
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> row(cols);
    for (int64_t c = 0; c < cols; ++c)
      row[c] = bf16BitsToFloat(x[r * cols + c]);
    Welford w = rowMoments(row);
    float rs = correctlyRoundedApprox().rsqrtApproxFtz(w.m2 / w.nf + eps);
    for (int64_t c = 0; c < cols; ++c) {
      int64_t ch = (r % G) * cpg + c / HW;
      // ComputeFusedParamsCUDAKernel reads mean and rstd as T (bf16).
      float a = bf16BitsToFloat(floatToBf16Bits(rs)) * bf16BitsToFloat(gamma[ch]);
      float bb = std::fma(-a, bf16BitsToFloat(floatToBf16Bits(w.mean)),
                          bf16BitsToFloat(beta[ch]));
      ASSERT_EQ(y[r * cols + c], floatToBf16Bits(std::fma(a, row[c], bb)))
          << r << "," << c << " channel " << ch;
    }
  }
}

TEST(ZooKernels, AVectorInputIsReadOnlyByGatherAndOnlyInsideItsLength) {
  const std::string head = "bitfold.row_program v v1\n"
                           "groups 1\n"
                           "guard cols % 1 == 0, 1 <= cols <= 64\n"
                           "dim D\n"
                           "input x : f32 row_major per_element\n"
                           "input w : f32 row_major vector(D)\n"
                           "body:\n";
  auto bad = parseKernel(head + "  %w = load w : f32\n"
                                "  output y : f32 row_major = %w\n");
  ASSERT_FALSE(bool(bad));
  std::string msg = llvm::toString(bad.takeError());
  EXPECT_NE(msg.find("loads 'w', a vector input: read it with gather"),
            std::string::npos)
      << msg;
  // y = w[col + 1]: NaN from column D - 1 on (D = 3 < cols = 5).
  auto def = parseKernel(head + "  %c = col_index : i32\n"
                                "  %one = iconst 1 : i32\n"
                                "  %i = iadd %c, %one : i32\n"
                                "  %d = dim D : i32\n"
                                "  %g = gather w, %i : f32\n"
                                "  %df = itof %d : f32\n"
                                "  %y = add %g, %df : f32\n"
                                "  output y : f32 row_major = %y\n");
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  EXPECT_NE((*def)->canonicalText.find("input w : f32 row_major vector(D)"),
            std::string::npos);
  EXPECT_NE((*def)->canonicalText.find("= dim D : i32"), std::string::npos);
  std::vector<float> x(2 * 5), w = {10, 20, 30}, y(2 * 5, -1);
  Binding b;
  b.cols = 5;
  b.groupRows = {2};
  b.dims = {3};
  b.tensors = {{{DType::F32, x.data(), 2, 5},
                {DType::F32, w.data(), 1, 3},
                {DType::F32, y.data(), 2, 5}}};
  ASSERT_FALSE(bool(interpret(**def, b)));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 5; ++c) {
      float want = c + 1 < 3 ? w[c + 1] + 3.0f : NAN;
      EXPECT_EQ(std::bit_cast<uint32_t>(y[r * 5 + c]),
                std::bit_cast<uint32_t>(want))
          << r << "," << c;
    }
}

} // namespace
