//===- codegen/EmitByteTypes.cpp - float8 / int8 loads and stores ---------===//
//
// extend and round for the one-byte storage dtypes, as integer and IEEE
// f32 instructions computing exactly dsl/Float8.h's functions (torch's
// `.to()`), on every arch. No hardware cvt: sm_89's cvt.rn.satfinite.e4m3x2
// saturates where torch gives NaN, and the software form is a handful of
// integer ops per element of a memory-bound kernel.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;
using dsl::DType;
using PI = arith::CmpIPredicate;

namespace {

/// The constants of one float8 format (dsl/Float8.cpp's roundFinite).
struct Float8Format {
  int mantissaBits;       ///< 3 (e4m3fn) or 2 (e5m2).
  uint32_t rebias;        ///< (127 - format bias) << 23.
  uint32_t minNormalBits; ///< smallest normal, as f32 bits.
  uint32_t alignBits;     ///< f32 whose ulp is the subnormal step.
  float subnormalStep;
};

Float8Format formatOf(DType t) {
  if (t == DType::F8E4M3FN)
    return {3, 120u << 23, 0x3C800000u, 0x46800000u, 0x1p-9f};
  return {2, 112u << 23, 0x38800000u, 0x43000000u, 0x1p-16f};
}

} // namespace

Value KernelBuilder::extendByte(DType t, Value x) {
  if (t == DType::I8)
    return arith::SIToFPOp::create(b, loc, f32, x);
  Float8Format f = formatOf(t);
  auto shl = [&](Value v, int n) {
    return arith::ShLIOp::create(b, loc, v, cI32(n));
  };
  Value u = arith::ExtUIOp::create(b, loc, i32, x);
  Value sign = shl(arith::AndIOp::create(b, loc, u, cI32(0x80)), 24);
  Value mag = arith::AndIOp::create(b, loc, u, cI32(0x7F));
  Value m = arith::AndIOp::create(b, loc, u, cI32((1 << f.mantissaBits) - 1));
  Value exp = arith::ShRUIOp::create(b, loc, mag, cI32(f.mantissaBits));
  int shift = 23 - f.mantissaBits;
  // Normal: the fields moved into place, the exponent rebiased.
  Value normal =
      arith::AddIOp::create(b, loc, shl(mag, shift), cI32(int64_t(f.rebias)));
  // Subnormal: m * step, exact in f32.
  Value sub = arith::BitcastOp::create(
      b, loc, i32,
      arith::MulFOp::create(b, loc,
                            arith::UIToFPOp::create(b, loc, f32, m),
                            cF32(f.subnormalStep)));
  Value special;
  if (t == DType::F8E4M3FN) // only 0x7F/0xFF: NaN
    special = sel(cmpI(PI::eq, mag, cI32(0x7F)), cI32(0x7FF00000), normal);
  else // exponent 31: inf or NaN, the mantissa kept
    special = sel(cmpI(PI::eq, exp, cI32(31)),
                  arith::OrIOp::create(b, loc, cI32(0x7F800000), shl(m, shift)),
                  normal);
  Value bits = sel(cmpI(PI::eq, exp, cI32(0)), sub, special);
  return arith::BitcastOp::create(b, loc, f32,
                                  arith::OrIOp::create(b, loc, bits, sign));
}

Value KernelBuilder::roundToI8(Value v) {
  // Clamp, then toward zero; NaN -> 0 (fptosi of a NaN is poison in LLVM).
  Value lo = arith::MaxNumFOp::create(b, loc, v, cF32(-128.0f));
  Value c = arith::MinNumFOp::create(b, loc, lo, cF32(127.0f));
  Value i = arith::FPToSIOp::create(b, loc, i32, c);
  Value isNaN = cmp(arith::CmpFPredicate::UNO, v, v);
  return arith::TruncIOp::create(b, loc, b.getI8Type(),
                                 sel(isNaN, cI32(0), i));
}

Value KernelBuilder::roundByte(DType t, Value v) {
  if (t == DType::I8)
    return roundToI8(v);
  Float8Format f = formatOf(t);
  int shift = 23 - f.mantissaBits;
  Value bits = arith::BitcastOp::create(b, loc, i32, v);
  Value sign = arith::AndIOp::create(b, loc, bits, cI32(int32_t(0x80000000u)));
  Value a = arith::XOrIOp::create(b, loc, bits, sign);
  // Below the smallest normal: one IEEE add rounds to the subnormal step.
  Value sum = arith::AddFOp::create(
      b, loc, arith::BitcastOp::create(b, loc, f32, a),
      cF32Bits(f.alignBits));
  Value sub = arith::SubIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32, sum),
      cI32(int64_t(f.alignBits)));
  // Normal: rebias and round to nearest even in the integer domain.
  Value odd = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, a, cI32(shift)), cI32(1));
  uint32_t bias = uint32_t(0) - f.rebias + ((1u << (shift - 1)) - 1);
  Value rounded = arith::AddIOp::create(
      b, loc, arith::AddIOp::create(b, loc, a, cI32(int32_t(bias))), odd);
  Value normal = arith::ShRUIOp::create(b, loc, rounded, cI32(shift));
  Value r = sel(cmpI(PI::ult, a, cI32(int64_t(f.minNormalBits))), sub, normal);
  if (t == DType::F8E4M3FN) // from 480 up, inf and NaN: NaN (no saturation)
    r = sel(cmpI(PI::uge, a, cI32(0x43F00000)), cI32(0x7F), r);
  else // from 65536 up and inf: inf; NaN: NaN
    r = sel(cmpI(PI::uge, a, cI32(0x47800000)),
            sel(cmpI(PI::ugt, a, cI32(0x7F800000)), cI32(0x7F), cI32(0x7C)),
            r);
  Value withSign = arith::OrIOp::create(
      b, loc, r, arith::ShRUIOp::create(b, loc, sign, cI32(24)));
  return arith::TruncIOp::create(b, loc, b.getI8Type(), withSign);
}
