//===- tests/dsl/ParserTest.cpp - The kernel text format reads back -------===//
//
// parseKernel(printCanonical(def)) must give the same canonical text and
// hash for every stock template and for hand-written programs covering every
// construct; every example of docs/kernel-format.md must parse; malformed
// text must fail with line:column and what was expected; well-formed but
// invalid programs must fail with the verifier's message.
//
//===----------------------------------------------------------------------===//

#include "dsl/Folds.h"
#include "dsl/Parser.h"
#include "tests/dsl/KernelTexts.h"
#include "tests/dsl/TemplateVariants.h"
#include "tests/dsl/TestSupport.h"

#include "gtest/gtest.h"

#include <bit>
#include <cmath>

using namespace bitfold;
using namespace bitfold::dsl;

namespace {

using KernelDefRef = std::shared_ptr<const KernelDef>;

/// Parses `text`; on failure records the error and returns null.
KernelDefRef parseOrFail(llvm::StringRef text, llvm::StringRef what) {
  auto parsed = parseKernel(text);
  if (!parsed) {
    ADD_FAILURE() << what.str() << ": " << llvm::toString(parsed.takeError())
                  << "\ntext:\n"
                  << text.str();
    return nullptr;
  }
  return *parsed;
}

/// The program's text parses back to the same text, hash and operands.
void expectRoundTrip(const KernelDef &def, llvm::StringRef what) {
  KernelDefRef back = parseOrFail(def.canonicalText, what);
  if (!back)
    return;
  EXPECT_EQ(back->canonicalText, def.canonicalText) << what.str();
  EXPECT_EQ(back->hash, def.hash) << what.str();
  ASSERT_EQ(back->operands.size(), def.operands.size()) << what.str();
  for (size_t i = 0; i < def.operands.size(); ++i) {
    EXPECT_EQ(back->operands[i].name, def.operands[i].name) << what.str();
    EXPECT_EQ(back->operands[i].isOutput, def.operands[i].isOutput)
        << what.str();
  }
  EXPECT_EQ(back->folds.size(), def.folds.size()) << what.str();
  EXPECT_EQ(back->dims, def.dims) << what.str();
  EXPECT_EQ(back->groups, def.groups) << what.str();
}

KernelDefRef built(RowProgram &p) {
  auto def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

/// Output bits of `def` on deterministic random inputs (4 rows per group,
/// or the fewest its fold orders hold for; dims of 2, the guard's smallest
/// column count, scalars 1e-5).
std::vector<std::vector<uint32_t>> outputBits(const KernelDef &def) {
  int64_t cols = std::max(def.minCols, def.colsMultipleOf);
  cols = (cols + def.colsMultipleOf - 1) / def.colsMultipleOf *
         def.colsMultipleOf;
  int64_t rows = 4;
  for (const dsl::FoldDecl &f : def.folds)
    rows = std::max(rows, f.order.minRows);
  dsl::Binding b;
  b.cols = cols;
  b.dims.assign(def.dims.size(), 2);
  b.scalars.assign(def.scalars.size(), 1e-5f);
  std::vector<std::unique_ptr<bitfold::testing::Buffer>> buffers;
  bitfold::testing::Rng rng(7);
  for (int g = 0; g < def.groups; ++g) {
    b.groupRows.push_back(rows);
    b.tensors.emplace_back();
    for (const OperandDecl &o : def.operands) {
      int64_t n = o.map == IndexMap::PerColumn  ? 1
                  : o.map == IndexMap::PerBatch ? rows / 2
                                                : rows;
      buffers.push_back(
          std::make_unique<bitfold::testing::Buffer>(o.dtype, n, cols));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cols; ++c)
          buffers.back()->set(r, c, float(rng.symmetric() * 4.0));
      b.tensors.back().push_back(buffers.back()->host());
    }
  }
  if (llvm::Error e = dsl::interpret(def, b)) {
    ADD_FAILURE() << def.name << ": " << llvm::toString(std::move(e));
    return {};
  }
  std::vector<std::vector<uint32_t>> out;
  size_t i = 0;
  for (int g = 0; g < def.groups; ++g)
    for (const OperandDecl &o : def.operands) {
      const bitfold::testing::Buffer &buf = *buffers[i++];
      if (!o.isOutput)
        continue;
      out.emplace_back();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out.back().push_back(buf.bits(r, c));
    }
  return out;
}

/// The parsed program computes what the original computes, bit for bit.
void expectSameBits(const KernelDef &def, llvm::StringRef what) {
  KernelDefRef back = parseOrFail(def.canonicalText, what);
  if (!back)
    return;
  auto want = outputBits(def), got = outputBits(*back);
  ASSERT_EQ(want.size(), got.size()) << what.str();
  for (size_t o = 0; o < want.size(); ++o)
    for (size_t i = 0; i < want[o].size(); ++i)
      ASSERT_EQ(got[o][i], want[o][i])
          << what.str() << ": output " << o << ", first differing element "
          << i << " (4 rows, seed 7)";
}

TEST(KernelText, ParsedProgramsComputeTheSameBits) {
  for (const bitfold::testing::TemplateVariant &v :
       bitfold::testing::templateVariants()) {
    auto def = bitfold::testing::buildVariant(v);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    expectSameBits(**def, v.label);
  }
  for (const bitfold::testing::NamedProgram &p :
       bitfold::testing::handWrittenPrograms())
    if (p.def)
      expectSameBits(*p.def, p.name);
}

TEST(KernelText, EveryStockTemplateRoundTripsByteForByte) {
  for (const bitfold::testing::TemplateVariant &v : bitfold::testing::templateVariants()) {
    auto def = bitfold::testing::buildVariant(v);
    ASSERT_TRUE(bool(def)) << v.label << ": "
                           << llvm::toString(def.takeError());
    expectRoundTrip(**def, v.label);
  }
}

TEST(KernelText, HandWrittenProgramsRoundTrip) {
  for (const bitfold::testing::NamedProgram &p : bitfold::testing::handWrittenPrograms()) {
    ASSERT_TRUE(p.def) << p.name;
    expectRoundTrip(*p.def, p.name);
  }
}

/// One program that applies every computing op of the table, so a new op
/// is covered here without a new test.
TEST(KernelText, EveryOpOfTheTableRoundTrips) {
  RowProgram p("every_op");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  Expr y = p.input("y", f32, Layout::RowMajor).row();
  Expr acc = x + Expr(0.5f);
  Expr i = iadd(row_index(), col_index());
  for (const OpInfo &info : kOpTable) {
    std::vector<Expr> args;
    switch (info.types) {
    case TypeRule::IntArith:
      i = makeOp(info.op, {i, iconst(3)});
      continue;
    case TypeRule::IntCompare:
      acc = select(makeOp(info.op, {i, iconst(5)}), acc, y);
      continue;
    case TypeRule::IntSelect:
      i = makeOp(info.op, {x < y, i, iconst(-7)});
      continue;
    case TypeRule::IntToFloat:
      acc = acc + makeOp(info.op, {i});
      continue;
    case TypeRule::Gather:
      acc = acc + gather(x, i);
      continue;
    case TypeRule::Arith:
      args.assign(size_t(info.arity), acc);
      acc = makeOp(info.op, args);
      continue;
    case TypeRule::Compare:
    case TypeRule::Logic: {
      Expr c = x < y;
      args.assign(size_t(info.arity),
                  info.types == TypeRule::Logic ? c : acc);
      acc = select(makeOp(info.op, args), acc, y);
      continue;
    }
    case TypeRule::Select:
      acc = makeOp(info.op, {x > acc, acc, x});
      continue;
    case TypeRule::Round:
      acc = round(bf16, acc).to_f32();
      continue;
    default:
      continue; // leaves and extend appear in every program
    }
  }
  p.output("out", f32, Layout::RowMajor, acc);
  KernelDefRef def = built(p);
  ASSERT_TRUE(def);
  for (const OpInfo &info : kOpTable) {
    if (info.op == Op::Invalid || info.op == Op::FoldValue ||
        info.op == Op::Placeholder || info.op == Op::Dim ||
        info.op == Op::Scalar)
      continue;
    EXPECT_NE(def->canonicalText.find(" = " + info.name.str() + " "),
              std::string::npos)
        << info.name.str() << " is missing from\n"
        << def->canonicalText;
  }
  expectRoundTrip(*def, "every_op");
}

TEST(OpTable, EveryOpIsAtItsIndexAndItsSpellingReadsBack) {
  ASSERT_EQ(std::size(kOpTable), kNumOps);
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpInfo &info = kOpTable[i];
    EXPECT_EQ(size_t(info.op), i) << info.name.str();
    EXPECT_EQ(opFromName(info.name), info.op) << info.name.str();
    EXPECT_EQ(opName(info.op), info.name);
  }
  EXPECT_FALSE(opFromName("plus").has_value());
}

