//===- tests/dsl/RowOutputsTest.cpp - Per-row outputs and in place --------===//
//
// per_row outputs (one value per row), per_row inputs (one value per row
// read: an i32 target index) and `aliases` (an output that may overwrite
// an input): the text reads back, the verifier's messages, the
// interpreter's results; and the zoo kernels that use them against C++
// transcriptions of their PyTorch references (cross-entropy: aten's
// log_softmax block order, then nll_loss).
//
//===----------------------------------------------------------------------===//

#include "dsl/Float8.h"
#include "dsl/Folds.h"
#include "dsl/Interp.h"
#include "dsl/Parser.h"
#include "tests/dsl/KernelTexts.h"

#include "gtest/gtest.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

using namespace bitfold;
using namespace bitfold::dsl;

namespace {

using KernelDefRef = std::shared_ptr<const KernelDef>;

const char *kHeader = "bitfold.row_program t v1\n"
                      "groups 1\n"
                      "guard cols % 1 == 0, 1 <= cols <= 4096\n";

const char *kSum = R"(  combiner sum (acc) empty (0) results (acc)
    push:
      %acc = arg 0 : f32
      %v = arg 1 : f32
      %n = add %acc, %v : f32
      return %n
    combine:
      %a = arg 0 : f32
      %b = arg 1 : f32
      %c = add %a, %b : f32
      return %c
    finish:
      %a = arg 0 : f32
      return %a
)";

/// A program: header, `decls`, then a serial sum fold of %x and `tail`.
std::string sumProgram(const std::string &decls, const std::string &tail) {
  return std::string(kHeader) + decls +
         "body:\n  %x = load x : f32\n"
         "  fold 0 of %x order serial threads 1 vector 1 stages []\n" +
         kSum + "  %s = fold_value 0.acc : f32\n" + tail;
}

KernelDefRef parseOrFail(const std::string &text) {
  auto def = parseKernel(text, "<t>");
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError()) << "\n" << text;
    return nullptr;
  }
  return *def;
}

std::string parseError(const std::string &text) {
  auto def = parseKernel(text, "<t>");
  if (def)
    return "(parsed)";
  return llvm::toString(def.takeError());
}

HostTensor host(DType t, void *data, int64_t rows, int64_t stride) {
  HostTensor h;
  h.dtype = t;
  h.data = data;
  h.rows = rows;
  h.rowStride = stride;
  return h;
}

Binding binding(int64_t rows, int64_t cols, std::vector<HostTensor> ts,
                std::vector<float> scalars = {}) {
  Binding b;
  b.cols = cols;
  b.groupRows = {rows};
  b.tensors = {std::move(ts)};
  b.scalars = std::move(scalars);
  return b;
}

// ---- per_row -----------------------------------------------------------------

const std::string kMeanTail = "  %n = dim cols : f32\n"
                              "  %mean = div_rn %s, %n : f32\n"
                              "  %y = sub %x, %mean : f32\n"
                              "  output y : f32 row_major = %y\n"
                              "  output mean : f32 row_major per_row = %mean\n";
const std::string kX = "input x : f32 row_major per_element\n";

TEST(PerRowOutput, ReadsBackWithPerRowInItsTextAndHash) {
  KernelDefRef def = parseOrFail(sumProgram(kX, kMeanTail));
  ASSERT_TRUE(def);
  EXPECT_EQ(def->operands.back().map, IndexMap::PerRow);
  EXPECT_NE(def->canonicalText.find("output mean : f32 row_major per_row = "),
            std::string::npos);
  KernelDefRef again = parseOrFail(def->canonicalText);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->canonicalText, def->canonicalText);
  // The same program with a per-element mean is another kernel.
  std::string perElement = kMeanTail;
  perElement.replace(perElement.find(" per_row"), 8, "");
  KernelDefRef other = parseOrFail(sumProgram(kX, perElement));
  ASSERT_TRUE(other);
  EXPECT_NE(other->hash, def->hash);
}

