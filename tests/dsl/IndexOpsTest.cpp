//===- tests/dsl/IndexOpsTest.cpp - Index values, integer ops, gathers ----===//
//
// The index ops' documented semantics (docs/kernel-format.md "Index ops"):
// wrapping i32 arithmetic, division toward zero with defined results for a
// zero divisor and INT_MIN / -1, gathers that read NaN outside the row;
// their text syntax, errors and round trip.
//
//===----------------------------------------------------------------------===//

#include "dsl/Interp.h"
#include "dsl/Parser.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <bit>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

using namespace bitfold::dsl;

namespace {

int32_t evalInt(const Expr &e, int32_t a, int32_t b) {
  float args[2] = {std::bit_cast<float>(a), std::bit_cast<float>(b)};
  return std::bit_cast<int32_t>(evaluateOp(*e.get(), args));
}

TEST(IndexOps, DivisionTruncatesTowardZeroAndIsDefinedEverywhere) {
  Expr x = iconst(0), y = iconst(1);
  struct Case {
    int32_t a, b, q, r;
  } cases[] = {{7, 2, 3, 1},           {-7, 2, -3, -1},
               {7, -2, -3, 1},         {-7, -2, 3, -1},
               {5, 0, 0, 5},           {-5, 0, 0, -5},
               {INT_MIN, -1, INT_MIN, 0}, {INT_MIN, 1, INT_MIN, 0}};
  for (const Case &c : cases) {
    EXPECT_EQ(evalInt(idiv(x, y), c.a, c.b), c.q) << c.a << " idiv " << c.b;
    EXPECT_EQ(evalInt(irem(x, y), c.a, c.b), c.r) << c.a << " irem " << c.b;
  }
}

TEST(IndexOps, ArithmeticWrapsModulo2To32) {
  Expr x = iconst(0), y = iconst(1);
  EXPECT_EQ(evalInt(iadd(x, y), INT_MAX, 1), INT_MIN);
  EXPECT_EQ(evalInt(isub(x, y), INT_MIN, 1), INT_MAX);
  EXPECT_EQ(evalInt(imul(x, y), 65536, 65536), 0);
  EXPECT_EQ(evalInt(imul(x, y), -3, 5), -15);
}

TEST(IndexOps, ComparisonsAreSignedAndItofRoundsToNearestEven) {
  Expr x = iconst(0), y = iconst(1);
  float args[2] = {std::bit_cast<float>(-1), std::bit_cast<float>(1)};
  EXPECT_EQ(evaluateOp(*icmp(Op::ICmpLT, x, y).get(), args), 1.0f);
  EXPECT_EQ(evaluateOp(*icmp(Op::ICmpGE, x, y).get(), args), 0.0f);
  float big[1] = {std::bit_cast<float>(16777217)}; // 2^24 + 1: a tie
  EXPECT_EQ(evaluateOp(*itof(x).get(), big), 16777216.0f);
}

TEST(IndexOps, BuildersRejectMixedTypes) {
  Expr c = col_index();
  EXPECT_EQ(add(c, Expr(1.0f))->op, Op::Invalid);
  EXPECT_NE(add(c, Expr(1.0f))->message.find("itof"), std::string::npos);
  EXPECT_EQ(iadd(c, Expr(1.0f))->op, Op::Invalid);
  EXPECT_EQ(iselect(c, c, c)->op, Op::Invalid);
  EXPECT_EQ(icmp(Op::CmpLT, c, c)->op, Op::Invalid);
  EXPECT_EQ(gather(c, c)->op, Op::Invalid);
}

const char *kIndexProgram = R"(bitfold.row_program index_values v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 64
input x : f32 row_major per_element
body:
  %r = row_index : i32
  %c = col_index : i32
  %k = iconst 1000 : i32
  %rk = imul %r, %k : i32
  %v = iadd %rk, %c : i32
  %f = itof %v : f32
  output idx : f32 row_major = %f
  %m1 = iconst -1 : i32
  %left = iadd %c, %m1 : i32
  %g = gather x, %left : f32
  output left : f32 row_major = %g
  %three = iconst 3 : i32
  %right = iadd %c, %three : i32
  %h = gather x, %right : f32
  output right : f32 row_major = %h
)";

TEST(IndexOps, InterpreterBindsRowAndColumnAndGathersNaNOutsideTheRow) {
  auto def = parseKernel(kIndexProgram);
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  const int64_t rows = 3, cols = 5;
  std::vector<float> x(rows * cols), idx(rows * cols), left(rows * cols),
      right(rows * cols);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i) + 0.5f;
  Binding b;
  b.cols = cols;
  b.groupRows = {rows};
  b.tensors = {{{DType::F32, x.data(), rows, cols},
                {DType::F32, idx.data(), rows, cols},
                {DType::F32, left.data(), rows, cols},
                {DType::F32, right.data(), rows, cols}}};
  ASSERT_FALSE(bool(interpret(**def, b)));
  const uint32_t nan = 0x7fc00000u;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = r * cols + c;
      EXPECT_EQ(idx[i], float(r * 1000 + c));
      uint32_t wantLeft = c == 0 ? nan : std::bit_cast<uint32_t>(x[i - 1]);
      uint32_t wantRight =
          c + 3 >= cols ? nan : std::bit_cast<uint32_t>(x[i + 3]);
      EXPECT_EQ(std::bit_cast<uint32_t>(left[i]), wantLeft) << r << "," << c;
      EXPECT_EQ(std::bit_cast<uint32_t>(right[i]), wantRight) << r << "," << c;
    }
}

TEST(IndexOps, CanonicalTextRoundTrips) {
  auto def = parseKernel(kIndexProgram);
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  const std::string &text = (*def)->canonicalText;
  EXPECT_NE(text.find("iconst -1 : i32"), std::string::npos) << text;
  EXPECT_NE(text.find("gather x, %"), std::string::npos) << text;
  auto back = parseKernel(text);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ((*back)->canonicalText, text);
}

std::string errorOf(const std::string &body) {
  std::string text = "bitfold.row_program bad v1\ngroups 1\n"
                     "guard cols % 1 == 0, 1 <= cols <= 64\n"
                     "input x : f32 row_major per_element\nbody:\n" +
                     body;
  auto def = parseKernel(text);
  if (def)
    return "";
  return llvm::toString(def.takeError());
}

TEST(IndexOps, ErrorsNameTheProblemInTextSyntax) {
  EXPECT_NE(errorOf("  %c = col_index : i32\n  %f = add %c, %c : f32\n")
                .find("7:12: expected an f32 operand of add, found i32 "
                      "(convert it with itof)"),
            std::string::npos)
      << errorOf("  %c = col_index : i32\n  %f = add %c, %c : f32\n");
  EXPECT_NE(errorOf("  %c = col_index : i32\n  %z = iconst 0 : i32\n"
                    "  %q = idiv %c, %z : i32\n  %f = itof %q : f32\n"
                    "  output y : f32 row_major = %f\n")
                .find("idiv by the constant 0"),
            std::string::npos);
  EXPECT_NE(errorOf("  %c = col : i32\n").find("did you mean col_index"),
            std::string::npos)
      << errorOf("  %c = col : i32\n");
  EXPECT_NE(errorOf("  %c = col_index : i32\n  %f = gather y, %c : f32\n")
                .find("input"),
            std::string::npos);
  EXPECT_FALSE(errorOf("  %c = col_index : i32\n"
                       "  output y : f32 row_major = %c\n")
                   .empty());
}

} // namespace
