//===- tests/dsl/HashTest.cpp - Canonical text and content hash -----------===//
//
// The canonical text is the kernel part of the cache key: it must be the
// same in every process and for every build of the same program, and it
// must change whenever anything that can change the computed bits or the
// launch contract changes.
//
//===----------------------------------------------------------------------===//

#include "dsl/Folds.h"
#include "dsl/IR.h"
#include "tests/dsl/TemplateVariants.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

using namespace bitfold;
using namespace bitfold::dsl;
using bitfold::testing::TemplateVariant;
using bitfold::testing::templateVariants;

namespace {

using KernelDefRef = std::shared_ptr<const KernelDef>;

/// label -> hash of every template variant, built in this process.
std::map<std::string, std::string> hashesInThisProcess() {
  std::map<std::string, std::string> out;
  for (const TemplateVariant &v : templateVariants()) {
    auto def = bitfold::testing::buildVariant(v);
    if (!def) {
      ADD_FAILURE() << v.label << ": " << llvm::toString(def.takeError());
      continue;
    }
    out[v.label] = (*def)->hash;
  }
  return out;
}

/// Runs the print-hashes helper in a new process and parses its lines.
std::map<std::string, std::string> hashesInAnotherProcess(int perturb) {
  std::string command = std::string(BITFOLD_PRINT_HASHES) + " --perturb " +
                        std::to_string(perturb);
  std::map<std::string, std::string> out;
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << command;
    return out;
  }
  std::string text;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe))
    text.append(buffer, n);
  int status = pclose(pipe);
  EXPECT_EQ(status, 0) << command << " failed";
  std::istringstream lines(text);
  std::string label, hash;
  while (lines >> label >> hash)
    out[label] = hash;
  return out;
}

TEST(CanonicalText, HashesAreIdenticalAcrossProcesses) {
  std::map<std::string, std::string> here = hashesInThisProcess();
  std::map<std::string, std::string> first = hashesInAnotherProcess(0);
  std::map<std::string, std::string> second = hashesInAnotherProcess(777);
  ASSERT_EQ(here.size(), templateVariants().size());
  EXPECT_EQ(first, here);
  EXPECT_EQ(second, here);
}

TEST(CanonicalText, IsIdenticalAcrossTwoBuildsInOneProcess) {
  for (const TemplateVariant &v : templateVariants()) {
    auto a = bitfold::testing::buildVariant(v);
    auto b = bitfold::testing::buildVariant(v);
    ASSERT_TRUE(a && b) << v.label;
    EXPECT_NE((*a)->programId, (*b)->programId) << v.label;
    EXPECT_EQ((*a)->canonicalText, (*b)->canonicalText) << v.label;
    EXPECT_EQ((*a)->hash, (*b)->hash) << v.label;
    EXPECT_EQ((*a)->canonicalText, printCanonical(**a)) << v.label;
    EXPECT_EQ((*a)->hash, contentHash((*a)->canonicalText)) << v.label;
  }
}

TEST(CanonicalText, EveryTemplateVariantHasItsOwnHash) {
  std::map<std::string, std::string> byHash;
  for (auto &[label, hash] : hashesInThisProcess()) {
    auto [it, fresh] = byHash.emplace(hash, label);
    EXPECT_TRUE(fresh) << label << " and " << it->second << " share a hash";
  }
}

// ---- Every kind of change changes the hash ----------------------------------

/// Knobs of a small program that exercises every part of the canonical
/// text. Each HashChanges test turns one knob.
struct Knobs {
  Op combine = Op::Mul; ///< how x and scale are combined.
  float constant = 1.0f;
  DType xType = DType::BF16;
  DType outType = DType::BF16;
  TreeStage::Kind stageKind = TreeStage::ShuffleDown;
  bool ascendingStages = false;
  int threads = 32;
  int vector = 4;
  bool fmaCombiner = false;
  float emptyValue = 0.0f;
  Layout layout = Layout::RowMajor;
  IndexMap scaleMap = IndexMap::PerBatch;
  const char *scalarName = "eps";
  int64_t guardMultiple = 4, guardMax = 4096;
  int groups = 1;
  const char *outputName = "y";
  int alignX = 0;
};