TEST(PerRowOutput, AValueThatReadsAnElementIsRejectedWithItsLineAndColumn) {
  std::string msg = parseError(sumProgram(
      kX, "  %y = add %x, %s : f32\n"
          "  output y : f32 row_major per_row = %y\n"));
  EXPECT_NE(msg.find("output 'y' is per_row but its value reads an element "
                     "of the row outside a fold"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("%x at 6:3"), std::string::npos) << msg;
}

TEST(PerRowOutput, MustBeRowMajorWithoutAlign) {
  std::string msg = parseError(sumProgram(
      kX, "  output m : f32 channels_last per_row align 4 = %s\n"));
  EXPECT_NE(msg.find("a per_row output is row_major"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("a per_row output takes no align guard"),
            std::string::npos)
      << msg;
}

TEST(PerRowOutput, TheInterpreterWritesOneValuePerRowAtItsStride) {
  KernelDefRef def = parseOrFail(sumProgram(kX, kMeanTail));
  ASSERT_TRUE(def);
  const int64_t R = 5, C = 37;
  std::vector<float> x(R * C), y(R * C, NAN), mean(2 * R, -7.0f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-2, 2);
  for (float &v : x)
    v = u(rng);
  // The mean lands every other float: a column of a [R, 2] tensor.
  Binding b = binding(R, C,
                      {host(DType::F32, x.data(), R, C),
                       host(DType::F32, y.data(), R, C),
                       host(DType::F32, mean.data(), R, 2)});
  ASSERT_FALSE(bool(interpret(*def, b)));
  for (int64_t r = 0; r < R; ++r) {
    float s = 0; // the serial order, in f32
    for (int64_t c = 0; c < C; ++c)
      s += x[r * C + c];
    float m = s / float(C);
    EXPECT_EQ(std::memcmp(&mean[2 * r], &m, 4), 0) << "row " << r;
    EXPECT_EQ(mean[2 * r + 1], -7.0f) << "row " << r << ": stride ignored";
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(y[r * C + c], x[r * C + c] - m);
  }
}

TEST(PerRowOutput, AStrideBelowOneValueIsRefusedOnlyForManyRows) {
  KernelDefRef def = parseOrFail(sumProgram(kX, kMeanTail));
  ASSERT_TRUE(def);
  std::vector<float> x(8), y(8), mean(2);
  // A per-row output's row holds one value: stride 1 suffices.
  Binding ok = binding(2, 4,
                       {host(DType::F32, x.data(), 2, 4),
                        host(DType::F32, y.data(), 2, 4),
                        host(DType::F32, mean.data(), 2, 1)});
  EXPECT_FALSE(bool(interpret(*def, ok)));
  Binding shortRows = binding(2, 4,
                              {host(DType::F32, x.data(), 2, 4),
                               host(DType::F32, y.data(), 2, 4),
                               host(DType::F32, mean.data(), 1, 1)});
  llvm::Error e = interpret(*def, shortRows);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("needs 2 rows"),
            std::string::npos);
}

// ---- per_row(k): k values per row -------------------------------------------

/// mean and sum of a row as one [rows, 2] output.
const std::string kStatsTail = "  %n = dim cols : f32\n"
                               "  %mean = div_rn %s, %n : f32\n"
                               "  output st : f32 row_major per_row(2) = "
                               "%mean, %s\n";

TEST(PerRowOutputK, ReadsBackWithItsWidthInItsTextAndHash) {
  KernelDefRef def = parseOrFail(sumProgram(kX, kStatsTail));
  ASSERT_TRUE(def);
  const OperandDecl &o = def->operands.back();
  EXPECT_EQ(o.map, IndexMap::PerRow);
  EXPECT_EQ(o.rowWidth, 2);
  EXPECT_EQ(storedCols(o, 37), 2);
  EXPECT_NE(def->canonicalText.find("output st : f32 row_major per_row(2) = "
                                    "%"),
            std::string::npos)
      << def->canonicalText;
  KernelDefRef again = parseOrFail(def->canonicalText);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->canonicalText, def->canonicalText);
  EXPECT_EQ(again->hash, def->hash);
  // The values' order is part of the kernel.
  std::string swapped = kStatsTail;
  swapped.replace(swapped.find("%mean, %s"), 9, "%s, %mean");
  KernelDefRef other = parseOrFail(sumProgram(kX, swapped));
  ASSERT_TRUE(other);
  EXPECT_NE(other->hash, def->hash);
}

TEST(PerRowOutputK, PerRowOfOneIsThePerRowKernel) {
  KernelDefRef one = parseOrFail(sumProgram(
      kX, "  output m : f32 row_major per_row(1) = %s\n"));
  KernelDefRef plain =
      parseOrFail(sumProgram(kX, "  output m : f32 row_major per_row = %s\n"));
  ASSERT_TRUE(one && plain);
  EXPECT_EQ(one->canonicalText, plain->canonicalText);
  EXPECT_EQ(one->hash, plain->hash);
}

