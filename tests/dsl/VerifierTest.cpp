//===- tests/dsl/VerifierTest.cpp - Ill-formed programs are rejected ------===//
//
// Each test builds one malformed row program and checks that build() (or
// verify() for a definition made by hand) fails with a message in the
// user's terms: the operand, the fold index, what was expected and found.
//
//===----------------------------------------------------------------------===//

#include "dsl/Folds.h"
#include "dsl/IR.h"

#include "gtest/gtest.h"

#include <initializer_list>
#include <string>

using namespace bitfold::dsl;

namespace {

using KernelDefRef = std::shared_ptr<const KernelDef>;

::testing::AssertionResult
messageHas(const std::string &message,
           std::initializer_list<const char *> fragments) {
  for (const char *f : fragments)
    if (message.find(f) == std::string::npos)
      return ::testing::AssertionFailure()
             << "the message lacks \"" << f << "\"; it is:\n"
             << message;
  return ::testing::AssertionSuccess();
}

/// build() must fail and its message contain every fragment.
::testing::AssertionResult
failsWith(llvm::Expected<KernelDefRef> built,
          std::initializer_list<const char *> fragments) {
  if (built)
    return ::testing::AssertionFailure() << "build() succeeded";
  return messageHas(llvm::toString(built.takeError()), fragments);
}

/// verify() must fail and its message contain every fragment.
::testing::AssertionResult
failsWith(llvm::Error error, std::initializer_list<const char *> fragments) {
  if (!error)
    return ::testing::AssertionFailure() << "verify() succeeded";
  return messageHas(llvm::toString(std::move(error)), fragments);
}

/// A well-formed program: y = rnd(x * rstd) with a sum-of-squares fold.
RowProgram wellFormed(const char *name = "ok") {
  RowProgram p(name);
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  State ss = p.fold(x.to_f32(), folds::serial(), folds::sum_of_squares());
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * rsqrt_approx(ss[0])));
  return p;
}

/// A fold order over `threads` lanes with the given stages.
FoldOrder order(const char *name, int threads, int vector,
                std::vector<TreeStage> stages) {
  FoldOrder o;
  o.name = name;
  o.threads = threads;
  o.vector = vector;
  o.stages = std::move(stages);
  return o;
}

/// A program folding x with `o` and `c`, writing rnd(x * result 0).
llvm::Expected<KernelDefRef> foldProgram(const FoldOrder &o,
                                         std::shared_ptr<const Combiner> c) {
  RowProgram p("folded");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  State s = p.fold(x.to_f32(), o, c);
  Expr v = s.fields.empty() ? Expr(1.0f) : s[0];
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * v));
  return p.build();
}

Combiner::PushFn addPush() {
  return [](const State &s, const Expr &x) { return State{{s[0] + x}}; };
}
Combiner::CombineFn addCombine() {
  return [](const State &a, const State &b) { return State{{a[0] + b[0]}}; };
}

TEST(Verifier, AcceptsAWellFormedProgram) {
  auto built = wellFormed().build();
  ASSERT_TRUE(bool(built)) << llvm::toString(built.takeError());
  if (llvm::Error e = verify(**built))
    ADD_FAILURE() << "verify() rejects what build() accepted: "
                  << llvm::toString(std::move(e));
}

// ---- Names ------------------------------------------------------------------

TEST(Verifier, RejectsProgramNameThatIsNotAnIdentifier) {
  EXPECT_TRUE(failsWith(wellFormed("ln modulate").build(),
                        {"program name 'ln modulate' is not an identifier"}));
}

TEST(Verifier, RejectsOperandNameThatIsNotAnIdentifier) {
  RowProgram p("bad_operand");
  Expr x = p.input("2x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, x + 1.0f));
  EXPECT_TRUE(failsWith(p.build(), {"input name '2x' is not an identifier"}));
}

TEST(Verifier, RejectsANameDeclaredTwice) {
  RowProgram p("twice");
  Expr a = p.input("x", bf16, Layout::RowMajor).row();
  Expr b = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, a + b));
  EXPECT_TRUE(failsWith(p.build(), {"name 'x' is declared twice"}));
}

// ---- Operands and scalars ---------------------------------------------------

