//===- tests/reference/LayerNorm.cpp - aten LayerNorm, thread by thread
//----===//
//
// docs/numerics.md sections 1 and 2, simulated as the 128 threads of one aten
// block run them: every lane does its own pushes, every lane of a warp
// executes each shfl.down step (a lane whose partner lies outside the warp
// gets its own value back), then the cross-warp merges through shared memory.
//
//===----------------------------------------------------------------------===//

#include "tests/reference/Reference.h"

#include <array>
#include <cfloat>
#include <cmath>
#include <vector>

using namespace bitfold::reference;

float bitfold::reference::rcpNvcc(float x, const ApproxUnit &approx) {
  float r = approx.rcpApproxFtz(x);
  float e = std::fma(x, r, -1.0f);
  // sub.ftz.f32 -0.0, e: operands and result flushed to signed zero.
  auto ftz = [](float v) {
    return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
  };
  e = ftz(-0.0f - ftz(e));
  return std::fma(r, e, r);
}

float bitfold::reference::rsqrtCuda(float x, const ApproxUnit &approx) {
  if (std::fabs(x) < FLT_MIN)
    return approx.rsqrtApproxFtz(x * 16777216.0f) * 4096.0f; // 2^24, 2^12
  return approx.rsqrtApproxFtz(x);
}

namespace {

constexpr int kThreads = 128;
constexpr int kWarp = 32;
constexpr int kVector = 4;

} // namespace

/// cuWelfordOnlineSum as nvcc compiles it.
WelfordStats bitfold::reference::welfordPush(WelfordStats s, float x,
                                             const ApproxUnit &approx) {
  float delta = x - s.mean;
  float n = s.n + 1.0f;
  float mean = std::fma(delta, rcpNvcc(n, approx), s.mean);
  float m2 = std::fma(delta, x - mean, s.m2);
  return {mean, m2, n};
}

/// cuWelfordCombine(self = B, the lower lane; other = A, the upper lane).
WelfordStats bitfold::reference::welfordCombine(WelfordStats b, WelfordStats a,
                                                const ApproxUnit &approx) {
  float n = a.n + b.n;
  if (!(n > 0.0f))
    return {0.0f, 0.0f, n};
  float c = rcpNvcc(n, approx);
  float delta = b.mean - a.mean;
  float wB = c * b.n;
  float wA = a.n * c;
  float mean = std::fma(a.mean, wA, wB * b.mean);
  float m2 = std::fma(wB, a.n * (delta * delta), a.m2 + b.m2);
  return {mean, m2, n};
}

WelfordStats bitfold::reference::atenLayerNormStats(const float *row,
                                                    int64_t cols,
                                                    const ApproxUnit &approx) {
  std::array<WelfordStats, kThreads> lane;
  lane.fill({0.0f, 0.0f, 0.0f});
  const int64_t vectors = cols / kVector;
  for (int t = 0; t < kThreads; ++t)
    for (int64_t v = t; v < vectors; v += kThreads)
      for (int e = 0; e < kVector; ++e)
        lane[t] = welfordPush(lane[t], row[v * kVector + e], approx);

  // WARP_SHFL_DOWN in every warp: all 32 lanes step together.
  for (int offset : {16, 8, 4, 2, 1}) {
    std::array<WelfordStats, kThreads> next;
    for (int t = 0; t < kThreads; ++t) {
      int laneInWarp = t % kWarp;
      const WelfordStats &other =
          laneInWarp + offset < kWarp ? lane[t + offset] : lane[t];
      next[t] = welfordCombine(lane[t], other, approx);
    }
    lane = next;
  }

  // Shared memory: warps 2 and 3 hand their lane-0 state to warps 0 and 1,
  // then warp 1 to warp 0.
  WelfordStats warp[4] = {lane[0], lane[32], lane[64], lane[96]};
  warp[0] = welfordCombine(warp[0], warp[2], approx);
  warp[1] = welfordCombine(warp[1], warp[3], approx);
  return welfordCombine(warp[0], warp[1], approx);
}

namespace {

/// rstd of one row: rsqrt_cuda(div_rn(m2, D) + eps); returns (mean, rstd).
std::pair<float, float> rowStats(const Matrix &x, int64_t r, float eps,
                                 const ApproxUnit &approx) {
  std::vector<float> row(x.cols);
  for (int64_t c = 0; c < x.cols; ++c)
    row[c] = x.load(r, c);
  WelfordStats s = atenLayerNormStats(row.data(), x.cols, approx);
  float var = s.m2 / float(x.cols);
  return {s.mean, rsqrtCuda(var + eps, approx)};
}

} // namespace

void bitfold::reference::lnModulate(const Matrix &x, const Matrix &scale,
                                    const Matrix &shift, int64_t rowsPerBatch,
                                    float eps, const Matrix &y,
                                    const ApproxUnit &approx) {
  for (int64_t r = 0; r < x.rows; ++r) {
    auto [mean, rstd] = rowStats(x, r, eps, approx);
    int64_t b = r / rowsPerBatch;
    for (int64_t c = 0; c < x.cols; ++c) {
      float normed = rnd(y.type, rstd * (x.load(r, c) - mean));
      float onePlus = rnd(y.type, 1.0f + scale.load(b, c));
      float scaled = rnd(y.type, normed * onePlus);
      y.store(r, c, scaled + shift.load(b, c));
    }
  }
}

void bitfold::reference::qkLayerNorm(const Matrix &x, float eps,
                                     const Matrix &y,
                                     const ApproxUnit &approx) {
  for (int64_t r = 0; r < x.rows; ++r) {
    auto [mean, rstd] = rowStats(x, r, eps, approx);
    for (int64_t c = 0; c < x.cols; ++c)
      y.store(r, c, rstd * (x.load(r, c) - mean));
  }
}