TEST(PerRowOutputK, AWrongCountOfValuesIsRejectedWithItsLineAndColumn) {
  std::string msg = parseError(
      sumProgram(kX, "  output st : f32 row_major per_row(3) = %s, %s\n"));
  EXPECT_NE(msg.find("<t>:23:42: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("output 'st' is per_row(3): expected 3 values, found 2"),
            std::string::npos)
      << msg;
  msg = parseError(sumProgram(kX, "  output st : f32 row_major = %x, %x\n"));
  EXPECT_NE(msg.find("output 'st' stores one value per element, found 2 "
                     "values (k values per row: per_row(k))"),
            std::string::npos)
      << msg;
}

TEST(PerRowOutputK, KBelowOneIsRejectedWithItsLineAndColumn) {
  std::string msg = parseError(
      sumProgram(kX, "  output st : f32 row_major per_row(0) = %s\n"));
  EXPECT_NE(msg.find("<t>:23:37: expected the values per row in 1..64, "
                     "found '0'"),
            std::string::npos)
      << msg;
}

TEST(PerRowOutputK, AValueThatReadsAnElementIsRejectedWithItsLineAndColumn) {
  std::string msg = parseError(
      sumProgram(kX, "  output st : f32 row_major per_row(2) = %s, %x\n"));
  EXPECT_NE(msg.find("output 'st' is per_row but its value reads an element "
                     "of the row outside a fold (%x at 6:3)"),
            std::string::npos)
      << msg;
}

TEST(PerRowOutputK, EachValueIsCheckedAgainstTheOutputsDtype) {
  std::string msg = parseError(sumProgram(
      kX, "  %b = round to bf16 %s : bf16\n"
          "  output st : f32 row_major per_row(2) = %s, %b\n"));
  EXPECT_NE(msg.find("<t>:24:46: expected an f32 value for output 'st', "
                     "found bf16"),
            std::string::npos)
      << msg;
}

TEST(PerRowOutputK, TheInterpreterWritesARowsKValuesContiguouslyAtItsStride) {
  KernelDefRef def = parseOrFail(sumProgram(kX, kStatsTail));
  ASSERT_TRUE(def);
  const int64_t R = 5, C = 37;
  std::vector<float> x(R * C), st(3 * R, -7.0f);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-2, 2);
  for (float &v : x)
    v = u(rng);
  // Rows 3 floats apart: the third of each row stays untouched.
  Binding b = binding(R, C,
                      {host(DType::F32, x.data(), R, C),
                       host(DType::F32, st.data(), R, 3)});
  ASSERT_FALSE(bool(interpret(*def, b)));
  for (int64_t r = 0; r < R; ++r) {
    float s = 0;
    for (int64_t c = 0; c < C; ++c)
      s += x[r * C + c];
    float m = s / float(C);
    EXPECT_EQ(std::memcmp(&st[3 * r], &m, 4), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(&st[3 * r + 1], &s, 4), 0) << "row " << r;
    EXPECT_EQ(st[3 * r + 2], -7.0f) << "row " << r;
  }
  // Rows closer than k values would overlap.
  Binding tight = binding(R, C,
                          {host(DType::F32, x.data(), R, C),
                           host(DType::F32, st.data(), R, 1)});
  llvm::Error e = interpret(*def, tight);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("row stride 1 is below"),
            std::string::npos);
}

TEST(PerRowOutputK, TheCppDslBuildsTheTextsKernel) {
  RowProgram p("t");
  Input x = p.input("x", DType::F32, Layout::RowMajor);
  State s = p.fold(x.row(), folds::serial(), folds::sum());
  p.outputPerRow("st", DType::F32, {div_rn(s[0], p.cols().to_f32()), s[0]});
  auto def = p.build();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  EXPECT_EQ((*def)->operands.back().rowWidth, 2);
  KernelDefRef again = parseOrFail((*def)->canonicalText);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->hash, (*def)->hash);
  EXPECT_NE((*def)->canonicalText.find("per_row(2) = "), std::string::npos);
}

TEST(PerRowOutputK, TheCppDslRejectsAnOutputOfNoValues) {
  RowProgram p("t");
  Input x = p.input("x", DType::F32, Layout::RowMajor);
  State s = p.fold(x.row(), folds::serial(), folds::sum());
  p.output("y", DType::F32, Layout::RowMajor, x.row() - s[0]);
  p.outputPerRow("st", DType::F32, std::vector<Expr>{});
  auto def = p.build();
  ASSERT_FALSE(bool(def));
  std::string msg = llvm::toString(def.takeError());
  EXPECT_NE(msg.find("output 'st': per_row(0): k values per row need k in "
                     "1..64"),
            std::string::npos)
      << msg;
}

// ---- aliases -----------------------------------------------------------------

const std::string kXR = "input x : f32 row_major per_element\n"
                        "input r : f32 row_major per_element\n";

