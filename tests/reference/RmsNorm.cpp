//===- tests/reference/RmsNorm.cpp - flashinfer RMSNorm, Wan RMSNorm+SiLU -===//
//
// docs/numerics.md sections 5 and 6. flashinfer is simulated thread by thread:
// each thread's ordered chain, the butterfly in which every lane adds its
// xor partner, then the warp sums.
//
//===----------------------------------------------------------------------===//

#include "tests/reference/Reference.h"

#include <cmath>
#include <vector>

using namespace bitfold::reference;

float bitfold::reference::flashinferSumOfSquares(const float *row, int64_t cols,
                                                 int threadsPerRow) {
  constexpr int kWarp = 32;
  constexpr int kPerThread = 8;
  std::vector<float> acc(threadsPerRow, 0.0f);
  for (int tx = 0; tx < threadsPerRow; ++tx) {
    for (int64_t b = 0;; ++b) {
      int64_t first =
          int64_t(kPerThread) * threadsPerRow * b + int64_t(kPerThread) * tx;
      if (first >= cols)
        break;
      for (int v = 0; v < kPerThread && first + v < cols; ++v) {
        float x = row[first + v];
        float square = x * x; // mul.rn: rnd_f32(x * x)
        acc[tx] = acc[tx] + square;
      }
    }
  }
  // Butterfly inside each warp: lane i adds lane i ^ offset.
  for (int offset : {1, 2, 4, 8, 16}) {
    if (offset >= threadsPerRow)
      break;
    std::vector<float> next(threadsPerRow);
    for (int i = 0; i < threadsPerRow; ++i)
      next[i] = acc[i] + acc[i ^ offset];
    acc = next;
  }
  if (threadsPerRow <= kWarp)
    return acc[0];
  // Cross-warp through shared memory: warp0 + warp1.
  return acc[0] + acc[kWarp];
}

void bitfold::reference::rmsNormModulate(const Matrix &x, const Matrix &weight,
                                         const Matrix &scale,
                                         const Matrix &shift,
                                         int64_t rowsPerBatch, float eps,
                                         int threadsPerRow, const Matrix &y,
                                         const ApproxUnit &approx) {
  std::vector<float> row(x.cols);
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.cols; ++c)
      row[c] = x.load(r, c);
    float sum = flashinferSumOfSquares(row.data(), x.cols, threadsPerRow);
    // rsqrt.approx, no subnormal rescale.
    float rstd = approx.rsqrtApproxFtz(sum / float(x.cols) + eps);
    int64_t b = r / rowsPerBatch;
    for (int64_t c = 0; c < x.cols; ++c) {
      float normed = rnd(y.type, (row[c] * rstd) * (weight.load(0, c) + 0.0f));
      float onePlus = rnd(y.type, 1.0f + scale.load(b, c));
      float scaled = rnd(y.type, normed * onePlus);
      y.store(r, c, scaled + shift.load(b, c));
    }
  }
}

namespace {

/// torch.clamp_min: NaN propagates.
float clampMin(float v, float lo) {
  if (std::isnan(v))
    return v;
  return v < lo ? lo : v;
}

} // namespace

void bitfold::reference::wanRmsNormSilu(const Matrix &x, const Matrix &gamma,
                                        const Matrix &bias, float scale,
                                        const Matrix &y,
                                        const ApproxUnit &approx) {
  const Storage t = y.type;
  for (int64_t r = 0; r < x.rows; ++r) {
    // The template's stand-in for aten's norm: one serial chain, x*x + acc
    // contracted to fma (NormTwoOps as nvcc compiles it).
    float acc = 0.0f;
    for (int64_t c = 0; c < x.cols; ++c) {
      float v = x.load(r, c);
      acc = std::fma(v, v, acc);
    }
    float norm = rnd(t, std::sqrt(acc));
    float denom = rnd(t, clampMin(norm, 1e-12f));
    for (int64_t c = 0; c < x.cols; ++c) {
      float v = rnd(t, x.load(r, c) / denom);
      v = rnd(t, v * scale);
      v = rnd(t, v * gamma.load(0, c));
      v = rnd(t, v + bias.load(0, c));
      // aten's silu: x / (1 + expf(-x)). expf is libdevice's __nv_expf;
      // dsl::expLibdevice is a transcription of it (not DSL evaluation),
      // with ex2.approx.ftz from the shared ApproxUnit.
      float e = bitfold::dsl::expLibdevice(-v, approx);
      y.store(r, c, v / (1.0f + e));
    }
  }
}