TEST(Verifier, RejectsAStoredPredicateOperand) {
  RowProgram p("stored_i1");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.input("mask", DType::I1, Layout::RowMajor);
  p.output("y", bf16, Layout::RowMajor, round(bf16, x + 1.0f));
  EXPECT_TRUE(failsWith(p.build(),
                        {"input 'mask': dtype i1 cannot be stored",
                         "use bf16, f16, f32, f8e4m3fn, f8e5m2 or i8"}));
}

TEST(Verifier, RejectsPerBatchOperandWithoutBatchDim) {
  RowProgram p("no_batch_dim");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr s = p.input("scale", bf16, Layout::RowMajor, IndexMap::PerBatch).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * s));
  EXPECT_TRUE(
      failsWith(p.build(), {"input 'scale': per_batch needs the rows-per-batch "
                            "dim (pass p.dim(\"S\")), found none"}));
}

TEST(Verifier, RejectsBatchDimOnAnOperandThatIsNotPerBatch) {
  RowProgram p("stray_batch_dim");
  Dim S = p.dim("S");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr g =
      p.input("gate", bf16, Layout::RowMajor, IndexMap::PerColumn, S).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * g));
  EXPECT_TRUE(failsWith(p.build(), {"input 'gate': a batch dim is given but "
                                    "the index map is per_column, not "
                                    "per_batch"}));
}

TEST(Verifier, RejectsAScalarThatIsNotF32) {
  RowProgram p("bf16_scalar");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr eps = p.scalar("eps", bf16);
  p.output("y", bf16, Layout::RowMajor, round(bf16, x + eps));
  EXPECT_TRUE(
      failsWith(p.build(), {"scalar 'eps': scalars are f32, found bf16"}));
}

// ---- Fold orders ------------------------------------------------------------

TEST(Verifier, RejectsFoldThreadsThatAreNotAPowerOfTwo) {
  EXPECT_TRUE(failsWith(
      foldProgram(order("odd", 96, 4, {}), folds::sum()),
      {"fold 0 (order 'odd'): threads must be a power of two, found 96"}));
}

TEST(Verifier, RejectsAVectorWidthThatIsNotPositive) {
  EXPECT_TRUE(failsWith(
      foldProgram(order("v0", 1, 0, {}), folds::sum()),
      {"fold 0 (order 'v0'): vector width must be positive, found 0"}));
}

TEST(Verifier, RejectsAStageOffsetBeyondTheThreads) {
  std::vector<TreeStage> stages;
  for (int off : {16, 8, 4, 2, 1, 64})
    stages.push_back({TreeStage::ShuffleDown, off});
  EXPECT_TRUE(failsWith(foldProgram(order("far", 32, 4, stages), folds::sum()),
                        {"fold 0 (order 'far'): stage offset 64 must be a "
                         "power of two below the 32 threads"}));
}

TEST(Verifier, RejectsAStageOffsetThatAppearsTwice) {
  std::vector<TreeStage> stages;
  for (int off : {16, 8, 4, 2, 1, 4})
    stages.push_back({TreeStage::ShuffleDown, off});
  EXPECT_TRUE(
      failsWith(foldProgram(order("dup", 32, 4, stages), folds::sum()),
                {"fold 0 (order 'dup'): stage offset 4 appears twice"}));
}

TEST(Verifier, RejectsAShuffleStageThatLeavesTheWarp) {
  std::vector<TreeStage> stages;
  for (int off : {1, 2, 4, 8, 16, 32})
    stages.push_back({TreeStage::ButterflyXor, off});
  EXPECT_TRUE(failsWith(foldProgram(order("wide", 64, 8, stages), folds::sum()),
                        {"fold 0 (order 'wide'): a shuffle stage moves data "
                         "inside a warp of 32, found offset 32"}));
}

TEST(Verifier, RejectsACrossWarpStageThatSplitsAWarp) {
  std::vector<TreeStage> stages;
  for (int off : {1, 2, 4, 8})
    stages.push_back({TreeStage::ShuffleDown, off});
  stages.push_back({TreeStage::CrossWarp, 16});
  EXPECT_TRUE(
      failsWith(foldProgram(order("half_warp", 32, 4, stages), folds::sum()),
                {"fold 0 (order 'half_warp'): a cross-warp stage merges "
                 "whole warps, found offset 16 (not a multiple of 32)"}));
}

