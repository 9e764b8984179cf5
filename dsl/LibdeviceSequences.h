//===- dsl/LibdeviceSequences.h - libdevice f32 functions, exactly -*- C++ -*-===//
//
// CUDA libdevice's __nv_logf, __nv_tanhf and __nv_erff (libdevice.10.bc,
// read with llvm-dis) as the GPU computes them with __CUDA_FTZ=0, the
// setting of nvcc without fast math and of bitfold's codegen, which links
// the same bitcode (codegen/LinkLibdevice.cpp). Every step is one IEEE f32
// operation (std::fma for fma.rn), except the MUFU approximations, which
// come from the caller (ex2 / rcp: ex2.approx.ftz.f32, rcp.approx.ftz.f32),
// so the sm_90 tables make them bit-exact. NaN results are the GPU's NaN. __nv_expf is expfSequence in
// ApproxTables.h.
//
// Dependency-free, like ApproxTables.h: a GPU check program may compile it.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_LIBDEVICESEQUENCES_H
#define BITFOLD_DSL_LIBDEVICESEQUENCES_H

#include "dsl/ApproxTables.h"

#include <cmath>
#include <cstdint>

namespace bitfold::dsl::libdevice {

using approx::bitsFloat;
using approx::floatBits;

/// The GPU's f32 arithmetic returns one NaN, 0x7fffffff, whatever the
/// operands (the host keeps payloads or makes 0xffc00000).
inline float gpuNaN(float r) {
  return std::isnan(r) ? bitsFloat(0x7fffffffu) : r;
}

/// __nv_logf: subnormals scaled by 2^23; x = m * 2^e with m in
/// [0.666, 1.333) by integer arithmetic on the bits; log1p(m - 1) by a
/// degree-9 polynomial in fma; plus e * ln2. Negative and NaN inputs go
/// through fma(x, inf, inf) (NaN), +inf stays +inf, ±0 gives -inf.
inline float logfSequence(float a) {
  float x = a, i = 0.0f;
  if (a < 0x1p-126f) {
    x = a * 0x1p23f;
    i = -23.0f;
  }
  uint32_t xb = floatBits(x);
  uint32_t e = (xb - 1059760811u) & 0xff800000u;
  float m = bitsFloat(xb - e);
  float ie = std::fma(float(int32_t(e)), 0x1p-23f, i);
  float f = m - 1.0f;
  float p = std::fma(-0x1.0aa04ep-3f, f, 0x1.2073ecp-3f);
  p = std::fma(p, f, -0x1.f19b98p-4f);
  p = std::fma(p, f, 0x1.1e52aap-3f);
  p = std::fma(p, f, -0x1.55b172p-3f);
  p = std::fma(p, f, 0x1.99da16p-3f);
  p = std::fma(p, f, -0x1.fffe44p-3f);
  p = std::fma(p, f, 0x1.5554f0p-2f);
  p = std::fma(p, f, -0.5f);
  p = p * f;
  float r = std::fma(p, f, f);
  r = std::fma(ie, 0x1.62e430p-1f, r);
  if (xb >= 0x7f800000u)
    r = std::fma(x, INFINITY, INFINITY);
  if (x == 0.0f)
    r = -INFINITY;
  return gpuNaN(r);
}

/// __nv_tanhf: |a| >= 0.6: 1 - 2 / (2^(2|a| log2 e) + 1) with ex2 and rcp
/// approximations (1 from |a| >= 9.0109), sign copied from a; below: an
/// odd polynomial a + a * a^2 * p(a^2) in fma.
template <typename Ex2, typename Rcp>
float tanhfSequence(float a, Ex2 ex2, Rcp rcp) {
  float t = std::fabs(a);
  float e = ex2(t * 0x1.715476p+1f);
  float s = std::fma(rcp(1.0f + e), -2.0f, 1.0f);
  if (t >= 0x1.205968p+3f)
    s = 1.0f;
  float big = std::copysign(s, a);
  float a2 = a * a;
  float p = std::fma(0x1.01e104p-6f, a2, -0x1.ac795cp-5f);
  p = std::fma(p, a2, 0x1.10b282p-3f);
  p = std::fma(p, a2, -0x1.5553dap-2f);
  p = std::fma(p, a2, 0.0f);
  float small = std::fma(p, a, a);
  return gpuNaN(t >= 0x1.333334p-1f ? big : small);
}

/// __nv_erff: |a| >= 1.00295: 1 - 2^(fma(p(|a|), -|a|, -|a|)) with the ex2
/// approximation, sign copied from a; below: fma(p(a^2), a, a). Both
/// polynomials are degree 6 in fma, with their own coefficients.
template <typename Ex2> float erffSequence(float a, Ex2 ex2) {
  static const float bigC[7] = {0x1.d69874p-14f,  -0x1.5c00b6p-10f,
                                0x1.13233ep-7f,   -0x1.49b334p-5f,
                                0x1.46aa32p-3f,   0x1.d369f2p-1f,
                                0x1.421428p-1f};
  static const float smallC[7] = {0x1.63d2d4p-14f, -0x1.ae9a40p-11f,
                                  0x1.55abd4p-8f,  -0x1.b837cep-6f,
                                  0x1.ce315ep-4f,  -0x1.812758p-2f,
                                  0x1.06eba6p-3f};
  float t = std::fabs(a);
  bool big = t >= 0x1.00c1fcp+0f;
  const float *c = big ? bigC : smallC;
  float x = big ? t : a * a;
  float p = std::fma(c[0], x, c[1]);
  for (int k = 2; k < 7; ++k)
    p = std::fma(p, x, c[k]);
  float u = big ? -x : a;
  float r = std::fma(p, u, u);
  if (big)
    r = std::copysign(1.0f - ex2(r), a);
  return gpuNaN(r);
}

} // namespace bitfold::dsl::libdevice

#endif // BITFOLD_DSL_LIBDEVICESEQUENCES_H