// ---- Scalar defaults ---------------------------------------------------------

TEST(KernelText, ScalarDefaultIsPrintedOnlyWhenSetAndReadsBack) {
  auto program = [](bool withDefault) {
    RowProgram p("with_eps");
    Expr x = p.input("x", f32, Layout::RowMajor).row();
    Expr eps = withDefault ? p.scalar("eps", 1e-6f) : p.scalar("eps");
    p.output("y", f32, Layout::RowMajor, x + eps);
    return p.build();
  };
  auto plain = program(false), defaulted = program(true);
  ASSERT_TRUE(plain && defaulted);
  EXPECT_EQ((*plain)->canonicalText.find("default"), std::string::npos);
  EXPECT_NE((*defaulted)->canonicalText.find("scalar eps : f32 default "
                                             "0x358637bd\n"),
            std::string::npos)
      << (*defaulted)->canonicalText;
  EXPECT_NE((*plain)->hash, (*defaulted)->hash);
  KernelDefRef back = parseOrFail((*defaulted)->canonicalText, "default");
  ASSERT_TRUE(back);
  ASSERT_TRUE(back->scalars[0].defaultValue.has_value());
  EXPECT_EQ(std::bit_cast<uint32_t>(*back->scalars[0].defaultValue),
            std::bit_cast<uint32_t>(1e-6f));
  expectRoundTrip(**defaulted, "default");
}