TEST(Verifier, RejectsStagesThatDoNotReachEveryLane) {
  std::vector<TreeStage> stages;
  for (int off : {8, 4, 2, 1})
    stages.push_back({TreeStage::ShuffleDown, off});
  EXPECT_TRUE(failsWith(
      foldProgram(order("short", 32, 4, stages), folds::sum()),
      {"fold 0 (order 'short'): the stages merge lanes 0..15 only; every one "
       "of the 32 threads must reach lane 0 (missing offsets: 0x10)"}));
}

// ---- Combiners --------------------------------------------------------------

TEST(Verifier, RejectsACombinerWithoutFields) {
  auto c = std::make_shared<Combiner>(
      "nothing", std::vector<std::string>{}, std::vector<float>{},
      [](const State &, const Expr &) { return State{}; },
      [](const State &, const State &) { return State{}; });
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'nothing'): the state has no "
                         "fields"}));
}

TEST(Verifier, RejectsAnEmptyStateOfTheWrongSize) {
  auto c = std::make_shared<Combiner>(
      "lopsided", std::vector<std::string>{"acc"},
      std::vector<float>{0.0f, 0.0f}, addPush(), addCombine());
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'lopsided'): the empty state has 2 "
                         "values for 1 fields"}));
}

TEST(Verifier, RejectsAPushReturningTheWrongNumberOfFields) {
  auto c = std::make_shared<Combiner>(
      "wide_push", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [](const State &s, const Expr &x) {
        return State{{s[0] + x, x}};
      },
      addCombine());
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'wide_push'): push returns 2 "
                         "fields, expected 1"}));
}

TEST(Verifier, RejectsNamedResultsWithoutAFinishFunction) {
  auto c = std::make_shared<Combiner>(
      "no_finish", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      addPush(), addCombine(), std::vector<std::string>{"total"});
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'no_finish'): finish returns 0 "
                         "fields, expected 1"}));
}

TEST(Verifier, RejectsACombinerThatReadsAnOperand) {
  RowProgram p("leaky_fold");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  auto c = std::make_shared<Combiner>(
      "leaky", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [x](const State &s, const Expr &v) { return State{{s[0] + v * x}}; },
      addCombine());
  State s = p.fold(x.to_f32(), folds::serial(), c);
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * s[0]));
  EXPECT_TRUE(failsWith(p.build(),
                        {"fold 0 (combiner 'leaky') push: uses load; a "
                         "combiner sees only its state and the pushed value"}));
}

TEST(Verifier, RejectsAFinishThatUsesThePushedValue) {
  Expr pushed;
  auto c = std::make_shared<Combiner>(
      "crossed", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [&pushed](const State &s, const Expr &x) {
        pushed = x;
        return State{{s[0] + x}};
      },
      addCombine(), std::vector<std::string>{"total"},
      [&pushed](const State &s) { return State{{s[0] + pushed}}; });
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'crossed') finish: uses an "
                         "argument of another combiner function"}));
}

TEST(Verifier, RejectsAPredicateStateField) {
  auto c = std::make_shared<Combiner>(
      "flag", std::vector<std::string>{"seen"}, std::vector<float>{0.0f},
      [](const State &s, const Expr &x) { return State{{x > s[0]}}; },
      addCombine());
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'flag') push: a state field must "
                         "be f32, found i1"}));
}

// ---- Folds ------------------------------------------------------------------

TEST(Verifier, RejectsFoldingAPredicate) {
  RowProgram p("fold_i1");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  State s = p.fold(x > 0.0f, folds::serial(), folds::sum());
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * s[0]));
  EXPECT_TRUE(failsWith(p.build(), {"fold 0: the folded value is a predicate "
                                    "(i1); fold numbers"}));
}

TEST(Verifier, RejectsFoldingAValueThatDoesNotVaryAlongTheRow) {
  RowProgram p("fold_scalar");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr eps = p.scalar("eps");
  State s = p.fold(eps * 2.0f, folds::serial(), folds::sum());
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * s[0]));
  EXPECT_TRUE(failsWith(p.build(), {"fold 0: the folded value does not vary "
                                    "along the row"}));
}

TEST(Verifier, RejectsANullCombiner) {
  RowProgram p("null_combiner");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.fold(x.to_f32(), folds::serial(), nullptr);
  p.output("y", bf16, Layout::RowMajor, round(bf16, x + 1.0f));
  EXPECT_TRUE(failsWith(p.build(), {"fold 0: the combiner is null"}));
}

// ---- Outputs ----------------------------------------------------------------

