//===- examples/ln_modulate_example.cpp - bitfold from a C++ host program -===//
//
// LayerNorm + adaLN modulate (GLM-Image / Sana / FLUX) on buffers this
// program allocates itself, through bitfold's public C++ API (bitfold.hpp);
// no PyTorch. scale and shift are chunks of one (B, 2*D) projection, as in
// the models, so they have a row stride of 2*D.
//
// Prints a few outputs, the largest difference from a float64 LayerNorm
// (bitfold reproduces aten's bf16 bits, not float64, so small differences
// are expected) and the time per launch.
//
// Exit status: 0 ok, 1 failure, 77 no GPU (the reason is printed; CTest
// reports the run as skipped).
//
//===----------------------------------------------------------------------===//

#include "cuda/Driver.h"
#include "runtime/bitfold.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using bitfold::cuda::DeviceBuffer;

namespace {

constexpr int kNoGpu = 77;

uint16_t toBf16(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b += 0x7FFF + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}

float fromBf16(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

/// A deterministic pseudo-random value in [-1, 1).
float noise(uint64_t &state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return float(int32_t(state >> 32)) / 2147483648.0f;
}

DLTensor deviceTensor(const DeviceBuffer &buf, std::vector<int64_t> &shape,
                      std::vector<int64_t> *strides = nullptr) {
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCUDA, 0};
  t.ndim = int(shape.size());
  t.dtype = {kDLBfloat, 16, 1};
  t.shape = shape.data();
  t.strides = strides ? strides->data() : nullptr;
  return t;
}

int failed(const char *what, const std::string &why) {
  std::fprintf(stderr, "ln_modulate_example: %s: %s\n", what, why.c_str());
  return 1;
}

} // namespace

int main() {
  const int64_t B = 2, S = 256, D = 1024;
  const float eps = 1e-6f;

  auto rt = bitfold::Runtime::create();
  if (!rt)
    return failed("runtime", rt.status().message());
  auto kernel = rt->kernel("ln_modulate", "dtype=bf16");
  if (!kernel)
    return failed("template", kernel.status().message());

  // A GPU? The driver is loaded at run time; without one, say why.
  auto ctx = bitfold::cuda::ScopedContext::forDevice(0);
  if (!ctx) {
    std::printf("no GPU: %s\n", llvm::toString(ctx.takeError()).c_str());
    return kNoGpu;
  }

  // Host data: x (B, S, D); the projection (B, 2*D) holds scale then shift.
  uint64_t state = 42;
  std::vector<uint16_t> x(size_t(B * S * D)), proj(size_t(B * 2 * D));
  for (auto &v : x)
    v = toBf16(3.0f * noise(state) + 0.5f);
  for (auto &v : proj)
    v = toBf16(0.1f * noise(state));

  auto alloc = [](size_t bytes) {
    auto b = DeviceBuffer::allocate(bytes);
    if (!b) {
      std::fprintf(stderr, "%s\n", llvm::toString(b.takeError()).c_str());
      std::exit(1);
    }
    return std::move(*b);
  };
  DeviceBuffer dx = alloc(x.size() * 2), dproj = alloc(proj.size() * 2),
               dy = alloc(x.size() * 2);
  if (auto e = dx.copyFromHost(x.data(), x.size() * 2))
    return failed("copy", llvm::toString(std::move(e)));
  if (auto e = dproj.copyFromHost(proj.data(), proj.size() * 2))
    return failed("copy", llvm::toString(std::move(e)));

  std::vector<int64_t> xShape = {B, S, D}, cShape = {B, D},
                       cStrides = {2 * D, 1};
  DLTensor tx = deviceTensor(dx, xShape), ty = deviceTensor(dy, xShape);
  DLTensor tscale = deviceTensor(dproj, cShape, &cStrides);
  DLTensor tshift = tscale;
  tshift.byte_offset = uint64_t(D) * 2; // the second chunk

  bitfold::Status s = kernel->launch({&tx, &tscale, &tshift, &ty}, {eps});
  if (!s)
    return failed(s.codeName(), s.message());

  std::vector<uint16_t> y(x.size());
  if (auto e = dy.copyToHost(y.data(), y.size() * 2)) // synchronises
    return failed("copy back", llvm::toString(std::move(e)));

  // float64 reference: LayerNorm then * (1 + scale) + shift.
  double maxErr = 0;
  for (int64_t r = 0; r < B * S; ++r) {
    const uint16_t *row = &x[size_t(r * D)];
    double mean = 0, var = 0;
    for (int64_t c = 0; c < D; ++c)
      mean += fromBf16(row[c]);
    mean /= double(D);
    for (int64_t c = 0; c < D; ++c)
      var += (fromBf16(row[c]) - mean) * (fromBf16(row[c]) - mean);
    double rstd = 1.0 / std::sqrt(var / double(D) + eps);
    const uint16_t *sc = &proj[size_t((r / S) * 2 * D)], *sh = sc + D;
    for (int64_t c = 0; c < D; ++c) {
      double want = (fromBf16(row[c]) - mean) * rstd * (1.0 + fromBf16(sc[c])) +
                    fromBf16(sh[c]);
      double got = fromBf16(y[size_t(r * D + c)]);
      maxErr = std::max(maxErr, std::fabs(got - want) / (1.0 + std::fabs(want)));
    }
  }
  std::printf("ln_modulate (B, S, D) = (%lld, %lld, %lld): y[0..3] = %g %g %g %g\n",
              (long long)B, (long long)S, (long long)D, fromBf16(y[0]),
              fromBf16(y[1]), fromBf16(y[2]), fromBf16(y[3]));
  std::printf("largest relative difference from float64: %.3g (bf16 rounding "
              "is ~4e-3)\n",
              maxErr);

  // Warm launches: a hash lookup and one cuLaunchKernel each.
  auto start = bitfold::cuda::Event::create(),
       stop = bitfold::cuda::Event::create();
  if (start && stop) {
    const int n = 100;
    llvm::consumeError(start->record(nullptr));
    for (int i = 0; i < n; ++i)
      if (!(s = kernel->launch({&tx, &tscale, &tshift, &ty}, {eps})))
        return failed(s.codeName(), s.message());
    llvm::consumeError(stop->record(nullptr));
    llvm::consumeError(stop->synchronize());
    if (auto ms = stop->elapsedSince(*start))
      std::printf("%.2f us per launch (mean of %d)\n", *ms * 1e3 / n, n);
    else
      llvm::consumeError(ms.takeError());
  } else {
    llvm::consumeError(start.takeError());
    llvm::consumeError(stop.takeError());
  }
  if (maxErr > 0.05)
    return failed("check", "output far from LayerNorm + modulate");
  std::printf("ok\n");
  return 0;
}
