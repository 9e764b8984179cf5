//===- tests/codegen/CodegenTest.cpp - codegen on the CPU -----------------===//
//
// Every template, every config of its space at the seed shapes of
// docs/numerics.md: PTX generates, passes the bit-exactness audit, and ptxas
// accepts it for sm_90 with no register spills. Plus tile-config text and
// legality, the fold-lane mapping, other archs, errors and the CLI entry.
//
//===----------------------------------------------------------------------===//

#include "codegen/Assemble.h"
#include "codegen/Backend.h"
#include "codegen/Codegen.h"
#include "codegen/ExactRewrites.h"
#include "tools/ShapedTemplate.h"
#include "codegen/Plan.h"
#include "codegen/PtxAudit.h"
#include "templates/Templates.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <bit>
#include <cmath>
#include <mutex>
#include <thread>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::tools;

namespace {

struct SeedCase {
  std::string label;
  TemplateRequest req;
};

TemplateRequest req(std::string name, std::vector<int64_t> shape,
                    dsl::DType bias = dsl::DType::BF16, bool residual = false,
                    std::string gate = "full") {
  TemplateRequest r;
  r.name = std::move(name);
  r.tensorShape = std::move(shape);
  r.biasDtype = bias;
  r.residual = residual;
  r.gate = std::move(gate);
  return r;
}

void PrintTo(const SeedCase &c, std::ostream *os) { *os << c.label; }

/// Seed shapes of docs/numerics.md, one per distinct specialisation (the row
/// count only changes launch arguments).
std::vector<SeedCase> seedCases() {
  using dsl::DType;
  return {
      {"ln_modulate_1x4096x4096", req("ln_modulate", {1, 4096, 4096})},
      {"ln_modulate_2x1024x2240", req("ln_modulate", {2, 1024, 2240})},
      {"ln_modulate_1x1x128", req("ln_modulate", {1, 1, 128})},
      {"qk_layernorm_1x4360x32x128", req("qk_layernorm", {1, 4360, 32, 128})},
      {"conv_bias_1x96x4x480x832", req("conv_bias", {1, 96, 4, 480, 832})},
      {"conv_bias_residual_f32bias_1x96x4x480x832",
       req("conv_bias", {1, 96, 4, 480, 832}, DType::F32, true)},
      {"conv_bias_1x192x4x240x416", req("conv_bias", {1, 192, 4, 240, 416})},
      {"conv_bias_1x384x2x120x208", req("conv_bias", {1, 384, 2, 120, 208})},
      {"conv_bias_1x3x4x8x8", req("conv_bias", {1, 3, 4, 8, 8})},
      {"conv_bias_2x1152x9x7", req("conv_bias", {2, 1152, 9, 7})},
      {"residual_gate_1x4096x4096", req("residual_gate", {1, 4096, 4096})},
      {"residual_gate_per_batch_1x4096x4096",
       req("residual_gate", {1, 4096, 4096}, DType::BF16, false, "per_batch")},
      {"residual_gate_global_1x4096x4096",
       req("residual_gate", {1, 4096, 4096}, DType::BF16, false, "global")},
      {"rmsnorm_modulate_1x4096x4096", req("rmsnorm_modulate", {1, 4096, 4096})},
      {"rmsnorm_modulate_1x128x2048", req("rmsnorm_modulate", {1, 128, 2048})},
      {"wan_rmsnorm_silu_1x96x4x480x832",
       req("wan_rmsnorm_silu", {1, 96, 4, 480, 832})},
  };
}

/// Runs fn(i) for i < n on all cores.
void parallelFor(size_t n, const std::function<void(size_t)> &fn) {
  std::atomic<size_t> next{0};
  unsigned workers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < n;)
        fn(i);
    });
  for (std::thread &t : pool)
    t.join();
}

class AllConfigs : public ::testing::TestWithParam<SeedCase> {};