TEST(InPlace, AliasesReadsBackAndEntersTheHash) {
  std::string tail = "  %y = sub %x, %s : f32\n"
                     "  output y : f32 row_major aliases x = %y\n";
  KernelDefRef def = parseOrFail(sumProgram(kXR, tail));
  ASSERT_TRUE(def);
  EXPECT_EQ(def->operands.back().aliasOf, 0);
  EXPECT_NE(def->canonicalText.find("output y : f32 row_major aliases x = "),
            std::string::npos);
  KernelDefRef again = parseOrFail(def->canonicalText);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->hash, def->hash);
  KernelDefRef plain = parseOrFail(
      sumProgram(kXR, "  %y = sub %x, %s : f32\n"
                      "  output y : f32 row_major = %y\n"));
  ASSERT_TRUE(plain);
  EXPECT_NE(plain->hash, def->hash);
}

TEST(InPlace, BadDeclarationsAreRejected) {
  std::string unknown = parseError(
      sumProgram(kXR, "  output y : f32 row_major aliases q = %s\n"));
  EXPECT_NE(unknown.find("<t>:24:36: expected a declared input, found 'q'"),
            std::string::npos)
      << unknown;
  std::string twice = parseError(sumProgram(
      kXR, "  %y = sub %x, %s : f32\n"
           "  output y : f32 row_major aliases x = %y\n"
           "  output z : f32 row_major aliases x = %y\n"));
  EXPECT_NE(twice.find("outputs 'y' and 'z' both alias 'x'"),
            std::string::npos)
      << twice;
  std::string dtype = parseError(sumProgram(
      kXR, "  %y = round to bf16 %s : bf16\n"
           "  output y : bf16 row_major aliases x = %y\n"));
  EXPECT_NE(dtype.find("in place needs the input's dtype and layout (f32 "
                       "row_major), found bf16 row_major"),
            std::string::npos)
      << dtype;
  std::string perRow = parseError(
      sumProgram(kXR, "  output m : f32 row_major per_row aliases x = %s\n"));
  EXPECT_NE(perRow.find("in place needs a per_element output"),
            std::string::npos)
      << perRow;
}

TEST(InPlace, TheInterpreterGivesTheSameBitsInPlaceAsOutOfPlace) {
  std::string text = std::string(kHeader) + kXR +
                     "body:\n  %x = load x : f32\n  %r = load r : f32\n"
                     "  %h = add %x, %r : f32\n"
                     "  fold 0 of %h order serial threads 1 vector 1 stages []\n" +
                     kSum +
                     "  %s = fold_value 0.acc : f32\n"
                     "  %y = sub %h, %s : f32\n"
                     "  output h : f32 row_major aliases r = %h\n"
                     "  output y : f32 row_major aliases x = %y\n";
  KernelDefRef def = parseOrFail(text);
  ASSERT_TRUE(def);
  const int64_t R = 3, C = 50;
  std::vector<float> x(R * C), r(R * C);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < R * C; ++i)
    x[i] = u(rng), r[i] = u(rng);
  std::vector<float> h(R * C), y(R * C);
  Binding apart = binding(R, C,
                          {host(DType::F32, x.data(), R, C),
                           host(DType::F32, r.data(), R, C),
                           host(DType::F32, h.data(), R, C),
                           host(DType::F32, y.data(), R, C)});
  ASSERT_FALSE(bool(interpret(*def, apart)));
  Binding inPlace = binding(R, C,
                            {host(DType::F32, x.data(), R, C),
                             host(DType::F32, r.data(), R, C),
                             host(DType::F32, r.data(), R, C),
                             host(DType::F32, x.data(), R, C)});
  ASSERT_FALSE(bool(interpret(*def, inPlace)));
  EXPECT_EQ(std::memcmp(r.data(), h.data(), 4 * R * C), 0);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), 4 * R * C), 0);
}

// ---- zoo kernels against transcriptions of their references -----------------

KernelDefRef zoo(const std::string &name) {
  std::string path =
      std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo/" + name + ".bfk";
  return parseOrFail(bitfold::testing::readFile(path));
}

std::vector<uint16_t> randomBf16(int64_t n, float amp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, amp);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t &b : v)
    b = floatToBf16Bits(nd(rng));
  return v;
}

float bf(uint16_t b) { return bf16BitsToFloat(b); }