TEST(Verifier, RejectsAProgramWithoutOutputs) {
  RowProgram p("silent");
  p.input("x", bf16, Layout::RowMajor);
  EXPECT_TRUE(failsWith(p.build(), {"the program writes no output"}));
}

TEST(Verifier, RejectsAnOutputWhoseValueIsNotRoundedToItsDtype) {
  RowProgram p("unrounded");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, x * 2.0f);
  EXPECT_TRUE(failsWith(p.build(), {"output 'y' is bf16 but its value is "
                                    "f32; write round<bf16>(...) to say "
                                    "where it is rounded"}));
}

TEST(Verifier, RejectsAnOutputWithoutAValue) {
  RowProgram p("unassigned");
  p.input("x", bf16, Layout::RowMajor);
  p.output("y", bf16, Layout::RowMajor, Expr());
  EXPECT_TRUE(failsWith(p.build(), {"output 'y': no value assigned"}));
}

// ---- Expressions ------------------------------------------------------------

TEST(Verifier, RejectsArithmeticOnAPredicate) {
  RowProgram p("arith_i1");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, (x > 0.0f) + 1.0f));
  EXPECT_TRUE(failsWith(p.build(), {"output 'y': add: operand 0 is a "
                                    "predicate (i1); arithmetic needs a "
                                    "number (use select)"}));
}

TEST(Verifier, RejectsAnEmptyOperand) {
  RowProgram p("empty_operand");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr never;
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * never));
  EXPECT_TRUE(failsWith(p.build(), {"mul: operand 1 is an empty Expr "
                                    "(declared but never assigned)"}));
}

TEST(Verifier, RejectsLogicOnNumbers) {
  RowProgram p("logic_f32");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor,
           round(bf16, select(x && (x > 0.0f), x, 0.0f)));
  EXPECT_TRUE(failsWith(p.build(), {"and: operand 0 must be a predicate "
                                    "(i1), found bf16"}));
}

TEST(Verifier, RejectsRoundingToAPredicate) {
  RowProgram p("round_i1");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, round(DType::I1, x)));
  EXPECT_TRUE(failsWith(p.build(), {"round: cannot round to i1"}));
}

TEST(Verifier, RejectsWideningAPredicate) {
  RowProgram p("widen_i1");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, (x > 0.0f).to_f32()));
  EXPECT_TRUE(failsWith(p.build(), {"to_f32: a predicate (i1) has no f32 "
                                    "value; use select(cond, a, b)"}));
}

TEST(Verifier, RejectsAnOperandOfAnotherProgram) {
  RowProgram other("other");
  Expr foreign = other.input("z", bf16, Layout::RowMajor).row();
  RowProgram p("borrower");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, x + foreign));
  EXPECT_TRUE(
      failsWith(p.build(), {"output 'y': uses a load of another row program"}));
}

TEST(Verifier, RejectsAScalarOfAnotherProgram) {
  RowProgram other("other");
  Expr eps = other.scalar("eps");
  RowProgram p("borrower");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.output("y", bf16, Layout::RowMajor, round(bf16, x + eps));
  EXPECT_TRUE(failsWith(p.build(),
                        {"output 'y': uses a scalar of another row program"}));
}

TEST(Verifier, RejectsACombinerArgumentOutsideItsCombiner) {
  Expr escaped;
  auto c = std::make_shared<Combiner>(
      "escape", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [&escaped](const State &s, const Expr &x) {
        escaped = x;
        return State{{s[0] + x}};
      },
      addCombine());
  RowProgram p("escaped_arg");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.fold(x.to_f32(), folds::serial(), c);
  p.output("y", bf16, Layout::RowMajor, round(bf16, x * escaped));
  EXPECT_TRUE(failsWith(p.build(), {"output 'y': uses a combiner argument "
                                    "outside its combiner"}));
}

// ---- Launch shape -----------------------------------------------------------

TEST(Verifier, RejectsZeroTensorGroups) {
  RowProgram p = wellFormed("no_groups");
  p.groups(0);
  EXPECT_TRUE(failsWith(p.build(), {"groups must be at least 1, found 0"}));
}

TEST(Verifier, RejectsAnEmptyColumnGuard) {
  RowProgram p = wellFormed("no_cols");
  p.guardCols(4, 8, 4);
  EXPECT_TRUE(failsWith(p.build(), {"column guard is empty: cols % 4 == 0 and "
                                    "8 <= cols <= 4"}));
}