TEST_P(AllConfigs, PtxPassesAuditAndPtxasWithoutSpills) {
  if (findPtxas().empty())
    GTEST_SKIP() << "ptxas not found: PTX is not assembled (set BITFOLD_PTXAS)";
  const SeedCase &sc = GetParam();
  llvm::Expected<ShapedTemplate> st = shapeTemplate(sc.req);
  ASSERT_TRUE(bool(st)) << llvm::toString(st.takeError());
  std::vector<TileConfig> configs = enumerateConfigs(*st->def, st->shape);
  ASSERT_GE(configs.size(), 2u) << sc.label << ": config space too small";
  PtxAllowances allow = allowancesOf(*st->def);
  std::mutex mu;
  std::vector<std::string> failures;
  parallelFor(configs.size(), [&](size_t i) {
    CompileOptions opts;
    opts.cubinTool = "ptxas";
    llvm::Expected<CompiledKernel> k =
        compile(*st->def, st->shape, configs[i], opts);
    std::string why;
    if (!k) {
      why = llvm::toString(k.takeError());
    } else {
      if (llvm::Error e = auditPtx(*k, allow))
        why += llvm::toString(std::move(e));
      PtxasUsage u = parsePtxasLog(k->assemblerLog);
      if (u.spillBytes != 0 || u.stackBytes != 0)
        why += llvm::formatv("ptxas: {0} spill bytes, {1} stack bytes\n",
                             u.spillBytes, u.stackBytes);
      if (u.registers < 0)
        why += "ptxas -v printed no register count\n";
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back(sc.label + " shape " + st->shape.str() + " config " +
                         configs[i].str() + ":\n" + why);
    }
  });
  for (const std::string &f : failures)
    ADD_FAILURE() << f;
  std::cout << "[ configs  ] " << sc.label << ": " << configs.size()
            << " configs, default " << defaultConfig(*st->def, st->shape).str()
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(SeedShapes, AllConfigs,
                         ::testing::ValuesIn(seedCases()),
                         [](const auto &info) { return info.param.label; });

// ---- Tile configs ----------------------------------------------------------

TEST(TileConfig, TextRoundTrips) {
  TileConfig c{4, 64, 8, true};
  EXPECT_EQ(c.str(), "r4.t64.v8.p2");
  llvm::Expected<TileConfig> p = TileConfig::parse(c.str());
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(*p, c);
  // Channels-first pixels per thread: a fifth field, only when not 1.
  TileConfig px{128, 4, 1, false, 4};
  EXPECT_EQ(px.str(), "r128.t4.v1.p1.o4");
  EXPECT_EQ(px.ctaThreads(), 128);
  llvm::Expected<TileConfig> q = TileConfig::parse(px.str());
  ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
  EXPECT_EQ(*q, px);
  for (const char *bad : {"r4.t64.v8", "x4.t64.v8.p1", "r0.t64.v8.p1",
                          "r1.t64.v8.p3", "r1.t64.vx.p1", "r4.t64.v8.p1.o1",
                          "r4.t64.v8.p1.x2", "r4.t64.v8.p1.o2.o2"}) {
    llvm::Expected<TileConfig> q = TileConfig::parse(bad);
    EXPECT_FALSE(bool(q)) << bad;
    if (!q)
      llvm::consumeError(q.takeError());
  }
}

ShapedTemplate shaped(const TemplateRequest &r) {
  llvm::Expected<ShapedTemplate> st = shapeTemplate(r);
  if (!st) {
    ADD_FAILURE() << llvm::toString(st.takeError());
    return {};
  }
  return *st;
}

std::string errorOf(llvm::Error e) { return llvm::toString(std::move(e)); }

TEST(TileConfig, IllegalConfigsSayWhy) {
  ShapedTemplate ln = shaped(req("ln_modulate", {1, 4096, 4096}));
  EXPECT_NE(errorOf(checkConfig(*ln.def, ln.shape, {8, 256, 8, false}))
                .find("1024"),
            std::string::npos);
  // Two adjacent vec4 lanes per thread need two lanes per thread.
  EXPECT_NE(errorOf(checkConfig(*ln.def, ln.shape, {1, 128, 8, false}))
                .find("adjacent lanes"),
            std::string::npos);
  ShapeSpec misaligned = ln.shape;
  misaligned.alignBytes[0] = 4;
  EXPECT_NE(errorOf(checkConfig(*ln.def, misaligned, {1, 64, 8, false}))
                .find("aligned"),
            std::string::npos);
  // One pass with more threads than fold lanes would idle them (aten's
  // order for C = 96 has 32 lanes).
  ShapedTemplate wan = shaped(req("wan_rmsnorm_silu", {1, 96, 4, 480, 832}));
  EXPECT_NE(errorOf(checkConfig(*wan.def, wan.shape, {4, 64, 1, false}))
                .find("two passes"),
            std::string::npos);
  EXPECT_FALSE(bool(checkConfig(*wan.def, wan.shape, {4, 64, 1, true})));
}

TEST(TileConfig, AThreadsShareOfARowIsBounded) {
  // One thread per row on an elementwise row of 2^24 columns would unroll
  // 2^21 vector accesses (the codegen fuzzer's input, 3 GB before this
  // check): refused with the count, while a config that spreads the row
  // stays legal.
  ShapedTemplate rg =
      shaped(req("residual_gate", {1, 1, int64_t(1) << 24}));
  std::string why = errorOf(checkConfig(*rg.def, rg.shape, {32, 1, 8, false}));
  EXPECT_NE(why.find("2097152 vectors"), std::string::npos) << why;
  EXPECT_FALSE(bool(checkConfig(*rg.def, rg.shape, {1, 1024, 8, false})));
}

TEST(TileConfig, EverySeedSpaceHasSeveralConfigsAndALegalDefault) {
  for (const SeedCase &sc : seedCases()) {
    ShapedTemplate st = shaped(sc.req);
    std::vector<TileConfig> all = enumerateConfigs(*st.def, st.shape);
    EXPECT_GE(all.size(), 2u) << sc.label;
    TileConfig d = defaultConfig(*st.def, st.shape);
    EXPECT_FALSE(bool(checkConfig(*st.def, st.shape, d)))
        << sc.label << " default " << d.str();
  }
}

TEST(FoldMapping, AtenLayerNormOnSixtyFourThreads) {
  // T=128 lanes of vec4 on P=64 threads, 8-element accesses: A=2 adjacent
  // lanes per thread, k=2; offsets 16..2 are shuffles by o/2, offset 1 a
  // register merge, 64 goes through shared memory (thread offset 32), 32 is
  // a shuffle by 16.
  ShapedTemplate ln = shaped(req("ln_modulate", {1, 4096, 4096}));
  llvm::Expected<Plan> p = makePlan(*ln.def, ln.shape, {1, 64, 8, false});
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  const FoldPlan &f = p->folds[0];
  EXPECT_EQ(f.Pf, 64);
  EXPECT_EQ(f.k, 2);
  EXPECT_EQ(f.A, 2);
  EXPECT_EQ(f.access, 8);
  ASSERT_EQ(f.stages.size(), 7u);
  // aten order: 16, 8, 4, 2, 1, 64, 32.
  EXPECT_EQ(f.stages[0].where, StagePlan::Shuffle);
  EXPECT_EQ(f.stages[0].threadOffset, 8);
  EXPECT_EQ(f.stages[4].where, StagePlan::RegisterLo);
  EXPECT_EQ(f.stages[5].where, StagePlan::Shared); // thread offset 32
  EXPECT_EQ(f.stages[5].threadOffset, 32);
  EXPECT_EQ(f.stages[6].where, StagePlan::Shuffle); // thread offset 16
  EXPECT_TRUE(p->outputUsesFoldMapping);
  // On 32 threads the cross-warp stages become register merges.
  llvm::Expected<Plan> q = makePlan(*ln.def, ln.shape, {1, 32, 8, false});
  ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
  EXPECT_EQ(q->folds[0].stages[5].where, StagePlan::RegisterHi);
  EXPECT_EQ(q->folds[0].stages[6].where, StagePlan::Shuffle);
}

TEST(TileConfig, LayerNormRowsOf2048To2304ColumnsDefaultToOneWarp) {
  // aten's LayerNorm order spans four warps; rows of 64-72 elements a
  // thread run on one (its cross-warp stages in registers), one row a CTA;
  // narrower and wider rows keep more threads, and 32-lane orders
  // (hf_rmsnorm's) keep their own choice.
  auto dflt = [](const char *name, std::vector<int64_t> dims) {
    ShapedTemplate st = shaped(req(name, dims));
    return defaultConfig(*st.def, st.shape);
  };
  for (int64_t d : {2048, 2240, 2304}) {
    TileConfig c = dflt("ln_modulate", {2, 1024, d});
    EXPECT_EQ(c.threadsPerRow, 32) << d << ": " << c.str();
    EXPECT_EQ(c.rowsPerCta, 1) << d << ": " << c.str();
  }
  for (int64_t d : {1536, 2400, 4096})
    EXPECT_GT(dflt("ln_modulate", {2, 1024, d}).threadsPerRow, 32) << d;
  EXPECT_EQ(dflt("hf_rmsnorm", {1, 1024, 2048}).str(), "r2.t32.v4.p1");
  // Only from 1024 rows (the class's manyRows): decode-size rows keep more
  // threads a row (H100, (1,16,2240): r1.t32 3.38 us, r1.t64 2.72).
  for (std::vector<int64_t> rows : {std::vector<int64_t>{1, 1},
                                    {1, 16},
                                    {1, 1023}})
    for (int64_t d : {2048, 2240, 2304}) {
      rows.resize(2);
      rows.push_back(d);
      EXPECT_EQ(dflt("ln_modulate", rows).str(), "r1.t64.v8.p1")
          << rows[1] << " rows, " << d;
    }
  EXPECT_EQ(dflt("ln_modulate", {1, 1024, 2240}).str(), "r1.t32.v8.p1");
}

// ---- Targets, tools, errors, dumps -----------------------------------------

TEST(Codegen, OtherArchsGenerateAndAssemble) {
  bool havePtxas = !findPtxas().empty();
  for (const char *arch : {"sm_80", "sm_100"})
    for (const SeedCase &sc : {seedCases()[0], seedCases()[4],
                               seedCases()[13], seedCases()[15]}) {
      ShapedTemplate st = shaped(sc.req);
      CompileOptions opts;
      opts.arch = arch;
      opts.emitCubin = havePtxas;
      opts.cubinTool = "ptxas";
      opts.gridDependencyControl = true;
      llvm::Expected<CompiledKernel> k = compile(
          *st.def, st.shape, defaultConfig(*st.def, st.shape), opts);
      ASSERT_TRUE(bool(k)) << sc.label << " " << arch << ": "
                           << llvm::toString(k.takeError());
      EXPECT_NE(k->ptx.find(std::string(".target ") + arch), std::string::npos);
      // Asked for, grid dependency control exists from sm_90: kernels for
      // sm_100 wait for their predecessor before the first memory access,
      // kernels for sm_80 cannot (and are never launched with PDL).
      size_t wait = k->ptx.find("griddepcontrol.wait;");
      EXPECT_EQ(k->gridDependencyWait, std::string(arch) != "sm_80");
      if (k->gridDependencyWait) {
        ASSERT_NE(wait, std::string::npos) << sc.label << " " << arch;
        EXPECT_LT(wait, k->ptx.find("ld.global")) << sc.label << " " << arch;
        EXPECT_NE(k->ptx.find("griddepcontrol.launch_dependents;"),
                  std::string::npos);
      } else {
        EXPECT_EQ(k->ptx.find("griddepcontrol"), std::string::npos);
      }
      llvm::Error audit = auditPtx(*k, allowancesOf(*st.def));
      EXPECT_FALSE(bool(audit)) << sc.label << " " << arch << ": "
                                << (audit ? llvm::toString(std::move(audit))
                                          : std::string());
    }
}

TEST(Codegen, SixtyFourBitIndexingAboveTwoToTheThirtyOne) {
  ShapedTemplate st = shaped(req("conv_bias", {1, 96, 4, 480, 832}));
  st.shape.maxElementOffset = int64_t(1) << 32;
  CompileOptions opts;
  opts.emitCubin = false;
  llvm::Expected<CompiledKernel> k =
      compile(*st.def, st.shape, {64, 4, 8, false}, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_NE(k->ptx.find("mul.lo.s64"), std::string::npos);
}

// Two-level rows (keys::RowLevels) are constants of the shape: every config
// of qk_layernorm's space generates, passes the audit and assembles with
// them; they change the PTX, and all-zero levels change nothing.
TEST(Codegen, TwoLevelRowsCompileForEveryConfig) {
  ShapedTemplate st = shaped(req("qk_layernorm", {1, 4096, 32, 128}));
  ASSERT_TRUE(st.def);
  ShapeSpec strided = st.shape;
  strided.rowLevels.assign(st.def->operands.size(), RowLevels());
  ShapeSpec zero = strided;
  strided.rowLevels[0] = {32, 3 * 32 * 128};
  const bool assemble = !findPtxas().empty();
  PtxAllowances allow = allowancesOf(*st.def);
  std::vector<TileConfig> configs = enumerateConfigs(*st.def, strided);
  ASSERT_EQ(configs.size(), enumerateConfigs(*st.def, st.shape).size());
  std::mutex mu;
  std::vector<std::string> failures;
  parallelFor(configs.size(), [&](size_t i) {
    CompileOptions opts;
    opts.emitCubin = assemble;
    opts.cubinTool = "ptxas";
    auto two = compile(*st.def, strided, configs[i], opts);
    opts.emitCubin = false;
    auto one = compile(*st.def, st.shape, configs[i], opts);
    auto same = compile(*st.def, zero, configs[i], opts);
    std::string why;
    if (!two || !one || !same) {
      why = !two ? errorOf(two.takeError()) : "";
      why += !one ? errorOf(one.takeError()) : "";
      why += !same ? errorOf(same.takeError()) : "";
    } else {
      if (llvm::Error e = auditPtx(*two, allow))
        why += errorOf(std::move(e));
      if (two->ptx == one->ptx)
        why += "two-level rows left the PTX unchanged\n";
      if (same->ptx != one->ptx)
        why += "all-zero row levels changed the PTX\n";
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back(configs[i].str() + ": " + why);
    }
  });
  for (const std::string &f : failures)
    ADD_FAILURE() << f;
  // Only per-element row-major operands take them.
  ShapedTemplate ln = shaped(req("ln_modulate", {2, 1024, 2240}));
  ASSERT_TRUE(ln.def);
  ShapeSpec bad = ln.shape;
  bad.rowLevels.assign(ln.def->operands.size(), RowLevels());
  bad.rowLevels[1] = {4, 100000}; // the per-batch scale
  llvm::Error e = checkConfig(*ln.def, bad, defaultConfig(*ln.def, ln.shape));
  EXPECT_NE(errorOf(std::move(e)).find("operand 'scale' cannot take "
                                       "two-level rows 4x100000"),
            std::string::npos);
}

TEST(Codegen, NvJitLinkWhenAvailable) {
  ShapedTemplate st = shaped(req("residual_gate", {1, 4096, 4096}));
  CompileOptions opts;
  opts.cubinTool = "nvJitLink";
  llvm::Expected<CompiledKernel> k =
      compile(*st.def, st.shape, defaultConfig(*st.def, st.shape), opts);
  if (!k) {
    std::string e = llvm::toString(k.takeError());
    if (e.find("not found") != std::string::npos)
      GTEST_SKIP() << e;
    FAIL() << e;
  }
  EXPECT_EQ(k->cubinTool, "nvJitLink");
  EXPECT_GT(k->cubin.size(), 1000u);
  EXPECT_EQ(parsePtxasLog(k->assemblerLog).spillBytes, 0);
}

/// The channels-last Wan norm's default at its seed shape through `tool`,
/// or why it cannot.
llvm::Expected<CompiledKernel> wanThrough(llvm::StringRef tool) {
  ShapedTemplate st = shaped(req("wan_rmsnorm_silu", {1, 96, 4, 480, 832}));
  CompileOptions opts;
  opts.cubinTool = tool.str();
  return compile(*st.def, st.shape, defaultConfig(*st.def, st.shape), opts);
}

TEST(Codegen, ThePtxCompilerApiIsTheDefaultAndCompilesWholeProgram) {
  llvm::Expected<CompiledKernel> pc = wanThrough("ptxcompiler");
  if (!pc) {
    std::string e = llvm::toString(pc.takeError());
    if (e.find("not found") != std::string::npos)
      GTEST_SKIP() << e << " (a build without cmake/PtxCompiler.cmake's library)";
    FAIL() << e;
  }
  EXPECT_EQ(pc->cubinTool, "ptxcompiler");
  EXPECT_EQ(llvm::StringRef(pc->cubin.data(), 4), "\x7f" "ELF");
  EXPECT_NE(assemblerVersion().find("PTX Compiler API 13."), std::string::npos)
      << assemblerVersion();
  // The default when it loads.
  llvm::Expected<CompiledKernel> dflt = wanThrough("");
  ASSERT_TRUE(bool(dflt)) << llvm::toString(dflt.takeError());
  EXPECT_EQ(dflt->cubinTool, "ptxcompiler");
  EXPECT_EQ(dflt->cubin, pc->cubin);
  PtxasUsage u = parsePtxasLog(pc->assemblerLog);
  EXPECT_EQ(u.spillBytes, 0);
  // Whole-program: the registers of ptxas without -c (56 with CUDA 13.0),
  // fewer than nvJitLink's relocatable allocation (65).
  EXPECT_LE(u.registers, 60) << pc->assemblerLog;
  if (!findPtxas().empty()) {
    llvm::Expected<CompiledKernel> px = wanThrough("ptxas");
    ASSERT_TRUE(bool(px)) << llvm::toString(px.takeError());
    EXPECT_EQ(parsePtxasLog(px->assemblerLog).registers, u.registers);
  }
  if (llvm::Expected<CompiledKernel> jl = wanThrough("nvJitLink"))
    EXPECT_GT(parsePtxasLog(jl->assemblerLog).registers, u.registers);
  else
    llvm::consumeError(jl.takeError());
}

// The quick-first tier assembles at -O0 (keys::launchOptions): every tool
// must take the level (its cubin differs from -O3's, which is the default's)
// and refuse one outside 0-3.
TEST(Codegen, EveryCubinToolTakesTheOptimisationLevel) {
  llvm::Expected<CompiledKernel> k = wanThrough("");
  if (!k)
    GTEST_SKIP() << llvm::toString(k.takeError());
  int tried = 0;
  for (const char *tool : {"ptxcompiler", "nvJitLink", "ptxas"}) {
    llvm::Expected<AssembledCubin> o3 = assemble(k->ptx, "sm_90", tool, 3);
    if (!o3) {
      llvm::consumeError(o3.takeError()); // not on this machine
      continue;
    }
    ++tried;
    llvm::Expected<AssembledCubin> dflt = assemble(k->ptx, "sm_90", tool);
    llvm::Expected<AssembledCubin> o0 = assemble(k->ptx, "sm_90", tool, 0);
    ASSERT_TRUE(dflt && o0) << tool;
    EXPECT_EQ(dflt->cubin, o3->cubin) << tool;
    EXPECT_NE(o0->cubin, o3->cubin) << tool;
    EXPECT_EQ(parsePtxasLog(o0->log).spillBytes, 0) << tool;
    for (int bad : {-1, 4}) {
      llvm::Expected<AssembledCubin> e = assemble(k->ptx, "sm_90", tool, bad);
      ASSERT_FALSE(bool(e)) << tool << " -O" << bad;
      EXPECT_NE(llvm::toString(e.takeError()).find("level"), std::string::npos);
    }
  }
  if (!tried)
    GTEST_SKIP() << "no cubin tool on this machine";
}

TEST(Codegen, ThePtxCompilerApiCompilesFromManyThreadsAtOnce) {
  // The runtime's compile pool and `bitfold prebuild -j` call it
  // concurrently: every thread's cubin must equal the serial one.
  llvm::Expected<CompiledKernel> probe = wanThrough("ptxcompiler");
  if (!probe) {
    GTEST_SKIP() << llvm::toString(probe.takeError());
  }
  std::vector<std::string> ptx;
  for (const char *name : {"ln_modulate", "residual_gate", "hf_rmsnorm"}) {
    ShapedTemplate st = shaped(req(name, {1, 1024, 2048}));
    CompileOptions opts;
    opts.emitCubin = false;
    llvm::Expected<CompiledKernel> k =
        compile(*st.def, st.shape, defaultConfig(*st.def, st.shape), opts);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    ptx.push_back(k->ptx);
  }
  ptx.push_back(probe->ptx);
  std::vector<std::vector<char>> serial;
  for (const std::string &p : ptx) {
    llvm::Expected<AssembledCubin> c = assemble(p, "sm_90", "ptxcompiler");
    ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
    serial.push_back(c->cubin);
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < ptx.size(); ++i) {
        size_t j = (i + t) % ptx.size();
        llvm::Expected<AssembledCubin> c =
            assemble(ptx[j], "sm_90", "ptxcompiler");
        if (!c) {
          llvm::consumeError(c.takeError());
          ++mismatches;
        } else if (c->cubin != serial[j]) {
          ++mismatches;
        }
      }
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Codegen, BadPtxReachesThePtxCompilerApiAndComesBackAsItsError) {
  llvm::Expected<CompiledKernel> pc = wanThrough("ptxcompiler");
  if (!pc) {
    GTEST_SKIP() << llvm::toString(pc.takeError());
  }
  llvm::Expected<AssembledCubin> bad =
      assemble(".version 8.0\n.target sm_90\n.address_size 64\n"
               ".visible .entry k() { bogus.op; }\n",
               "sm_90", "ptxcompiler");
  ASSERT_FALSE(bool(bad));
  std::string e = llvm::toString(bad.takeError());
  EXPECT_NE(e.find("PTX Compiler API failed"), std::string::npos) << e;
  EXPECT_NE(e.find("bogus"), std::string::npos) << e;
  llvm::Expected<AssembledCubin> none = assemble("", "sm_90", "ptxcompiler");
  EXPECT_FALSE(bool(none));
  llvm::consumeError(none.takeError());
  llvm::Expected<AssembledCubin> tool = assemble("", "sm_90", "ptxcompilr");
  ASSERT_FALSE(bool(tool));
  EXPECT_NE(llvm::toString(tool.takeError()).find("ptxcompiler, nvJitLink"),
            std::string::npos);
}

TEST(Codegen, ErrorsNameTheStageAndDumpsHoldEveryStage) {
  ShapedTemplate st = shaped(req("ln_modulate", {1, 4096, 4096}));
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("bitfold-dump", dir));
  CompileOptions opts;
  opts.dumpDir = std::string(dir);
  opts.emitCubin = !findPtxas().empty();
  opts.cubinTool = "ptxas";
  llvm::Expected<CompiledKernel> bad =
      compile(*st.def, st.shape, {8, 256, 8, false}, opts);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("stage 'plan'"),
            std::string::npos);
  llvm::Expected<CompiledKernel> k =
      compile(*st.def, st.shape, {2, 64, 8, false}, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  std::vector<std::string> want = {"program.txt", "mlir-built.mlir",
                                   "arith-to-llvm.mlir", "llvm-before-opt.ll",
                                   "llvm-after-opt.ll", "kernel.ptx"};
  if (opts.emitCubin) {
    want.push_back("kernel.cubin");
    want.push_back("ptxas-v.txt");
  }
  std::error_code ec;
  std::vector<std::string> have;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    have.push_back(llvm::sys::path::filename(it->path()).str());
  for (const std::string &w : want)
    EXPECT_TRUE(llvm::any_of(have, [&](const std::string &h) {
      return llvm::StringRef(h).ends_with(w);
    })) << "missing dump " << w;
  std::vector<std::string> stages;
  for (const StageTime &t : k->times)
    stages.push_back(t.stage);
  EXPECT_EQ(stages.front(), "plan");
  EXPECT_EQ(stages[stages.size() - (opts.emitCubin ? 2 : 1)], "ptx");
  llvm::sys::fs::remove_directories(dir);
}

} // namespace