TEST(KernelText, DecimalLiteralsAreRoundedToNearestAndPrintedAsBits) {
  KernelDefRef def = parseOrFail(R"(bitfold.row_program lit v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16
input x : f32 row_major per_element
scalar eps : f32 default 0.1
body:
  %x = load x : f32
  %c = const -0.1 : f32
  %y = mul %x, %c : f32
  output y : f32 row_major = %y
)",
                                 "decimal literals");
  ASSERT_TRUE(def);
  EXPECT_NE(def->canonicalText.find("const 0xbdcccccd"), std::string::npos)
      << def->canonicalText;
  EXPECT_NE(def->canonicalText.find("default 0x3dcccccd"), std::string::npos)
      << def->canonicalText;
}

// ---- The documentation -------------------------------------------------------

TEST(KernelFormatDoc, EveryExampleParsesAndItsPrintedTextReadsBack) {
  std::vector<std::string> examples = bitfold::testing::docExamples();
  ASSERT_GE(examples.size(), 14u) << "examples missing from "
                                  << bitfold::testing::docPath();
  for (size_t i = 0; i < examples.size(); ++i) {
    std::string what = "doc example " + std::to_string(i + 1);
    KernelDefRef def = parseOrFail(examples[i], what);
    if (def)
      expectRoundTrip(*def, what);
  }
}