TEST(Verifier, ReportsEveryProblemWithTheProgramName) {
  RowProgram p("several");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  p.scalar("eps", f16);
  p.output("y", bf16, Layout::RowMajor, x * 2.0f);
  EXPECT_TRUE(
      failsWith(p.build(), {"row program 'several' is ill-formed:\n",
                            "scalar 'eps': scalars are f32, found f16",
                            "output 'y' is bf16 but its value is f32"}));
}

// ---- Definitions made by hand
// ------------------------------------------------

/// A verified definition with two folds (the second uses the first's
/// result), to be broken by hand.
KernelDef twoFolds() {
  RowProgram p("two_folds");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  State mean = p.fold(x, folds::serial(), folds::sum());
  State var = p.fold(x - mean[0], folds::serial(), folds::sum_of_squares());
  p.output("y", f32, Layout::RowMajor, x * var[0]);
  auto built = p.build();
  if (!built) {
    ADD_FAILURE() << llvm::toString(built.takeError());
    return KernelDef();
  }
  return **built;
}

TEST(Verifier, RejectsAnOutputThatIsNotWrittenPerElement) {
  KernelDef def = twoFolds();
  def.operands.back().map = IndexMap::PerColumn;
  EXPECT_TRUE(failsWith(verify(def), {"output 'y': an output is written per "
                                      "element or per_row, found per_column"}));
}

TEST(Verifier, RejectsAFoldResultThatDoesNotExist) {
  KernelDef def = twoFolds();
  // y = x * var[0]: make the fold value ask for result 3 of fold 1.
  Expr value = def.operands.back().value;
  Expr foldValue = value->args[1];
  auto copy = std::make_shared<ExprNode>(*foldValue.get());
  copy->field = 3;
  def.operands.back().value =
      ExprNode::make(Op::Mul, DType::F32, {value->args[0], Expr(copy)});
  EXPECT_TRUE(failsWith(verify(def), {"output 'y': uses result 3 of fold 1, "
                                      "which has 1 result(s)"}));
}

TEST(Verifier, RejectsAFoldWhoseInputNeedsALaterFold) {
  KernelDef def = twoFolds();
  // Fold 0 folds fold 1's input, which reads fold 0's own result.
  def.folds[0].input = def.folds[1].input;
  EXPECT_TRUE(failsWith(verify(def), {"fold 0 input: uses fold 0, which is "
                                      "not computed before fold 0"}));
}

TEST(Verifier, RejectsANodeWithTheWrongNumberOfOperands) {
  KernelDef def = twoFolds();
  Expr x = def.folds[0].input;
  def.operands.back().value = ExprNode::make(Op::Fma, DType::F32, {x, x});
  EXPECT_TRUE(failsWith(verify(def), {"output 'y': fma_rn takes 3 operands, "
                                      "found 2"}));
}

TEST(Verifier, RejectsReadingAnOutput) {
  KernelDef def = twoFolds();
  auto load = std::make_shared<ExprNode>(*def.folds[0].input.get());
  load->index = 1; // operand 1 is the output y.
  def.operands.back().value =
      ExprNode::make(Op::Add, DType::F32, {def.folds[0].input, Expr(load)});
  EXPECT_TRUE(failsWith(verify(def), {"output 'y': reads an operand that is "
                                      "not an input of this program"}));
}

TEST(Verifier, RejectsADimThatIsNotDeclared) {
  KernelDef def = twoFolds();
  Dim S{0}; // the program declares no named dims.
  def.operands.back().value =
      ExprNode::make(Op::Add, DType::F32, {def.folds[0].input, S.to_f32()});
  EXPECT_TRUE(failsWith(verify(def), {"output 'y': uses a dim not declared in "
                                      "this program"}));
}

} // namespace

TEST(Verifier, RejectsAnAlignmentGuardOnAnUnknownOperand) {
  RowProgram p = wellFormed();
  p.guardAlign("z", 4);
  EXPECT_TRUE(failsWith(p.build(), {"guardAlign", "no operand named 'z'"}));
}

TEST(Verifier, RejectsAnAlignmentGuardThatIsNotAPowerOfTwo) {
  RowProgram p = wellFormed();
  p.guardAlign("x", 3);
  EXPECT_TRUE(failsWith(p.build(), {"guardAlign('x')", "power of two", "3"}));
}

// ---- Bounds on fold orders (codegen allocates and unrolls from them) --------