namespace {

/// nvcc's reciprocal of `n` from the approximation `r`, on the host with
/// IEEE fma (the sub.ftz cannot meet a subnormal here: |e| >= ulp(r) or 0).
float nvccReciprocalFrom(float n, float r) {
  float e = std::fma(n, r, -1.0f);
  return std::fma(r, -0.0f - e, r);
}

} // namespace

// The lowering replaces nvcc's reciprocal of a compile-time integer count
// 1 <= n < 2^21 by the constant RN(1/n) (docs/design-notes.md, "Exact
// rewrites in codegen"). The argument only assumes what the PTX ISA says
// of rcp.approx (within 1 ulp); check it for every n and every float within
// 2 ulp of 1/n (twice the bound, for margin): the Newton step must give
// RN(1/n) from each. (With 2 ulp the first failure is at n ~ 2^21.4; with
// 1 ulp, none below 2^24 - 1.)
TEST(ExactRewrites, NvccReciprocalOfSmallIntegersIsRoundToNearest) {
  int64_t checked = 0;
  const float inf = INFINITY;
  for (uint32_t i = 1; i < (1u << 21); ++i) {
    const float n = float(i);
    const float exact = 1.0f / n; // IEEE division: RN(1/n)
    const double q = 1.0 / double(i);
    const float c = float(q);
    const double ulp = double(std::nextafter(c, inf) - c);
    float r = c;
    for (int k = 0; k < 3; ++k)
      r = std::nextafter(r, 0.0f);
    for (int k = 0; k < 7; ++k, r = std::nextafter(r, inf)) {
      if (std::fabs(double(r) - q) > 2 * ulp)
        continue;
      float got = nvccReciprocalFrom(n, r);
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(exact))
          << "n = " << i << ", rcp.approx = " << r;
      ++checked;
    }
  }
  EXPECT_GT(checked, int64_t(4) << 21); // at least four guesses per n
}