TEST(ZooKernels, DynamicInt8QuantMatchesItsTorchChain) {
  KernelDefRef def = zoo("dynamic_int8_quant");
  ASSERT_TRUE(def);
  const int64_t R = 6, C = 264;
  std::vector<uint16_t> x = randomBf16(R * C, 3.0f, 3);
  // Ties: row 1 holds exact halves of its scale step (amax 127 -> scale 1).
  for (int64_t c = 0; c < C; ++c)
    x[C + c] = floatToBf16Bits(c == 0 ? 127.0f : float(c % 9) - 4.5f);
  std::vector<int8_t> q(R * C, 99);
  std::vector<float> scale(R, NAN);
  Binding b = binding(R, C,
                      {host(DType::BF16, x.data(), R, C),
                       host(DType::I8, q.data(), R, C),
                       host(DType::F32, scale.data(), R, 1)});
  ASSERT_FALSE(bool(interpret(*def, b)));
  const float inv127 = 1.0f / 127.0f;
  for (int64_t r = 0; r < R; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < C; ++c)
      amax = std::fmax(amax, std::fabs(bf(x[r * C + c])));
    float s = amax * inv127; // x.abs().max(-1) / 127: times f32(1/127)
    EXPECT_EQ(std::memcmp(&scale[r], &s, 4), 0) << "row " << r;
    for (int64_t c = 0; c < C; ++c) {
      float v = std::nearbyint(bf(x[r * C + c]) / s); // round half even
      v = std::fmin(std::fmax(v, -128.0f), 127.0f);
      ASSERT_EQ(q[r * C + c], int8_t(v)) << "row " << r << " col " << c;
    }
  }
}

/// x and w for the RMSNorm zoo kernels (D = 4096, 16 rows: the aten
/// order's range starts at 16), and the kernel's rstd per row.
struct RmsCase {
  static constexpr int64_t R = 16, C = 4096;
  std::vector<uint16_t> x = randomBf16(R * C, 1.0f, 5);
  std::vector<uint16_t> w = randomBf16(C, 0.5f, 6);
  std::vector<float> rstd = std::vector<float>(R, NAN);
  std::vector<uint16_t> y = std::vector<uint16_t>(R * C);
  RmsCase() {
    KernelDefRef def = zoo("rms_norm_rstd");
    if (!def)
      return;
    Binding b = binding(R, C,
                        {host(DType::BF16, x.data(), R, C),
                         host(DType::BF16, w.data(), 1, C),
                         host(DType::BF16, y.data(), R, C),
                         host(DType::F32, rstd.data(), R, 1)},
                        {1e-6f});
    EXPECT_FALSE(bool(interpret(*def, b)));
  }
  /// bf16(bf16(x * rstd) * w), the reference's y, from the kernel's rstd.
  float yRef(int64_t r, int64_t c) const {
    float n = bf16BitsToFloat(floatToBf16Bits(bf(x[r * C + c]) * rstd[r]));
    return bf16BitsToFloat(floatToBf16Bits(n * bf(w[c])));
  }
};

TEST(ZooKernels, RmsNormRstdIsTheRowsStatisticAndItsYUsesIt) {
  RmsCase k;
  for (int64_t r = 0; r < k.R; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < k.C; ++c)
      ss += double(bf(k.x[r * k.C + c])) * bf(k.x[r * k.C + c]);
    double want = 1.0 / std::sqrt(ss / double(k.C) + 1e-6);
    EXPECT_NEAR(k.rstd[r], want, want * 1e-6) << "row " << r;
    for (int64_t c = 0; c < k.C; ++c)
      ASSERT_EQ(bf(k.y[r * k.C + c]), k.yRef(r, c)) << r << "," << c;
  }
}

/// The RMSNorm kernels fold x^2 in aten's order for x.pow(2).mean(-1):
/// the order of aten's reduce config, which is one order for every width
/// the guard admits (D % 4 == 0, 128..4096: the vectorized path, 32 lanes,
/// one warp per row) and rows from 16; up to the text's 131071 rows the
/// f32 squares stay under 2^31 bytes (aten's 32-bit indexing). Just
/// outside the guard the order changes (D = 124: not vectorized) or the
/// row bound no longer holds (D > 4096).
TEST(ZooKernels, TheRmsNormOrderIsAtensForEveryWidthTheGuardAdmits) {
  for (const char *name : {"rms_norm_rstd", "rms_norm_dynamic_per_token_quant",
                           "rms_norm_static_fp8_quant"}) {
    KernelDefRef def = zoo(name);
    ASSERT_TRUE(def) << name;
    EXPECT_EQ(def->colsMultipleOf, 4) << name;
    EXPECT_EQ(def->minCols, 128) << name;
    EXPECT_EQ(def->maxCols, 4096) << name;
    const FoldOrder &text = def->folds[0].order;
    auto aten = [&](int64_t cols) {
      FoldOrder o = folds::aten_reduce(cols, 16,
                                       folds::aten_sum_kernel(DType::F32));
      o.name = text.name; // names carry the width they were made for
      o.maxRows = text.maxRows;
      return o;
    };
    for (int64_t D = def->minCols; D <= def->maxCols; D += 4) {
      ASSERT_EQ(aten(D), text) << name << " D = " << D;
      ASSERT_LT(text.maxRows * D * 4, int64_t(1) << 31) << name << " " << D;
    }
    EXPECT_NE(aten(124), text) << name;
    EXPECT_GE((text.maxRows + 1) * 4100 * 4, int64_t(1) << 31) << name;
  }
}