TEST(Verifier, RejectsAHugeVectorWidth) {
  EXPECT_TRUE(failsWith(foldProgram(order("wide_vec", 1, 1 << 20, {}),
                                    folds::sum()),
                        {"fold 0 (order 'wide_vec'): vector width must be at "
                         "most 64, found 1048576"}));
}

TEST(Verifier, RejectsMoreThreadsThanACta) {
  std::vector<TreeStage> stages;
  for (int off : {16, 8, 4, 2, 1})
    stages.push_back({TreeStage::ShuffleDown, off});
  for (int off = 32; off < 2048; off *= 2)
    stages.push_back({TreeStage::CrossWarp, off});
  EXPECT_TRUE(failsWith(
      foldProgram(order("huge_cta", 2048, 1, stages), folds::sum()),
      {"fold 0 (order 'huge_cta'): threads must be at most 1024 (the threads "
       "of one CTA), found 2048"}));
}

TEST(Verifier, RejectsMoreStagesThanAnyTreeHas) {
  std::vector<TreeStage> stages(100, TreeStage{TreeStage::ShuffleDown, 1});
  EXPECT_TRUE(failsWith(
      foldProgram(order("many", 2, 1, stages), folds::sum()),
      {"fold 0 (order 'many'): 100 tree stages; a tree over at most 1024 "
       "threads has at most 10"}));
}

TEST(Verifier, RejectsMoreElementsPerLaneThanAnF32CountHolds) {
  RowProgram p("long_rows");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  State s = p.fold(x, folds::serial(), folds::sum());
  p.guardCols(1, 1, int64_t(1) << 31);
  p.output("y", f32, Layout::RowMajor, x * s[0]);
  EXPECT_TRUE(failsWith(p.build(),
                        {"fold 0 (order 'serial'): at the column guard's "
                         "maximum of 2147483648 columns a lane pushes "
                         "2147483648 elements; at most 16777216"}));
}

// ---- What the canonical text must be able to say -----------------------------

TEST(Verifier, RejectsAFoldWhoseResultsAreNeverUsed) {
  RowProgram p("dead_fold");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  p.fold(x, folds::serial(), folds::sum());
  p.output("y", f32, Layout::RowMajor, x + 1.0f);
  EXPECT_TRUE(failsWith(p.build(), {"fold 0: its results are never used"}));
}

TEST(Verifier, RejectsAnInputDeclaredAfterAnOutput) {
  RowProgram p("late_input");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  p.output("y", f32, Layout::RowMajor, x + 1.0f);
  p.input("z", f32, Layout::RowMajor);
  EXPECT_TRUE(failsWith(p.build(), {"input 'z' is declared after output "
                                    "'y'; declare every input before the "
                                    "outputs"}));
}

TEST(Verifier, RejectsADimNamedLikeTheBuiltInDims) {
  RowProgram p("reserved_dim");
  p.dim("cols");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  p.output("y", f32, Layout::RowMajor, x + 1.0f);
  EXPECT_TRUE(failsWith(p.build(), {"dim name 'cols' is reserved"}));
}

TEST(Verifier, RejectsAnOrderNameThatIsNotAnIdentifier) {
  EXPECT_TRUE(failsWith(foldProgram(order("two words", 1, 1, {}), folds::sum()),
                        {"fold 0: order name 'two words' is not an "
                         "identifier"}));
}

TEST(Verifier, RejectsAFieldNameDeclaredTwice) {
  auto c = std::make_shared<Combiner>(
      "twice", std::vector<std::string>{"acc", "acc"},
      std::vector<float>{0.0f, 0.0f},
      [](const State &s, const Expr &x) { return State{{s[0] + x, s[1]}}; },
      [](const State &a, const State &b) {
        return State{{a[0] + b[0], a[1]}};
      });
  EXPECT_TRUE(failsWith(foldProgram(folds::serial(), c),
                        {"fold 0 (combiner 'twice'): name 'acc' is declared "
                         "twice"}));
}

TEST(Verifier, RejectsAnAlignmentThatIsNotAPowerOfTwoMadeByHand) {
  auto built = wellFormed("aligned").build();
  ASSERT_TRUE(bool(built)) << llvm::toString(built.takeError());
  KernelDef def = **built;
  def.operands[0].guardAlignElems = 6;
  EXPECT_TRUE(failsWith(verify(def), {"input 'x': alignment must be a power "
                                      "of two of elements, found 6"}));
}
