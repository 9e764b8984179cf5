//===- tests/dsl/ReferenceTest.cpp - The transcriptions' own rounding -----===//
//
// The reference library rounds to bf16/f16 with its own bit arithmetic;
// these tests pin that arithmetic to IEEE behaviour (the compiler's _Float16
// conversion, hand-checked bf16 cases) so a bug there cannot hide behind an
// identical bug in the interpreter.
//
//===----------------------------------------------------------------------===//

#include "tests/reference/Reference.h"

#include "gtest/gtest.h"

#include <bit>
#include <cmath>
#include <cstdint>

using namespace bitfold::reference;

namespace {

TEST(ReferenceRounding, F16EncodeMatchesCompilerConversion) {
  // Every 1021st f32 bit pattern, and the patterns next to every f16 value
  // and to every midpoint between neighbours (where ties are decided).
  auto check = [](uint32_t bits) {
    float v = std::bit_cast<float>(bits);
    if (std::isnan(v))
      return ::testing::AssertionResult(encodeF16(v) == 0x7FFF);
    uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(v));
    uint16_t got = encodeF16(v);
    if (got == want)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "f32 bits 0x" << std::hex << bits << ": got 0x" << got
           << ", want 0x" << want;
  };
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 1021)
    ASSERT_TRUE(check(uint32_t(bits)));
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    float lo = decodeF16(uint16_t(h)), hi = decodeF16(uint16_t(h + 1));
    float mid = lo + (hi - lo) * 0.5f; // exact: f16 values have 11 bits.
    for (float v : {lo, mid}) {
      uint32_t f = std::bit_cast<uint32_t>(v);
      for (uint32_t neighbour : {f - 1, f, f + 1}) {
        ASSERT_TRUE(check(neighbour));
        ASSERT_TRUE(check(neighbour ^ 0x80000000u));
      }
    }
  }
}

TEST(ReferenceRounding, F16DecodeIsExactForEveryPattern) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    float want = static_cast<float>(std::bit_cast<_Float16>(uint16_t(h)));
    float got = decodeF16(uint16_t(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "f16 0x" << std::hex << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
        << "f16 0x" << std::hex << h;
    ASSERT_EQ(encodeF16(got), h) << "f16 0x" << std::hex << h;
  }
}

TEST(ReferenceRounding, Bf16RoundsToNearestEvenAndCanonicalisesNaN) {
  EXPECT_EQ(encodeBf16(1.0f), 0x3F80);
  EXPECT_EQ(encodeBf16(1.0f + 0x1p-8f), 0x3F80);            // tie -> even
  EXPECT_EQ(encodeBf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3F82);  // tie -> even
  EXPECT_EQ(encodeBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81); // above tie
  EXPECT_EQ(encodeBf16(-0.0f), 0x8000);
  EXPECT_EQ(encodeBf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80); // -> Inf
  EXPECT_EQ(encodeBf16(std::bit_cast<float>(0x00000001u)), 0x0000);
  EXPECT_EQ(encodeBf16(std::bit_cast<float>(0x00008000u)), 0x0000); // tie
  EXPECT_EQ(encodeBf16(std::bit_cast<float>(0x00018000u)), 0x0002); // tie
  EXPECT_EQ(encodeBf16(INFINITY), 0x7F80);
  EXPECT_EQ(encodeBf16(-INFINITY), 0xFF80);
  EXPECT_EQ(encodeBf16(NAN), 0x7FFF);
  EXPECT_EQ(encodeBf16(std::bit_cast<float>(0xFFC00001u)), 0x7FFF);
  EXPECT_EQ(encodeBf16(std::bit_cast<float>(0x7F800001u)), 0x7FFF); // sNaN
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    if ((h & 0x7FFF) <= 0x7F80) {
      ASSERT_EQ(encodeBf16(decodeBf16(uint16_t(h))), h);
    }
  }
}

TEST(ReferenceRounding, F16HandlesOverflowAndSubnormalTies) {
  EXPECT_EQ(encodeF16(65504.0f), 0x7BFF);
  EXPECT_EQ(encodeF16(65519.996f), 0x7BFF);
  EXPECT_EQ(encodeF16(65520.0f), 0x7C00); // tie -> even = Inf
  EXPECT_EQ(encodeF16(-1e30f), 0xFC00);
  EXPECT_EQ(encodeF16(0x1p-24f), 0x0001);
  EXPECT_EQ(encodeF16(0x1p-25f), 0x0000);           // tie -> even 0
  EXPECT_EQ(encodeF16(0x1.8p-24f), 0x0002);         // tie -> even 2
  EXPECT_EQ(encodeF16(-0x1.0p-25f * 1.5f), 0x8001); // above tie
  EXPECT_EQ(encodeF16(0x1.ff8p-15f), 0x03FF);       // largest subnormal
  EXPECT_EQ(encodeF16(0x1.ffcp-15f), 0x0400);       // tie -> FLT16_MIN
  EXPECT_EQ(encodeF16(NAN), 0x7FFF);
}

} // namespace
