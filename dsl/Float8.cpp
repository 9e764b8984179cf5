//===- dsl/Float8.cpp - One-byte storage conversions, as torch ------------===//
//
// c10's algorithm (the arXiv 2209.05433 formats): below the smallest
// normal, one f32 addition of a power of two aligns the value's last kept
// bit with the f32 ulp, so the hardware's round-to-nearest-even rounds it;
// above, a bias added to the bits rounds to nearest even in the integer
// domain. Both need IEEE f32 addition without flush to zero (the host's
// default; codegen's add.rn.f32 without .ftz).
//
//===----------------------------------------------------------------------===//

#include "dsl/Float8.h"

#include <bit>
#include <cmath>

using namespace bitfold::dsl;

namespace {

/// Shared by both formats: `a` is |v|'s bits, below the overflow bound.
/// minNormalBits: the format's smallest normal as f32 bits; alignBits: the
/// f32 whose ulp is the format's subnormal step; shift: 23 - mantissa
/// bits; bias: (formatBias - 127) << 23 plus half an ulp less one.
uint8_t roundFinite(uint32_t a, uint32_t minNormalBits, uint32_t alignBits,
                    int shift, uint32_t bias) {
  if (a < minNormalBits) {
    float sum = std::bit_cast<float>(a) + std::bit_cast<float>(alignBits);
    return uint8_t(std::bit_cast<uint32_t>(sum) - alignBits);
  }
  uint32_t odd = (a >> shift) & 1;
  return uint8_t((a + bias + odd) >> shift);
}

} // namespace

uint8_t bitfold::dsl::floatToF8E4M3FNBits(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  uint32_t sign = bits & 0x80000000u, a = bits ^ sign;
  uint8_t r = a >= 0x43F00000u // 480.0f, +inf, NaN
                  ? uint8_t(0x7F)
                  : roundFinite(a, 0x3C800000u /*2^-6*/, 0x46800000u /*2^14*/,
                                20, 0xC407FFFFu);
  return r | uint8_t(sign >> 24);
}

uint8_t bitfold::dsl::floatToF8E5M2Bits(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  uint32_t sign = bits & 0x80000000u, a = bits ^ sign;
  uint8_t r;
  if (a >= 0x47800000u) // 65536.0f: overflow, +inf or NaN
    r = a > 0x7F800000u ? 0x7F : 0x7C;
  else
    r = roundFinite(a, 0x38800000u /*2^-14*/, 0x43000000u /*2^7*/, 21,
                    0xC80FFFFFu);
  return r | uint8_t(sign >> 24);
}

float bitfold::dsl::f8E4M3FNBitsToFloat(uint8_t b) {
  uint32_t sign = uint32_t(b & 0x80) << 24;
  uint32_t e = (b >> 3) & 0xF, m = b & 0x7;
  uint32_t bits;
  if ((b & 0x7F) == 0x7F)
    bits = 0x7FF00000u;
  else if (e == 0) // subnormal: m * 2^-9, exact in f32
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(
                                           float(m) * 0x1p-9f));
  else
    bits = ((e + 120) << 23) | (m << 20);
  return std::bit_cast<float>(sign | bits);
}

float bitfold::dsl::f8E5M2BitsToFloat(uint8_t b) {
  uint32_t sign = uint32_t(b & 0x80) << 24;
  uint32_t e = (b >> 2) & 0x1F, m = b & 0x3;
  uint32_t bits;
  if (e == 0x1F)
    bits = 0x7F800000u | (m << 21);
  else if (e == 0) // subnormal: m * 2^-16
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(
                                           float(m) * 0x1p-16f));
  else
    bits = ((e + 112) << 23) | (m << 21);
  return std::bit_cast<float>(sign | bits);
}

int8_t bitfold::dsl::floatToI8(float v) {
  if (std::isnan(v))
    return 0;
  if (v <= -128.0f)
    return -128;
  if (v >= 127.0f)
    return 127;
  return int8_t(v); // toward zero, in range
}

float bitfold::dsl::roundThroughF8E4M3FN(float v) {
  return f8E4M3FNBitsToFloat(floatToF8E4M3FNBits(v));
}
float bitfold::dsl::roundThroughF8E5M2(float v) {
  return f8E5M2BitsToFloat(floatToF8E5M2Bits(v));
}
float bitfold::dsl::roundThroughI8(float v) { return float(floatToI8(v)); }
