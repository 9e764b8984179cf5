//===- tests/dsl/KernelTextLimitsTest.cpp - Literals, groups, guards -------===//
//
// What the kernel text refuses instead of crashing or accepting silently:
// numeric literals past the length limit (refused before any conversion),
// literals that overflow f32, more tensor groups than a launch serves, and
// column guards no column count satisfies (docs/kernel-format.md).
//
//===----------------------------------------------------------------------===//

#include "dsl/Parser.h"

#include "gtest/gtest.h"

#include <string>

using namespace bitfold::dsl;

namespace {

/// A valid program whose constant is `literal` and whose header lines are
/// `groups` and `guard`.
std::string program(const std::string &literal,
                    const std::string &groups = "groups 1",
                    const std::string &guard =
                        "guard cols % 1 == 0, 1 <= cols <= 16") {
  return "bitfold.row_program lit v1\n" + groups + "\n" + guard + R"(
input x : f32 row_major per_element
body:
  %x = load x : f32
  %c = const )" + literal + R"( : f32
  %y = mul %x, %c : f32
  output y : f32 row_major = %y
)";
}

std::string errorOf(const std::string &text) {
  auto parsed = parseKernel(text);
  if (parsed)
    return "";
  return llvm::toString(parsed.takeError());
}

/// The f32 bits a parsed program's constant got.
uint32_t constBits(const std::string &literal) {
  auto parsed = parseKernel(program(literal));
  if (!parsed) {
    ADD_FAILURE() << literal.substr(0, 80) << ": "
                  << llvm::toString(parsed.takeError());
    return 0;
  }
  auto pos = (*parsed)->canonicalText.find("const 0x");
  EXPECT_NE(pos, std::string::npos);
  return uint32_t(std::stoul((*parsed)->canonicalText.substr(pos + 6, 10),
                             nullptr, 16));
}

} // namespace

TEST(KernelTextLiterals, ATenThousandDigitFractionIsRefusedNotConverted) {
  // Crashed every entry point inside the decimal conversion before the
  // length limit (issue: literals of tens of thousands of digits).
  for (size_t digits : {1200u, 30000u, 200000u}) {
    std::string err = errorOf(program("0." + std::string(digits, '3')));
    EXPECT_NE(err.find("number literal of"), std::string::npos) << err;
    EXPECT_NE(err.find("over the limit of 1100"), std::string::npos) << err;
    EXPECT_LT(err.size(), 400u) << "the message quotes the whole literal";
  }
  std::string err = errorOf(program("1" + std::string(5000, '0')));
  EXPECT_NE(err.find("over the limit"), std::string::npos) << err;
}

TEST(KernelTextLiterals, ExactDecimalsUpToTheLimitAreRead) {
  // 2^-149, the smallest f32 subnormal, written out exactly (149 digits
  // after the point), and padded with zeros to the limit.
  std::string tiny =
      "0.00000000000000000000000000000000000000000000140129846432481707092"
      "372958328991613128026194187651577175706828388979108268586060148663"
      "818836212158203125";
  EXPECT_EQ(constBits(tiny), 0x00000001u);
  std::string padded = tiny + std::string(1100 - tiny.size(), '0');
  EXPECT_EQ(constBits(padded), 0x00000001u);
  EXPECT_EQ(constBits("-0.5"), 0xbf000000u);
  EXPECT_EQ(constBits("3.4028234663852886e38"), 0x7f7fffffu); // FLT_MAX
}

TEST(KernelTextLiterals, AnOverflowingLiteralIsAnErrorNotInfinity) {
  for (const char *lit : {"1e39", "-1e39", "3.5e38", "1e999999"}) {
    std::string err = errorOf(program(lit));
    EXPECT_NE(err.find("overflows f32"), std::string::npos) << lit << ": "
                                                           << err;
  }
  EXPECT_EQ(constBits("0x7f800000"), 0x7f800000u); // +inf, as bits
}

TEST(KernelTextHeader, MoreGroupsThanALaunchServesAreRefused) {
  std::string err = errorOf(program("1.0", "groups 1000"));
  EXPECT_NE(err.find("groups must be at most 4"), std::string::npos) << err;
  EXPECT_NE(errorOf(program("1.0", "groups 5")), "");
  EXPECT_EQ(errorOf(program("1.0", "groups 4")), "");
}

TEST(KernelTextHeader, AGuardNoColumnCountSatisfiesIsRefused) {
  for (const char *guard : {"guard cols % 8 == 0, 1 <= cols <= 7",
                            "guard cols % 1024 == 0, 1025 <= cols <= 2047",
                            "guard cols % 9223372036854775807 == 0, 1 <= "
                            "cols <= 9223372036854775806"}) {
    std::string err = errorOf(program("1.0", "groups 1", guard));
    EXPECT_NE(err.find("column guard is empty"), std::string::npos)
        << guard << ": " << err;
  }
  EXPECT_EQ(errorOf(program("1.0", "groups 1",
                            "guard cols % 8 == 0, 8 <= cols <= 8")),
            "");
}
