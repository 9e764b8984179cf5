//===- tests/reference/Storage.cpp - bf16/f16 rounding by bit manipulation ===//
//
// Written independently of dsl/Interp.cpp: the f16 path does not use the
// compiler's _Float16 conversion.
//
//===----------------------------------------------------------------------===//

#include "tests/reference/Reference.h"

#include <bit>
#include <cstring>

using namespace bitfold::reference;

namespace {

bool isNaNBits(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

} // namespace

uint16_t bitfold::reference::encodeBf16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if (isNaNBits(bits))
    return 0x7FFF;
  // Round the low 16 bits to nearest, ties to an even bf16 mantissa. A carry
  // runs into the exponent, which is what rounding up to the next binade (or
  // to Inf) means.
  uint32_t keptLsb = (bits >> 16) & 1u;
  return uint16_t((bits + 0x7FFFu + keptLsb) >> 16);
}

float bitfold::reference::decodeBf16(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

uint16_t bitfold::reference::encodeF16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if (isNaNBits(bits))
    return 0x7FFF;
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t mag = bits & 0x7FFFFFFFu;
  // 65520 = 65504 + half an ulp: ties go to the even neighbour, 2^16 = Inf.
  if (mag >= 0x477FF000u)
    return sign | 0x7C00;
  int exponent = int(mag >> 23) - 127;
  if (exponent >= -14) {
    // Normal half: rebias the exponent and round away 13 mantissa bits; a
    // carry into the exponent is correct rounding.
    uint32_t rebased = mag - (uint32_t(127 - 15) << 23);
    uint32_t keptLsb = (rebased >> 13) & 1u;
    return sign | uint16_t((rebased + 0xFFFu + keptLsb) >> 13);
  }
  // Subnormal half: the result counts units of 2^-24. |v| = m * 2^(e-23)
  // with the implicit bit in m, i.e. m * 2^(e+1) units; shift right by
  // -(e+1) >= 14 bits and round to nearest even.
  if (mag < 0x00800000u) // f32 zero or subnormal: far below 2^-25.
    return sign;
  uint32_t mantissa = (mag & 0x007FFFFFu) | 0x00800000u;
  int shift = -(exponent + 1);
  if (shift > 25)
    return sign;
  uint32_t quotient = mantissa >> shift;
  uint32_t remainder = mantissa & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (quotient & 1u)))
    ++quotient;
  return sign | uint16_t(quotient);
}

float bitfold::reference::decodeF16(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) // Inf or NaN: keep the payload.
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) |
                                (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in f32.
  float magnitude = float(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

uint32_t bitfold::reference::encode(Storage type, float v) {
  switch (type) {
  case Storage::BF16:
    return encodeBf16(v);
  case Storage::F16:
    return encodeF16(v);
  case Storage::F32:
    break;
  }
  return std::bit_cast<uint32_t>(v);
}

float bitfold::reference::decode(Storage type, uint32_t bits) {
  switch (type) {
  case Storage::BF16:
    return decodeBf16(uint16_t(bits));
  case Storage::F16:
    return decodeF16(uint16_t(bits));
  case Storage::F32:
    break;
  }
  return std::bit_cast<float>(bits);
}

float bitfold::reference::rnd(Storage type, float v) {
  return type == Storage::F32 ? v : decode(type, encode(type, v));
}

float Matrix::load(int64_t r, int64_t c) const {
  int64_t i = r * rowStride + c;
  if (type == Storage::F32) {
    float v;
    std::memcpy(&v, static_cast<const char *>(data) + 4 * i, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char *>(data) + 2 * i, 2);
  return decode(type, bits);
}

void Matrix::store(int64_t r, int64_t c, float v) const {
  int64_t i = r * rowStride + c;
  uint32_t bits = encode(type, v);
  if (type == Storage::F32) {
    std::memcpy(static_cast<char *>(data) + 4 * i, &bits, 4);
    return;
  }
  uint16_t half = uint16_t(bits);
  std::memcpy(static_cast<char *>(data) + 2 * i, &half, 2);
}