// Every codegen switch reads its variable through envSwitch: a default-on
// switch is off only at "0", and BITFOLD_ROLLED_ROWS is "1" Always, "0"
// Never, anything else Wide (the values each accepted before).
TEST(Environment, SwitchesAcceptTheValuesTheyAlwaysDid) {
  const std::pair<const char *, bool (*)()> flags[] = {
      {"BITFOLD_ROW_DIVISION", rowDivisionEnabled},
      {"BITFOLD_ROW_BOUND", rowBoundEnabled},
      {"BITFOLD_ROUNDED_DIVISION", roundedDivisionEnabled},
      {"BITFOLD_FAST_SILU", fastSiluEnabled},
      {"BITFOLD_FALLBACK_LOOPS", fallbackLoopsEnabled},
      {"BITFOLD_SM90_SILU", sm90SiluModelsEnabled}};
  for (auto [name, enabled] : flags) {
    ::unsetenv(name);
    EXPECT_TRUE(enabled()) << name << " unset";
    for (const char *on : {"1", "", "yes", "00", "off"}) {
      ::setenv(name, on, 1);
      EXPECT_TRUE(enabled()) << name << "=" << on;
    }
    ::setenv(name, "0", 1);
    EXPECT_FALSE(enabled()) << name << "=0";
    ::unsetenv(name);
  }
  const char *rolled = "BITFOLD_ROLLED_ROWS";
  ::unsetenv(rolled);
  EXPECT_EQ(rolledRowsMode(), RolledRowsMode::Wide);
  ::setenv(rolled, "1", 1);
  EXPECT_EQ(rolledRowsMode(), RolledRowsMode::Always);
  ::setenv(rolled, "0", 1);
  EXPECT_EQ(rolledRowsMode(), RolledRowsMode::Never);
  ::setenv(rolled, "2", 1);
  EXPECT_EQ(rolledRowsMode(), RolledRowsMode::Wide);
  ::unsetenv(rolled);
}