/// The guard admits a second width: D = 1024 runs (the order is aten's by
/// the test above; the GPU test compares the bits with torch).
TEST(ZooKernels, RmsNormRstdRunsAtASecondWidth) {
  KernelDefRef def = zoo("rms_norm_rstd");
  ASSERT_TRUE(def);
  const int64_t R = 16, C = 1024;
  std::vector<uint16_t> x = randomBf16(R * C, 1.0f, 7);
  std::vector<uint16_t> w = randomBf16(C, 0.5f, 8), y(R * C);
  std::vector<float> rstd(R, NAN);
  Binding b = binding(R, C,
                      {host(DType::BF16, x.data(), R, C),
                       host(DType::BF16, w.data(), 1, C),
                       host(DType::BF16, y.data(), R, C),
                       host(DType::F32, rstd.data(), R, 1)},
                      {1e-6f});
  ASSERT_FALSE(bool(interpret(*def, b)));
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c)
      ss += double(bf(x[r * C + c])) * bf(x[r * C + c]);
    double want = 1.0 / std::sqrt(ss / double(C) + 1e-6);
    EXPECT_NEAR(rstd[r], want, want * 1e-5) << "row " << r;
  }
}

TEST(ZooKernels, RmsNormDynamicPerTokenQuantMatchesItsTorchChain) {
  KernelDefRef def = zoo("rms_norm_dynamic_per_token_quant");
  ASSERT_TRUE(def);
  RmsCase k;
  const int64_t R = k.R, C = k.C;
  std::vector<uint8_t> q(R * C);
  std::vector<float> scale(R, NAN);
  Binding b = binding(R, C,
                      {host(DType::BF16, k.x.data(), R, C),
                       host(DType::BF16, k.w.data(), 1, C),
                       host(DType::F8E4M3FN, q.data(), R, C),
                       host(DType::F32, scale.data(), R, 1)},
                      {1e-6f});
  ASSERT_FALSE(bool(interpret(*def, b)));
  for (int64_t r = 0; r < R; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < C; ++c)
      amax = std::fmax(amax, std::fabs(k.yRef(r, c)));
    float s = std::fmax(amax * (1.0f / 448.0f), float(1.0 / (448.0 * 512.0)));
    EXPECT_EQ(std::memcmp(&scale[r], &s, 4), 0) << "row " << r;
    for (int64_t c = 0; c < C; ++c) {
      float v = std::fmin(std::fmax(k.yRef(r, c) / s, -448.0f), 448.0f);
      ASSERT_EQ(q[r * C + c], floatToF8E4M3FNBits(v)) << r << "," << c;
    }
  }
}

TEST(ZooKernels, RmsNormStaticFp8QuantMatchesItsTorchChain) {
  KernelDefRef def = zoo("rms_norm_static_fp8_quant");
  ASSERT_TRUE(def);
  RmsCase k;
  const int64_t R = k.R, C = k.C;
  std::vector<uint8_t> q(R * C);
  const float scale = 0.0137f; // its reciprocal is inexact
  Binding b = binding(R, C,
                      {host(DType::BF16, k.x.data(), R, C),
                       host(DType::BF16, k.w.data(), 1, C),
                       host(DType::F8E4M3FN, q.data(), R, C)},
                      {1e-6f, scale});
  ASSERT_FALSE(bool(interpret(*def, b)));
  const float inv = 1.0f / scale;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float v = std::fmin(std::fmax(k.yRef(r, c) * inv, -448.0f), 448.0f);
      ASSERT_EQ(q[r * C + c], floatToF8E4M3FNBits(v)) << r << "," << c;
    }
}