KernelDefRef knobbed(const Knobs &k) {
  RowProgram p("knobbed");
  p.groups(k.groups);
  Dim S = p.dim("S");
  Expr x = p.input("x", k.xType, k.layout).row();
  Expr scale = p.input("scale", DType::BF16, Layout::RowMajor, k.scaleMap,
                       k.scaleMap == IndexMap::PerBatch ? S : Dim{})
                   .row();
  Expr eps = p.scalar(k.scalarName);

  FoldOrder o;
  o.name = "knobbed_order";
  o.threads = k.threads;
  o.vector = k.vector;
  std::vector<int> offsets = {16, 8, 4, 2, 1};
  if (k.ascendingStages)
    offsets = {1, 2, 4, 8, 16};
  for (int off : offsets)
    o.stages.push_back({k.stageKind, off});
  for (int off = 32; off < k.threads; off *= 2)
    o.stages.push_back({TreeStage::CrossWarp, off});

  auto combiner = std::make_shared<Combiner>(
      "squares", std::vector<std::string>{"acc"},
      std::vector<float>{k.emptyValue},
      [fma_ = k.fmaCombiner](const State &s, const Expr &v) {
        return State{{fma_ ? fma(v, v, s[0]) : s[0] + v * v}};
      },
      [](const State &a, const State &b) { return State{{a[0] + b[0]}}; });
  State ss = p.fold(x.to_f32(), o, combiner);
  Expr rstd = rsqrt_approx(div_rn(ss[0], p.cols().to_f32()) + eps);
  Expr mixed = k.combine == Op::Mul ? x * scale : x + scale;
  p.guardCols(k.guardMultiple, 4, k.guardMax);
  p.output(k.outputName, k.outType, k.layout,
           round(k.outType, mixed * rstd + Expr(k.constant)));
  if (k.alignX)
    p.guardAlign("x", k.alignX);
  auto built = p.build();
  if (!built) {
    ADD_FAILURE() << llvm::toString(built.takeError());
    return nullptr;
  }
  return *built;
}

/// The knobbed program with one change must hash differently from the
/// base, and the base must hash the same when built again.
void expectHashChanges(const Knobs &changed, const char *what) {
  KernelDefRef base = knobbed(Knobs{});
  KernelDefRef again = knobbed(Knobs{});
  KernelDefRef other = knobbed(changed);
  ASSERT_TRUE(base && again && other) << what;
  EXPECT_EQ(base->hash, again->hash);
  EXPECT_NE(base->canonicalText, other->canonicalText) << what;
  EXPECT_NE(base->hash, other->hash) << what << " left the hash unchanged";
}

TEST(HashChanges, WhenAnOpChanges) {
  expectHashChanges({.combine = Op::Add}, "x * scale -> x + scale");
}

TEST(HashChanges, WhenAConstantChangesInTheLastBit) {
  expectHashChanges({.constant = std::nextafter(1.0f, 2.0f)}, "1 -> 1 + ulp");
}

TEST(HashChanges, WhenAnInputDtypeChanges) {
  expectHashChanges({.xType = DType::F16}, "x bf16 -> f16");
}

TEST(HashChanges, WhenARoundingDtypeChanges) {
  expectHashChanges({.outType = DType::F16}, "round<bf16> -> round<f16>");
}

TEST(HashChanges, WhenAFoldStageKindChanges) {
  expectHashChanges({.stageKind = TreeStage::ButterflyXor},
                    "shfl_down -> bfly_xor");
}

TEST(HashChanges, WhenTheFoldStageOrderChanges) {
  expectHashChanges({.ascendingStages = true}, "16..1 -> 1..16");
}

TEST(HashChanges, WhenFoldThreadsChange) {
  expectHashChanges({.threads = 64}, "32 -> 64 threads");
}

