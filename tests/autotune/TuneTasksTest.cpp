//===- tests/autotune/TuneTasksTest.cpp - Shapes files, shards, classes ---===//

#include "TestEnv.h"

#include "autotune/ShapeClass.h"
#include "autotune/TuneTasks.h"
#include "keys/TuneKey.h"

#include "templates/Problem.h"
#include "templates/Templates.h"

#include "bitfold/Config.h"

#include <set>

using namespace bitfold;
using namespace bitfold::autotune;

namespace {

TEST(ShapesFile, ParsesTemplateShapeAndParams) {
  auto r = parseShapesFile(R"([
    {"template": "conv_bias", "shape": "1,96,4,480,832",
     "params": {"dtype": "bf16", "residual": true, "bias_dtype": "f32"}},
    {"template": "ln_modulate", "shape": "1,4096,4096"}])");
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].paramsText(), "bias_dtype=f32 dtype=bf16 residual=1");
  EXPECT_EQ((*r)[1].label(), "ln_modulate 1,4096,4096");
  auto again = parseShapesFile(shapesFileText(*r));
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(shapesFileText(*again), shapesFileText(*r));
}

TEST(ShapesFile, RejectsUnknownKeysAndMissingFields) {
  auto a = parseShapesFile(R"([{"template": "x", "shapes": "1"}])");
  ASSERT_FALSE(bool(a));
  EXPECT_NE(llvm::toString(a.takeError()).find("'shape'"), std::string::npos);
  auto b = parseShapesFile(R"([{"template": "x", "shape": "1", "prams": {}}])");
  ASSERT_FALSE(bool(b));
  EXPECT_NE(llvm::toString(b.takeError()).find("prams"), std::string::npos);
  auto c = parseShapesFile(R"({"template": "x"})");
  ASSERT_FALSE(bool(c));
  llvm::consumeError(c.takeError());
}

TEST(ShapesFile, SeedShapesFileHoldsTheNumericsSeedsOfTheBitExactTemplates) {
  auto r = loadShapesFile(BITFOLD_SOURCE_DIR "/bench/shapes/seed-shapes.json");
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  std::set<std::pair<std::string, std::string>> inFile, expected;
  for (const ShapeRequest &s : *r)
    inFile.insert({s.templateName, s.shape});
  for (const templates::DescriptorRef &t :
       templates::Registry::global().all())
    if (t->bitExact)
      for (const std::string &s : t->seedShapes)
        expected.insert({t->name, s});
  EXPECT_EQ(inFile, expected);
  for (const ShapeRequest &s : *r) {
    auto shape = templates::parseShape(s.templateName, s.shape);
    EXPECT_TRUE(bool(shape)) << s.label();
    if (!shape)
      llvm::consumeError(shape.takeError());
  }
}

TEST(Shard, ParsesAndRejectsBadText) {
  auto s = Shard::parse("2/5");
  ASSERT_TRUE(bool(s));
  EXPECT_EQ(s->index, 2u);
  EXPECT_EQ(s->count, 5u);
  for (const char *bad : {"5/5", "1", "a/b", "0/0"}) {
    auto e = Shard::parse(bad);
    EXPECT_FALSE(bool(e)) << bad;
    if (!e)
      llvm::consumeError(e.takeError());
  }
}

TEST(Shard, ShardsPartitionTasksAndGpuWorkersPartitionTheirShard) {
  const size_t tasks = 37;
  std::multiset<size_t> seen;
  for (unsigned i = 0; i < 3; ++i) {
    Shard host{i, 3};
    std::set<size_t> hostTasks, workerTasks;
    for (size_t t = 0; t < tasks; ++t)
      if (host.owns(t))
        hostTasks.insert(t);
    for (unsigned j = 0; j < 4; ++j) {
      Shard w = host.split(j, 4);
      for (size_t t = 0; t < tasks; ++t)
        if (w.owns(t)) {
          EXPECT_TRUE(workerTasks.insert(t).second) << "task twice: " << t;
          seen.insert(t);
        }
    }
    EXPECT_EQ(workerTasks, hostTasks);
  }
  EXPECT_EQ(seen.size(), tasks); // every task exactly once
  for (size_t t = 0; t < tasks; ++t)
    EXPECT_EQ(seen.count(t), 1u);
}