TEST(KernelFormatDoc, TheCanonicalExampleReadsBackUnchanged) {
  bool found = false;
  for (const std::string &e : bitfold::testing::docExamples()) {
    if (e.find("bitfold.row_program golden v1") != 0)
      continue;
    found = true;
    KernelDefRef def = parseOrFail(e, "golden");
    ASSERT_TRUE(def);
    EXPECT_EQ(def->canonicalText, e);
    EXPECT_EQ(def->hash,
              "2ae0dd4707d522dae24c90f9140114a0a280dfc7cd8487a2ce9c6d706b8e0fd5");
  }
  EXPECT_TRUE(found) << "the canonical example is missing";
}

TEST(KernelFormatDoc, ListsEveryOpOfTheTable) {
  std::string doc = bitfold::testing::readFile(bitfold::testing::docPath());
  for (const OpInfo &info : kOpTable) {
    if (info.op == Op::Invalid)
      continue;
    EXPECT_NE(doc.find("`" + info.name.str() + "`"), std::string::npos)
        << "docs/kernel-format.md does not list the op " << info.name.str();
  }
}

// ---- Bad input ---------------------------------------------------------------

/// A small valid program; tests below break one part of it.
std::string good() {
  return R"(bitfold.row_program ok v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16
input x : bf16 row_major per_element
body:
  %x = load x : bf16
  %xf = extend %x : f32
  %y = add %xf, %xf : f32
  %r = round to bf16 %y : bf16
  output y : bf16 row_major = %r
)";
}

std::string replaced(std::string text, llvm::StringRef from,
                     llvm::StringRef to) {
  size_t at = text.find(from.str());
  EXPECT_NE(at, std::string::npos) << from.str();
  if (at != std::string::npos)
    text.replace(at, from.size(), to.str());
  return text;
}

/// The doc example whose header names `program`.
std::string exampleNamed(llvm::StringRef program) {
  std::string head = "bitfold.row_program " + program.str() + " v1\n";
  for (const std::string &e : bitfold::testing::docExamples())
    if (llvm::StringRef(e).starts_with(head))
      return e;
  ADD_FAILURE() << "no doc example named " << program.str();
  return "";
}

void expectError(const std::string &text, llvm::StringRef message) {
  auto parsed = parseKernel(text);
  ASSERT_FALSE(bool(parsed)) << "accepted:\n" << text;
  std::string got = llvm::toString(parsed.takeError());
  EXPECT_NE(got.find(message.str()), std::string::npos)
      << "expected \"" << message.str() << "\" in:\n"
      << got << "\ntext:\n"
      << text;
}

TEST(KernelTextErrors, TheGoodProgramParses) {
  EXPECT_TRUE(parseOrFail(good(), "good"));
}

TEST(KernelTextErrors, EmptyInputNamesTheHeader) {
  expectError("", "1:1: expected 'bitfold', found end of input");
}

TEST(KernelTextErrors, AnotherFormatVersionIsRejected) {
  expectError(replaced(good(), " v1", " v2"),
              "1:24: expected format version v1 (the version this build "
              "reads), found 'v2'");
}

TEST(KernelTextErrors, AnUnknownOpIsNamed) {
  expectError(replaced(good(), "%y = add", "%y = plus"),
              "8:8: expected an op name, found 'plus'");
}

TEST(KernelTextErrors, AnUndefinedValueIsNamed) {
  expectError(replaced(good(), "add %xf, %xf", "add %xf, %z"),
              "8:17: expected a value defined above, found '%z'");
}

TEST(KernelTextErrors, ImplicitWideningMustBeWrittenAsExtend) {
  expectError(replaced(good(), "add %xf, %xf", "add %x, %xf"),
              "8:12: expected an f32 operand of add, found bf16 (widen it "
              "with extend)");
}

TEST(KernelTextErrors, AWrongTypeAnnotationIsNamed) {
  expectError(replaced(good(), "%xf, %xf : f32", "%xf, %xf : bf16"),
              "8:23: expected type f32 (the type of this add), found bf16");
}