TEST(HashChanges, WhenFoldVectorWidthChanges) {
  expectHashChanges({.vector = 8}, "vector 4 -> 8");
}

TEST(HashChanges, WhenACombinerBodyChanges) {
  expectHashChanges({.fmaCombiner = true}, "acc + x*x -> fma(x, x, acc)");
}

TEST(HashChanges, WhenACombinerEmptyStateChanges) {
  expectHashChanges({.emptyValue = -0.0f}, "empty 0 -> -0");
}

TEST(HashChanges, WhenALayoutChanges) {
  expectHashChanges({.layout = Layout::ChannelsLast},
                    "row_major -> channels_last");
}

TEST(HashChanges, WhenAnIndexMapChanges) {
  expectHashChanges({.scaleMap = IndexMap::PerColumn},
                    "per_batch -> per_column");
}

TEST(HashChanges, WhenAScalarChanges) {
  expectHashChanges({.scalarName = "epsilon"}, "scalar eps -> epsilon");
}

TEST(HashChanges, WhenTheGuardChanges) {
  expectHashChanges({.guardMultiple = 8}, "cols % 4 -> cols % 8");
  expectHashChanges({.guardMax = 8192}, "cols <= 4096 -> cols <= 8192");
}

TEST(HashChanges, WhenAnAlignmentGuardChanges) {
  expectHashChanges({.alignX = 4}, "x any address -> x aligned to 4");
}

TEST(HashChanges, WhenTheGroupCountChanges) {
  expectHashChanges({.groups = 2}, "1 -> 2 groups");
}

TEST(HashChanges, WhenAnOutputIsRenamed) {
  expectHashChanges({.outputName = "out"}, "output y -> out");
}

// ---- Golden text ------------------------------------------------------------

TEST(CanonicalText, GoldenTextOfATinyProgramIsStable) {
  RowProgram p("golden");
  Dim S = p.dim("S");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr s =
      p.input("scale", bf16, Layout::RowMajor, IndexMap::PerBatch, S).row();
  Expr eps = p.scalar("eps");
  p.guardCols(2, 2, 64);
  State st = p.fold(x.to_f32(), folds::serial(), folds::sum());
  p.output("y", bf16, Layout::RowMajor,
           round(bf16, fma(x, s, st[0] + eps) * Expr(-0.5f)));
  auto def = p.build();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  // x is widened twice (to_f32 and fma's implicit widening), so there are
  // two extend nodes, both printed. The hash is coreutils' sha256sum of the
  // text.
  const char *golden = R"(bitfold.row_program golden v1
groups 1
guard cols % 2 == 0, 2 <= cols <= 64
dim S
input x : bf16 row_major per_element
input scale : bf16 row_major per_batch(S)
scalar eps : f32
body:
  %0 = load x : bf16
  %1 = extend %0 : f32
  %2 = load scale : bf16
  %3 = extend %2 : f32
  %4 = extend %0 : f32
  fold 0 of %4 order serial threads 1 vector 1 stages []
  combiner sum (acc) empty (0x00000000) results (acc)
   push:
     %0 = arg 0 : f32
     %1 = arg 1 : f32
     %2 = add %0, %1 : f32
     return %2
   combine:
     %0 = arg 0 : f32
     %1 = arg 1 : f32
     %2 = add %0, %1 : f32
     return %2
   finish:
     %0 = arg 0 : f32
     return %0
  %5 = fold_value 0.acc : f32
  %6 = scalar eps : f32
  %7 = add %5, %6 : f32
  %8 = fma_rn %1, %3, %7 : f32
  %9 = const 0xbf000000 : f32
  %10 = mul %8, %9 : f32
  %11 = round to bf16 %10 : bf16
  output y : bf16 row_major = %11
)";
  EXPECT_EQ((*def)->canonicalText, golden);
  EXPECT_EQ((*def)->hash,
            "2ae0dd4707d522dae24c90f9140114a0a280dfc7cd8487a2ce9c6d706b8e0fd5");
}

} // namespace
