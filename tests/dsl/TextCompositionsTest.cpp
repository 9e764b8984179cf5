//===- tests/dsl/TextCompositionsTest.cpp - C++ helpers in the text -------===//
//
// A text may call the C++ DSL's compositions (silu, gelu_erf, rsqrt_cuda,
// ...): the program is the one the C++ helper builds, hash included. A
// misspelt op name gets the nearest one; an output's value of the wrong
// type gets a line:column and the text's own spelling of the fix.
//
//===----------------------------------------------------------------------===//

#include "dsl/Parser.h"
#include "dsl/TextCompositions.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

using namespace bitfold::dsl;

namespace {

std::string unaryText(llvm::StringRef name, llvm::StringRef op) {
  return llvm::formatv(R"(bitfold.row_program {0} v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 65536
input x : f32 row_major per_element
body:
  %x = load x : f32
  %y = {1} %x : f32
  output y : f32 row_major = %y
)",
                       name, op)
      .str();
}

TEST(TextCompositions, EachGivesTheProgramItsCppHelperBuilds) {
  for (const TextComposition &c : textCompositions()) {
    auto parsed = parseKernel(unaryText("comp", c.name));
    ASSERT_TRUE(bool(parsed)) << c.name.str() << ": "
                              << llvm::toString(parsed.takeError());
    RowProgram p("comp");
    Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
    p.output("y", DType::F32, Layout::RowMajor, c.build(x));
    p.guardCols(1, 1, 65536);
    auto built = p.build();
    ASSERT_TRUE(bool(built)) << llvm::toString(built.takeError());
    EXPECT_EQ((*parsed)->hash, (*built)->hash) << c.name.str();
    // The canonical text is the expansion, and reads back unchanged.
    auto again = parseKernel((*parsed)->canonicalText);
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_EQ((*again)->canonicalText, (*parsed)->canonicalText);
  }
}

TEST(TextCompositions, ANonF32OperandIsRefusedWithTheFix) {
  std::string text = unaryText("comp", "silu");
  text.replace(text.find("input x : f32"), 13, "input x : bf16");
  text.replace(text.find("load x : f32"), 12, "load x : bf16");
  auto parsed = parseKernel(text);
  ASSERT_FALSE(bool(parsed));
  EXPECT_EQ(llvm::toString(parsed.takeError()),
            "7:13: expected an f32 operand of silu, found bf16 (widen it "
            "with extend)");
}

TEST(TextCompositions, NearMissOpNamesGetTheNearestName) {
  EXPECT_EQ(nearestOpName("exp"), "exp_libdevice");
  EXPECT_EQ(nearestOpName("tanh"), "tanh_libdevice");
  EXPECT_EQ(nearestOpName("rsqrt"), "rsqrt_approx_ftz");
  EXPECT_EQ(nearestOpName("sqrt"), "sqrt_rn");
  EXPECT_EQ(nearestOpName("fma"), "fma_rn");
  EXPECT_EQ(nearestOpName("ad"), "add");
  EXPECT_EQ(nearestOpName("slu"), "silu");
  EXPECT_EQ(nearestOpName("gelu"), "gelu_erf");
  EXPECT_EQ(nearestOpName("frobnicate"), "");
  auto parsed = parseKernel(unaryText("near", "exp"));
  ASSERT_FALSE(bool(parsed));
  EXPECT_EQ(llvm::toString(parsed.takeError()),
            "7:8: expected an op name (did you mean exp_libdevice?), found "
            "'exp'");
}

std::string outputText(llvm::StringRef outType, llvm::StringRef valueLines,
                       llvm::StringRef value) {
  return llvm::formatv(R"(bitfold.row_program out v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16
input x : bf16 row_major per_element
body:
  %x = load x : bf16
  %xf = extend %x : f32
{0}  output y : {1} row_major = {2}
)",
                       valueLines, outType, value)
      .str();
}

TEST(TextCompositions, AnOutputOfTheWrongTypeSaysWhereAndHowInText) {
  struct Case {
    const char *outType, *lines, *value, *message;
  } cases[] = {
      {"bf16", "", "%xf",
       "8:31: expected a bf16 value for output 'y', found f32 (write %r = "
       "round to bf16 %v : bf16 first)"},
      {"f32", "", "%x",
       "8:30: expected an f32 value for output 'y', found bf16 (widen it "
       "with extend)"},
      {"f16", "", "%x",
       "8:30: expected an f16 value for output 'y', found bf16 (write %r = "
       "round to f16 %v : f16 first, after extend)"},
      {"f32", "  %p = cmp_gt %xf, %xf : i1\n", "%p",
       "9:30: expected an f32 value for output 'y', found i1 (a predicate "
       "cannot be stored: select between two f32 values first)"},
  };
  for (const Case &c : cases) {
    auto parsed = parseKernel(outputText(c.outType, c.lines, c.value));
    ASSERT_FALSE(bool(parsed)) << c.message;
    EXPECT_EQ(llvm::toString(parsed.takeError()), c.message);
  }
}

} // namespace