TEST(KernelTextErrors, AMissingOperandIsNamed) {
  expectError(replaced(good(), "add %xf, %xf", "add %xf"),
              "8:16: expected ',', found ':'");
}

TEST(KernelTextErrors, AValueDefinedTwiceIsNamed) {
  expectError(replaced(good(), "%y = add", "%x = add"),
              "8:3: expected a new value name, found '%x' (defined above)");
}

TEST(KernelTextErrors, AnUndeclaredInputIsNamed) {
  expectError(replaced(good(), "load x", "load z"),
              "6:13: expected a declared input, found 'z'");
}

TEST(KernelTextErrors, AFoldValueBeforeItsFoldIsNamed) {
  expectError(replaced(good(), "%y = add %xf, %xf", "%y = fold_value 0.acc"),
              "8:19: expected a fold declared above, found fold 0");
}

TEST(KernelTextErrors, AnOutOfRangeIntegerIsNamed) {
  expectError(replaced(good(), "groups 1", "groups 99999999999"),
              "2:8: expected a group count in 0..2147483647, found "
              "'99999999999'");
}

TEST(KernelTextErrors, StrayBytesAreShownEscaped) {
  expectError(replaced(good(), "body:", "body\x01"),
              "5:5: expected ':', found '\\x01'");
}

TEST(KernelTextErrors, ASourceNamePrefixesTheLocation) {
  auto parsed = parseKernel("bitfold", "prog.bfk");
  ASSERT_FALSE(bool(parsed));
  EXPECT_EQ(llvm::toString(parsed.takeError()),
            "prog.bfk:1:8: expected '.', found end of input");
}

TEST(KernelTextErrors, AnInvalidProgramGetsTheVerifiersMessage) {
  expectError(replaced(good(), "input x : bf16 row_major per_element\n",
                       "input x : bf16 row_major per_element\n"
                       "input m : i1 row_major per_element\n"),
              "row program 'ok' is ill-formed:\ninput 'm': dtype i1 cannot "
              "be stored");
}

TEST(KernelTextErrors, AnOutputOfTheWrongTypeIsNamedWithTheTextsFix) {
  expectError(replaced(good(), "output y : bf16 row_major = %r",
                       "output y : bf16 row_major = %y"),
              "10:31: expected a bf16 value for output 'y', found f32 (write "
              "%r = round to bf16 %v : bf16 first)");
}

TEST(KernelTextErrors, TheVerifiersMessageNamesTheOffendingNode) {
  expectError(replaced(good(), "  %y = add %xf, %xf : f32\n",
                       "  %a = arg 0 : f32\n  %y = add %xf, %a : f32\n"),
              "output 'y' (%a at 8:3): uses a combiner argument outside its "
              "combiner");
}

TEST(KernelTextErrors, ACombinerReadingAnInputIsNamedByTheVerifier) {
  std::string text = exampleNamed("row_sum");
  expectError(replaced(text, "      %v = arg 1 : f32\n      %n = add",
                       "      %v = load x : f32\n      %n = add"),
              "fold 0 (combiner 'sum') push (%v at 11:7): uses load; a "
              "combiner sees only its state and the pushed value");
}

TEST(KernelTextErrors, AnIncompleteFoldTreeGetsTheVerifiersMessage) {
  std::string text = exampleNamed("rmsnorm");
  ASSERT_NE(text.find("bfly_xor 16]"), std::string::npos) << text;
  expectError(replaced(text, ", bfly_xor 16]", "]"),
              "fold 0 (order 'warp_butterfly'): the stages merge lanes 0..15 "
              "only");
}

TEST(KernelTextErrors, AHugeVectorWidthGetsTheVerifiersBound) {
  std::string text = exampleNamed("rmsnorm");
  expectError(replaced(text, "vector 8", "vector 1048576"),
              "fold 0 (order 'warp_butterfly'): vector width must be at most "
              "64, found 1048576");
}

} // namespace
