//===- tests/dsl/ByteTypesTest.cpp - float8 / int8 conversions, all f32 ---===//
//
// dsl/Float8.h's conversions (what the interpreter loads and stores, and
// codegen emits) against an independent reference on every f32 bit
// pattern: the reference decodes each format's codes with ldexp, walks the
// positive f32s in increasing order alongside the codes, and picks the
// nearest code by exact (double) distances, ties to the even code, with
// torch's rules at the top: float8_e4m3fn has no infinity, so what rounds
// above 448 (past the tie at 464, which goes to the even 448) is NaN;
// float8_e5m2 rounds as IEEE, to infinity from 61440 up. Negative inputs
// give the positive result with the sign bit. int8: toward zero, saturating, NaN -> 0. A program that
// stores and loads each dtype gives the same bits in the interpreter.
//
//===----------------------------------------------------------------------===//

#include "dsl/Float8.h"
#include "dsl/Interp.h"
#include "dsl/Parser.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

using namespace bitfold::dsl;

namespace {

/// A float8 format by its fields: the value of every non-negative code.
struct Format {
  int expBits, manBits, bias;
  /// Codes 0 .. top are finite; values[top + 1] is where rounding up from
  /// the top code would go (for ties), even when it is not a finite value.
  int top;
  float nanFrom; ///< |x| >= nanFrom (and inf, NaN): the code `overflow`.
  uint8_t overflow, nanCode;
  std::vector<double> values;

  Format(int e, int m, int top, float nanFrom, uint8_t overflow,
         uint8_t nanCode)
      : expBits(e), manBits(m), bias((1 << (e - 1)) - 1), top(top),
        nanFrom(nanFrom), overflow(overflow), nanCode(nanCode) {
    for (int c = 0; c <= top + 1; ++c)
      values.push_back(decode(c));
  }
  /// The code's value by its fields (no special values).
  double decode(int c) const {
    int exp = c >> manBits, man = c & ((1 << manBits) - 1);
    if (exp == 0)
      return std::ldexp(double(man), 1 - bias - manBits);
    return std::ldexp(double((1 << manBits) + man), exp - bias - manBits);
  }
  /// The expected code of a non-negative, non-NaN x, given the code c with
  /// values[c] <= x < values[c + 1].
  uint8_t expected(double x, int c) const {
    if (x >= nanFrom)
      return overflow;
    double down = x - values[c], up = values[c + 1] - x;
    if (down < up || (down == up && c % 2 == 0))
      return uint8_t(c);
    return uint8_t(c + 1);
  }
};

const Format &e4m3fn() {
  // top 0x7E = 448; 0x7F (NaN) sits where 480 would: rounding up to it,
  // and everything from 480 up, is NaN.
  static const Format f(4, 3, 0x7E, 480.0f, 0x7F, 0x7F);
  return f;
}
const Format &e5m2() {
  // top 0x7B = 57344; 0x7C is the infinity (65536 for rounding).
  static const Format f(5, 2, 0x7B, 65536.0f, 0x7C, 0x7F);
  return f;
}

struct Mismatch {
  uint32_t bits = 0;
  unsigned got = 0, want = 0;
};

/// Checks `encode` on every f32 whose |x| bits lie in [lo, hi), and on -x.
void checkRange(const Format &f, uint8_t (*encode)(float), uint32_t lo,
                uint32_t hi, std::atomic<uint64_t> &bad, Mismatch &first) {
  int c = 0;
  double x0 = std::bit_cast<float>(lo);
  while (c + 1 < int(f.values.size()) - 1 && f.values[c + 1] <= x0)
    ++c;
  for (uint32_t a = lo; a < hi; ++a) {
    float x = std::bit_cast<float>(a);
    uint8_t want;
    if (a > 0x7F800000u)
      want = f.nanCode;
    else if (a == 0x7F800000u)
      want = f.overflow;
    else {
      while (c + 1 <= f.top && f.values[c + 1] <= double(x))
        ++c;
      want = f.expected(x, c);
    }
    for (uint32_t sign : {0u, 0x80000000u}) {
      uint8_t got = encode(std::bit_cast<float>(a | sign));
      uint8_t w = uint8_t(want | (sign >> 24));
      if (got != w && bad++ == 0)
        first = {a | sign, got, w};
    }
  }
}

/// Every positive f32 pattern (and its negation) on all hardware threads.
void checkEveryFloat(const Format &f, uint8_t (*encode)(float),
                     const char *name) {
  unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const uint64_t total = 0x80000000ull;
  std::atomic<uint64_t> bad{0};
  std::vector<Mismatch> firsts(n);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      checkRange(f, encode, uint32_t(total * t / n),
                 uint32_t(total * (t + 1) / n), bad, firsts[t]);
    });
  for (std::thread &t : threads)
    t.join();
  for (const Mismatch &m : firsts)
    if (m.bits || m.got != m.want) {
      ADD_FAILURE() << llvm::formatv("{0}: f32 bits {1:x8}: got {2:x2}, "
                                     "expected {3:x2}",
                                     name, m.bits, m.got, m.want)
                           .str();
      break;
    }
  EXPECT_EQ(bad.load(), 0u) << name << ": mismatches over all 2^32 inputs";
}