TEST(ZooKernels, LayerNormStatsAreTheRowsMeanAndRstdAndYUsesThem) {
  KernelDefRef def = zoo("layer_norm_stats");
  ASSERT_TRUE(def);
  const int64_t R = 7, C = 1024;
  std::vector<uint16_t> x = randomBf16(R * C, 2.0f, 9);
  for (int64_t i = 0; i < R * C; ++i) // an offset: mean far from 0
    x[i] = floatToBf16Bits(bf(x[i]) + 3.0f);
  std::vector<uint16_t> y(R * C);
  std::vector<float> mean(R, NAN), rstd(R, NAN);
  Binding b = binding(R, C,
                      {host(DType::BF16, x.data(), R, C),
                       host(DType::BF16, y.data(), R, C),
                       host(DType::F32, mean.data(), R, 1),
                       host(DType::F32, rstd.data(), R, 1)},
                      {1e-5f});
  ASSERT_FALSE(bool(interpret(*def, b)));
  for (int64_t r = 0; r < R; ++r) {
    double s = 0, ss = 0;
    for (int64_t c = 0; c < C; ++c)
      s += bf(x[r * C + c]);
    double m = s / double(C);
    for (int64_t c = 0; c < C; ++c)
      ss += (bf(x[r * C + c]) - m) * (bf(x[r * C + c]) - m);
    double want = 1.0 / std::sqrt(ss / double(C) + 1e-5);
    EXPECT_NEAR(mean[r], m, 1e-5) << "row " << r;
    EXPECT_NEAR(rstd[r], want, want * 1e-5) << "row " << r;
    for (int64_t c = 0; c < C; ++c) {
      float v = rstd[r] * (bf(x[r * C + c]) - mean[r]);
      ASSERT_EQ(y[r * C + c], floatToBf16Bits(v)) << r << "," << c;
    }
  }
}

// ---- per_row inputs -----------------------------------------------------------

/// y[r, c] = x[r, c] at column t[r] + b[r] (a gather at a per-row index
/// plus a per-row number), and the per-row value itself as a per_row
/// output.
const std::string kPickProgram = std::string(kHeader) +
                                 "input x : f32 row_major per_element\n"
                                 "input t : i32 row_major per_row\n"
                                 "input b : f32 row_major per_row\n"
                                 "body:\n"
                                 "  %t = load t : i32\n"
                                 "  %g = gather x, %t : f32\n"
                                 "  %b = load b : f32\n"
                                 "  %s = add %g, %b : f32\n"
                                 "  %x = load x : f32\n"
                                 "  %y = add %x, %s : f32\n"
                                 "  output y : f32 row_major = %y\n"
                                 "  output s : f32 row_major per_row = %s\n";

TEST(PerRowInput, ReadsBackWithPerRowInItsText) {
  KernelDefRef def = parseOrFail(kPickProgram);
  ASSERT_TRUE(def);
  EXPECT_NE(def->canonicalText.find("input t : i32 row_major per_row\n"),
            std::string::npos)
      << def->canonicalText;
  KernelDefRef again = parseOrFail(def->canonicalText);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->hash, def->hash);
}

TEST(PerRowInput, TheInterpreterReadsOneValuePerRowAtItsStride) {
  KernelDefRef def = parseOrFail(kPickProgram);
  ASSERT_TRUE(def);
  const int64_t R = 4, C = 6;
  std::vector<float> x(R * C), y(R * C, NAN), s(R, NAN);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i) * 0.25f;
  // Targets every other int32 (a column of an [R, 2] tensor); -1 and C are
  // outside the row: the gather reads NaN.
  std::vector<int32_t> t = {2, 99, -1, 99, 5, 99, int32_t(C), 99};
  std::vector<float> b = {1, 2, 3, 4};
  Binding bind;
  bind.cols = C;
  bind.groupRows = {R};
  bind.tensors = {{host(DType::F32, x.data(), R, C),
                   host(DType::I32, t.data(), R, 2),
                   host(DType::F32, b.data(), R, 1),
                   host(DType::F32, y.data(), R, C),
                   host(DType::F32, s.data(), R, 1)}};
  ASSERT_FALSE(bool(interpret(*def, bind)));
  for (int64_t r = 0; r < R; ++r) {
    int32_t col = t[2 * r];
    float want = col >= 0 && col < C ? x[r * C + col] + b[r] : NAN;
    EXPECT_EQ(std::bit_cast<uint32_t>(s[r]), std::bit_cast<uint32_t>(want))
        << "row " << r;
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(std::bit_cast<uint32_t>(y[r * C + c]),
                std::bit_cast<uint32_t>(x[r * C + c] + want))
          << r << "," << c;
  }
}

