//===- tests/dsl/ZooGroupNormTest.cpp - GroupNorm in aten's order ---------===//
//
// examples/zoo/group_norm.bfk in the interpreter against a C++
// transcription of aten's group_norm_kernel.cu (RowwiseMomentsCUDAKernel:
// 512 threads, WelfordOps, cuda_utils::BlockReduce; then the elementwise
// (x - bf16 mean) * bf16 rstd), every output bit for bit.
//
//===----------------------------------------------------------------------===//

#include "dsl/Interp.h"
#include "dsl/Parser.h"
#include "tests/dsl/KernelTexts.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdint>
#include <random>

using namespace bitfold;
using namespace bitfold::dsl;

namespace {

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

} // namespace
