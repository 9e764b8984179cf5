//===- dsl/Float8.h - One-byte storage conversions, as torch ---*- C++ -*-===//
//
// The conversions of the one-byte storage dtypes (DType::F8E4M3FN,
// F8E5M2, I8) between f32 and their bits, exactly as PyTorch's `.to()`
// performs them (c10/util/Float8_e4m3fn.h, Float8_e5m2.h; int8 by C++'s
// float-to-integer conversion). The interpreter loads and stores through
// these; codegen emits the same functions as integer and f32 instructions
// (codegen/EmitByteTypes.cpp). tests/dsl/ByteTypesTest.cpp compares them
// with an independent reference on every f32 bit pattern.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_FLOAT8_H
#define BITFOLD_DSL_FLOAT8_H

#include <cstdint>

namespace bitfold::dsl {

/// f32 -> float8_e4m3fn bits: round to nearest even, where the code above
/// the largest value (448) is NaN: |v| in (464, 480) rounds to it, 464
/// itself to 448 (the even code); |v| >= 480, +-inf and NaN give NaN too
/// (0x7F, with v's sign bit: 0xFF for negative). Not saturating.
uint8_t floatToF8E4M3FNBits(float v);
/// float8_e4m3fn bits -> f32 (exact; 0x7F/0xFF -> NaN 0x7FF00000 with the
/// sign, as c10).
float f8E4M3FNBitsToFloat(uint8_t b);

/// f32 -> float8_e5m2 bits: round to nearest even as IEEE (e5m2 is the top
/// byte of an f16): |v| >= 61440 rounds to +-inf (0x7C), as do +-inf; NaN
/// gives 0x7F with v's sign bit.
uint8_t floatToF8E5M2Bits(float v);
/// float8_e5m2 bits -> f32 (exact; NaN payloads kept as c10 keeps them).
float f8E5M2BitsToFloat(uint8_t b);

/// f32 -> int8 as torch's `.to(torch.int8)` of an in-range value: toward
/// zero. Out of range, C++ leaves the conversion undefined; bitfold
/// defines it as the PTX conversion cvt.rzi.s8.f32 does: saturate to
/// [-128, 127], NaN -> 0 (docs/kernel-format.md says what torch gives).
int8_t floatToI8(float v);

/// The value of `v` after a round trip through the dtype (v for F32).
float roundThroughF8E4M3FN(float v);
float roundThroughF8E5M2(float v);
float roundThroughI8(float v);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_FLOAT8_H