TEST(ShapeClass, TunedClassBucketsRowsAndMatchesTheRuntimesAlignment) {
  auto def = templates::lnModulate();
  ASSERT_TRUE(bool(def));
  auto shape = templates::parseShape("ln_modulate", "2,1024,2240");
  ASSERT_TRUE(bool(shape));
  keys::ShapeClass cls = tunedShapeClass(**def, *shape);
  keys::ShapeSpec s = cls.shapeSpec();
  EXPECT_EQ(s.cols, 2240);
  ASSERT_EQ(s.alignBytes.size(), (*def)->operands.size());
  for (int a : s.alignBytes)
    EXPECT_EQ(a, 16); // 2240 * 2 bytes = 4480 = 16 * 280
  EXPECT_EQ(cls.str(), s.str() + "/r2048");
  // 2048 LayerNorm rows of 2240 columns: the many-rows class (".R").
  EXPECT_EQ(s.str(), "c2240.a16-16-16-16.o32.R");
  // 130 columns: 260-byte rows. x has many rows (4-byte aligned); scale and
  // shift hold one row per batch, one batch here: only their base counts,
  // as in the runtime's binding.
  auto odd = templates::parseShape("ln_modulate", "1,2,130");
  ASSERT_TRUE(bool(odd));
  EXPECT_EQ(tunedShapeClass(**def, *odd).shapeSpec().str(),
            "c130.a4-16-16-4.o32");

  auto conv = templates::convBias(dsl::DType::BF16, dsl::DType::BF16, false);
  ASSERT_TRUE(bool(conv));
  auto big = templates::parseShape("conv_bias", "1,96,4,480,832");
  ASSERT_TRUE(bool(big)); // 153M elements: still 32-bit offsets
  EXPECT_FALSE(tunedShapeClass(**conv, *big).index64);
  EXPECT_EQ(keys::dtypesText(**def).substr(0, 7), "x:bf16,");
}

TEST(ShapeClass, TuneKeyIsWhatTheTunerRecordsAndTheRuntimeLooksUp) {
  auto def = templates::lnModulate();
  ASSERT_TRUE(bool(def));
  TuneEnvironment env = keys::currentEnvironment("NVIDIA H200", "sm_90", "tc 1");
  EXPECT_EQ(env.gpuName, "NVIDIA H200");
  EXPECT_EQ(env.arch, "sm_90");
  EXPECT_EQ(env.bitfoldVersion, BITFOLD_VERSION);
  EXPECT_EQ(env.llvmVersion, BITFOLD_LLVM_VERSION);
  EXPECT_EQ(env.toolchain, "tc 1");
  TuneKey k = keys::tuneKeyFor(**def, "c4096.a16.o32/r4096", env);
  EXPECT_EQ(k.kernelName, "ln_modulate");
  EXPECT_EQ(k.kernelHash, (*def)->hash);
  EXPECT_EQ(k.shapeClass, "c4096.a16.o32/r4096");
  EXPECT_EQ(k.dtypes, keys::dtypesText(**def));
  EXPECT_EQ(k.env, env);
}

TEST(Report, TableAndMarkdownHaveOneRowPerShape) {
  std::vector<ReportRow> rows(2);
  rows[0].label = "ln_modulate 1,4096,4096 dtype=bf16";
  rows[0].configs = rows[0].timed = 12;
  rows[0].cut = 4;
  rows[0].seconds = 3.5;
  rows[0].winner = "r2.t64.v8.p1";
  rows[0].winnerUs = 20;
  rows[0].defaultConfig = "r1.t128.v8.p1";
  rows[0].defaultUs = 30;
  rows[0].status = "ok";
  rows[1].label = "rmsnorm_modulate 1,1,100";
  rows[1].status = "error: D";
  std::string md = formatReportMarkdown(rows, "t");
  EXPECT_NE(md.find("| ln_modulate 1,4096,4096 dtype=bf16 | 12 (4 cut) | 3.5 | "
                    "r2.t64.v8.p1 | 20.00 | r1.t128.v8.p1 | 30.00 | 1.50x | ok |"),
            std::string::npos)
      << md;
  EXPECT_NE(formatReportTable(rows).find("1.50x"), std::string::npos);
  auto back = parseReportRowsJson(reportRowsJson(rows));
  ASSERT_TRUE(bool(back));
  EXPECT_EQ(reportRowsJson(*back), reportRowsJson(rows));
}

} // namespace