TEST(PerRowInput, BadDeclarationsAreRejectedInTextTerms) {
  auto program = [](const std::string &decls, const std::string &body) {
    return std::string(kHeader) + "input x : f32 row_major per_element\n" +
           decls + "body:\n  %x = load x : f32\n" + body +
           "  output y : f32 row_major = %x\n";
  };
  std::string msg = parseError(
      program("input t : i32 row_major per_element\n", ""));
  EXPECT_NE(msg.find("input 't': an i32 input is per_row"), std::string::npos)
      << msg;
  msg = parseError(program("input t : i32 channels_last per_row align 4\n", ""));
  EXPECT_NE(msg.find("a per_row input is row_major"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("a per_row input takes no align guard"),
            std::string::npos)
      << msg;
  msg = parseError(std::string(kHeader) +
                   "input x : f32 row_major per_element\n"
                   "input b : f32 row_major per_row\n"
                   "body:\n  %c = iconst 0 : i32\n"
                   "  %g = gather b, %c : f32\n"
                   "  output y : f32 row_major = %g\n");
  EXPECT_NE(msg.find("gathers from 'b', a per_row input"), std::string::npos)
      << msg;
  msg = parseError(std::string(kHeader) +
                   "input x : f32 row_major per_element\n"
                   "input t : i32 row_major per_row\n"
                   "body:\n  %t = load t : i32\n"
                   "  output y : i32 row_major per_row = %t\n");
  EXPECT_NE(msg.find("output 'y': i32 is stored only by a per_row input"),
            std::string::npos)
      << msg;
}

// ---- cross-entropy against aten's order ------------------------------------

/// An op of the interpreter's on one value (libdevice expf and logf as the
/// interpreter models them).
float unary(Expr (*op)(const Expr &), float v) {
  Expr e = op(Expr(0.0f));
  return evaluateOp(*e.get(), {v}, correctlyRoundedApprox());
}

/// aten's cunn_SoftMax{Forward,ForwardSmem} for a row of V % 8192 == 0
/// bf16 logits: 1024 threads, thread t folds the 8-element vectors t,
/// t + 1024, ... in order; cuda_utils::BlockReduce: shfl_down 16..1 in each
/// warp, then the 32 warp results (in warp 0) by shfl_down 16..1.
template <typename Push, typename Combine>
float atenBlockFold(const std::vector<float> &row, float empty, Push push,
                    Combine combine) {
  const int T = 1024, V = 8;
  std::vector<float> lane(T, empty);
  for (size_t v = 0; v * V < row.size(); ++v)
    for (int e = 0; e < V; ++e)
      lane[v % T] = push(lane[v % T], row[v * V + e]);
  auto warpReduce = [&](std::vector<float> &w) { // lanes 0..31 of w
    for (int o = 16; o > 0; o >>= 1)
      for (int i = 0; i < 32; ++i) // shfl_down: lanes past 31 keep their own
        w[i] = combine(w[i], i + o < 32 ? w[i + o] : w[i]);
  };
  std::vector<float> warps(32);
  for (int w = 0; w < 32; ++w) {
    std::vector<float> l(lane.begin() + 32 * w, lane.begin() + 32 * w + 32);
    warpReduce(l);
    warps[w] = l[0];
  }
  warpReduce(warps);
  return warps[0];
}

TEST(ZooKernels, CrossEntropyMatchesAtenLogSoftmaxThenNllLoss) {
  std::string path =
      std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo/cross_entropy.bfk";
  KernelDefRef def = parseOrFail(bitfold::testing::readFile(path));
  ASSERT_TRUE(def);
  const int64_t R = 5, C = 16384;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 4);
  std::vector<uint16_t> x(R * C);
  for (uint16_t &b : x)
    b = floatToBf16Bits(nd(rng));
  // Row 1 ignored (-100), row 3 outside the row (NaN), the rest in range.
  std::vector<int32_t> target = {17, -100, int32_t(C - 1), int32_t(C), 4096};
  std::vector<uint16_t> loss(R, 0xFFFF);
  Binding b;
  b.cols = C;
  b.groupRows = {R};
  b.tensors = {{host(DType::BF16, x.data(), R, C),
                host(DType::I32, target.data(), R, 1),
                host(DType::BF16, loss.data(), R, 1)}};
  ASSERT_FALSE(bool(interpret(*def, b)));
  for (int64_t r = 0; r < R; ++r) {
    std::vector<float> row(C);
    for (int64_t c = 0; c < C; ++c)
      row[c] = bf16BitsToFloat(x[r * C + c]);
    float mx = atenBlockFold(
        row, -FLT_MAX, [](float m, float v) { return std::fmax(m, v); },
        [](float a, float o) { return a < o ? o : a; });
    float sum = atenBlockFold(
        row, 0.0f,
        [&](float s, float v) { return s + unary(exp_libdevice, v - mx); },
        [](float a, float o) { return a + o; });
    float logsum = unary(log_libdevice, sum);
    int32_t t = target[r];
    uint16_t want;
    if (t == -100) {
      want = floatToBf16Bits(0.0f);
    } else if (t < 0 || t >= C) {
      want = floatToBf16Bits(NAN);
    } else { // nll_loss: -logp[t] of the bf16 log_softmax
      uint16_t lp = floatToBf16Bits((row[t] - mx) - logsum);
      want = floatToBf16Bits(-bf16BitsToFloat(lp));
    }
    EXPECT_EQ(loss[r], want) << "row " << r;
  }
}

} // namespace