TEST(ByteTypes, F8E4M3FNRoundsEveryF32AsTorch) {
  checkEveryFloat(e4m3fn(), floatToF8E4M3FNBits, "float8_e4m3fn");
}

TEST(ByteTypes, F8E5M2RoundsEveryF32AsTorch) {
  checkEveryFloat(e5m2(), floatToF8E5M2Bits, "float8_e5m2");
}

TEST(ByteTypes, EveryFloat8CodeDecodesToItsValue) {
  for (int c = 0; c < 256; ++c) {
    int mag = c & 0x7F;
    double sign = c & 0x80 ? -1.0 : 1.0;
    float e4 = f8E4M3FNBitsToFloat(uint8_t(c));
    if (mag == 0x7F)
      EXPECT_EQ(std::bit_cast<uint32_t>(e4),
                0x7FF00000u | (uint32_t(c & 0x80) << 24))
          << c;
    else
      EXPECT_EQ(double(e4), sign * e4m3fn().decode(mag)) << c;
    float e5 = f8E5M2BitsToFloat(uint8_t(c));
    if (mag >= 0x7C)
      EXPECT_EQ(std::bit_cast<uint32_t>(e5),
                0x7F800000u | uint32_t(mag & 3) << 21 |
                    (uint32_t(c & 0x80) << 24))
          << c;
    else
      EXPECT_EQ(double(e5), sign * e5m2().decode(mag)) << c;
    // Every finite code reads back as itself.
    if (mag != 0x7F)
      EXPECT_EQ(floatToF8E4M3FNBits(e4), c);
    if (mag < 0x7D)
      EXPECT_EQ(floatToF8E5M2Bits(e5), c);
  }
}

TEST(ByteTypes, I8ConvertsEveryF32TowardZeroSaturating) {
  uint64_t bad = 0;
  uint32_t firstBad = 0;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i) {
    float x = std::bit_cast<float>(uint32_t(i));
    double want = std::isnan(x) ? 0.0
                                : std::clamp(std::trunc(double(x)), -128.0,
                                             127.0);
    if (double(floatToI8(x)) != want && bad++ == 0)
      firstBad = uint32_t(i);
  }
  EXPECT_EQ(bad, 0u) << llvm::formatv("first at f32 bits {0:x8}", firstBad)
                            .str();
}

/// The interpreter stores and loads through the same functions.
TEST(ByteTypes, TheInterpreterRoundsStoresAndLoadsEachByteType) {
  for (DType t : {DType::F8E4M3FN, DType::F8E5M2, DType::I8}) {
    std::string text = llvm::formatv(R"(bitfold.row_program bytes v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 64
input x : f32 row_major per_element
input q : {0} row_major per_element
body:
  %x = load x : f32
  %r = round to {0} %x : {0}
  output y : {0} row_major = %r
  %q = load q : {0}
  %w = extend %q : f32
  output z : f32 row_major = %w
)",
                                     dtypeName(t))
                           .str();
    auto def = parseKernel(text);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    std::vector<float> x = {0.0f,     -0.0f,   1.0f / 3,   -2.75f, 300.0f,
                            464.0f,   -470.0f, -1e9f,   INFINITY,   NAN,    1e-8f,
                            127.9f,   -128.9f, 0.001953125f, 57344.0f,
                            61440.0f, -5.5f};
    const int64_t cols = int64_t(x.size());
    std::vector<uint8_t> q(cols), y(cols);
    std::vector<float> z(cols);
    for (int64_t i = 0; i < cols; ++i)
      q[i] = uint8_t(i * 17 + 3);
    Binding b;
    b.cols = cols;
    b.groupRows = {1};
    b.tensors = {{{DType::F32, x.data(), 1, cols},
                  {t, q.data(), 1, cols},
                  {t, y.data(), 1, cols},
                  {DType::F32, z.data(), 1, cols}}};
    ASSERT_FALSE(bool(interpret(**def, b)));
    for (int64_t i = 0; i < cols; ++i) {
      uint8_t wantY = t == DType::F8E4M3FN ? floatToF8E4M3FNBits(x[i])
                      : t == DType::F8E5M2 ? floatToF8E5M2Bits(x[i])
                                           : uint8_t(floatToI8(x[i]));
      EXPECT_EQ(y[i], wantY) << dtypeName(t).str() << " x=" << x[i];
      float wantZ = t == DType::F8E4M3FN ? f8E4M3FNBitsToFloat(q[i])
                    : t == DType::F8E5M2 ? f8E5M2BitsToFloat(q[i])
                                         : float(int8_t(q[i]));
      EXPECT_EQ(std::bit_cast<uint32_t>(z[i]), std::bit_cast<uint32_t>(wantZ))
          << dtypeName(t).str() << " code " << int(q[i]);
    }
  }
}

} // namespace
