//===- tests/codegen/AtenFoldTest.cpp - aten's reduction order in codegen -===//
//
// The fold-order extensions codegen maps (docs/aten-reduce.md section 7):
// accumulators per lane, aligned vectors without head or tail. For the two
// templates that use them (wan_rmsnorm_silu, hf_rmsnorm): every config of
// the space puts each column in the order's lane and accumulator, in the
// lane's push order, and compiles to audited PTX that ptxas takes (the
// default config without spills). Rows with a head and tail (C >= 128 not
// a multiple of V): every config, at every row phase, pushes as the
// interpreter does. Orders codegen does not map (CTA groups) are refused
// naming the order, for every config.
//
//===----------------------------------------------------------------------===//

#include "codegen/Assemble.h"
#include "codegen/Codegen.h"
#include "codegen/Plan.h"
#include "codegen/PtxAudit.h"
#include "dsl/Folds.h"
#include "dsl/Interp.h"
#include "templates/Problem.h"
#include "tools/ShapedTemplate.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <tuple>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::tools;

namespace {

struct AtenCase {
  std::string kernel, params, shape;
};

void PrintTo(const AtenCase &c, std::ostream *os) {
  *os << c.kernel << " " << c.params << " " << c.shape;
}

std::vector<AtenCase> atenCases() {
  return {
      {"wan_rmsnorm_silu", "bias=0", "1,96,4,480,832"},
      {"wan_rmsnorm_silu", "bias=0", "1,192,4,240,416"},
      {"wan_rmsnorm_silu", "bias=1,conv_bias=1", "1,384,2,120,208"},
      {"wan_rmsnorm_silu", "form=f32,gamma=f32", "1,384,2,120,208"},
      {"wan_rmsnorm_silu", "dtype=f32", "1,96,1,60,104"},
      {"wan_rmsnorm_silu", "", "1,512,1,30,52"},
      {"wan_rmsnorm_silu", "", "1,1024,1,30,52"},
      {"wan_rmsnorm_silu", "dtype=f16", "1,100,2,16,16"},
      // Channels-first (NC[D]HW): one thread per pixel, the fold along C.
      {"wan_rmsnorm_silu", "layout=channels_first", "1,96,4,60,104"},
      {"wan_rmsnorm_silu",
       "layout=channels_first,form=f32,gamma=f32,conv_bias=1", "1,64,2,30,52"},
      {"wan_rmsnorm_silu", "layout=channels_first,dtype=f32", "1,128,1,30,52"},
      {"wan_rmsnorm_silu", "layout=channels_first,outvec=1,dtype=f16",
       "1,192,1,15,13"},
      {"wan_rmsnorm_silu", "layout=channels_first,outvec=2,bias=0",
       "1,12,2,5,7"},
      // Wider rows run rolled (t1.v1.p2): the fold a loop over C.
      {"wan_rmsnorm_silu", "layout=channels_first", "1,192,2,30,52"},
      {"wan_rmsnorm_silu", "layout=channels_first,conv_bias=1", "1,384,2,30,52"},
      {"wan_rmsnorm_silu", "layout=channels_first,form=f32,outvec=1",
       "1,333,1,15,13"},
      {"wan_rmsnorm_silu", "layout=channels_first,dtype=f32", "1,512,1,30,52"},
      {"hf_rmsnorm", "", "1,4096,4096"},
      {"hf_rmsnorm", "residual=1", "8,1024,5120"},
      {"hf_rmsnorm", "modulate=1", "1,1024,2048"},
      {"hf_rmsnorm", "weight=f32", "1,512,3072"},
      {"hf_rmsnorm", "", "1,256,1024"},
      {"hf_rmsnorm", "", "1,256,8192"},
      // Decode rows: one definition per row class, up to 512 lanes a row.
      {"hf_rmsnorm", "", "1,1,4096"},
      {"hf_rmsnorm", "residual=1", "1,3,2048"},
      {"hf_rmsnorm", "weight=f32", "1,7,5120"},
      {"hf_rmsnorm", "", "1,9,8192"},
      {"hf_rmsnorm", "modulate=1", "2,1,3072"},
      // f32 rows with a residual: 8 bytes a column on T = 32 lanes, served
      // by two passes only at D ~3600..8160.
      {"hf_rmsnorm", "dtype=f32,residual=1", "1,64,4096"},
      {"hf_rmsnorm", "dtype=f32,residual=1", "1,64,8192"},
      {"wan_rmsnorm_silu", "bias=0", "1,96,1,1,5"},
      {"wan_rmsnorm_silu", "form=f32", "1,384,1,1,1"},
  };
}

std::string label(const AtenCase &c) {
  return c.kernel + " " + c.params + " " + c.shape;
}

ShapedTemplate shapedCase(const AtenCase &c) {
  llvm::Expected<templates::Problem> p =
      templates::makeProblem(c.kernel, c.params, c.shape);
  if (!p) {
    ADD_FAILURE() << label(c) << ": " << llvm::toString(p.takeError());
    return {};
  }
  return shapeProblem(*p);
}

/// Where the config's threads push column c: (virtual lane, accumulator),
/// in the order emitPushes walks them (FoldPlan's mapping, Plan.h).
struct Push {
  int64_t lane;
  int acc;
  int64_t col;
};
std::vector<Push> plannedPushes(const FoldPlan &fp, int64_t cols) {
  std::vector<Push> out;
  for (int p = 0; p < fp.Pf; ++p)
    for (int hi = 0; hi < fp.k / fp.A; ++hi)
      for (int lo = 0; lo < fp.A; ++lo)
        for (int64_t m = 0; m < fp.reps; ++m)
          for (int e = 0; e < fp.V; ++e) {
            int64_t lane = lo + int64_t(fp.A) * (p + int64_t(fp.Pf) * hi);
            int64_t col =
                (int64_t(fp.A) * (p + int64_t(fp.Pf) * hi) + fp.T * m) * fp.V +
                lo * fp.V + e;
            // Split accumulators: virtual lane t + T0 * g is the order's
            // lane t, accumulator g.
            const int64_t T0 = fp.treeLanes();
            if (col < cols && fp.split > 1)
              out.push_back({lane % T0, int(lane / T0), col});
            else if (col < cols)
              out.push_back(
                  {lane, fp.byElement ? e : int(m % fp.acc), col});
          }
  return out;
}

/// The order's own definition (dsl/IR.h FoldOrder, whole vectors): lane l
/// pushes vectors l, l + T, ...; element e of its j-th vector goes to
/// accumulator e (VectorElement) or j % A (RoundRobin).
std::vector<Push> orderPushes(const dsl::FoldOrder &o, int64_t cols) {
  std::vector<Push> out;
  const int64_t vectors = (cols + o.vector - 1) / o.vector;
  const bool byElement =
      o.accumulatorMap == dsl::FoldOrder::AccumulatorMap::VectorElement;
  for (int64_t l = 0; l < o.threads; ++l)
    for (int64_t v = l, j = 0; v < vectors; v += o.threads, ++j)
      for (int e = 0; e < o.vector && v * o.vector + e < cols; ++e)
        out.push_back({l, byElement ? e : int(j % o.accumulators),
                       v * o.vector + e});
  return out;
}

/// Per (lane, accumulator), the columns in push order.
std::map<std::pair<int64_t, int>, std::vector<int64_t>>
byState(const std::vector<Push> &pushes) {
  std::map<std::pair<int64_t, int>, std::vector<int64_t>> out;
  for (const Push &p : pushes)
    out[{p.lane, p.acc}].push_back(p.col);
  return out;
}

class AtenConfigs : public ::testing::TestWithParam<AtenCase> {};

TEST_P(AtenConfigs, EveryConfigPushesEachColumnIntoTheOrdersState) {
  ShapedTemplate st = shapedCase(GetParam());
  ASSERT_TRUE(st.def);
  std::vector<TileConfig> configs = enumerateConfigs(*st.def, st.shape);
  ASSERT_GE(configs.size(), 2u) << label(GetParam()) << ": config space";
  const dsl::FoldOrder &o = st.def->folds[0].order;
  auto want = byState(orderPushes(o, st.shape.cols));
  for (const TileConfig &c : configs) {
    llvm::Expected<Plan> p = makePlan(*st.def, st.shape, c);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_EQ(p->folds[0].acc * p->folds[0].split, o.accumulators);
    auto got = byState(plannedPushes(p->folds[0], st.shape.cols));
    EXPECT_EQ(got, want) << label(GetParam()) << " shape "
                         << st.shape.str() << " config " << c.str()
                         << ": a column lands in another lane or "
                            "accumulator, or out of push order";
  }
}

/// Compiles every config of the case with `tool` ("": the runtime's pick),
/// expects audited PTX, and gives each config's assembler usage to `use`.
void compileEveryConfig(
    const AtenCase &c, const ShapedTemplate &st, const std::string &tool,
    llvm::function_ref<void(const TileConfig &, const PtxasUsage &)> use) {
  PtxAllowances allow = allowancesOf(*st.def);
  for (const TileConfig &cfg : enumerateConfigs(*st.def, st.shape)) {
    CompileOptions opts;
    opts.cubinTool = tool;
    llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, cfg, opts);
    ASSERT_TRUE(bool(k)) << label(c) << " config " << cfg.str() << ": "
                         << llvm::toString(k.takeError());
    llvm::Error e = auditPtx(*k, allow);
    EXPECT_FALSE(bool(e)) << label(c) << " config " << cfg.str() << ": "
                          << llvm::toString(std::move(e));
    use(cfg, parsePtxasLog(k->assemblerLog));
  }
}

TEST_P(AtenConfigs, EveryConfigCompilesAuditedWithoutSpills) {
  if (findPtxas().empty())
    GTEST_SKIP() << "ptxas not found: PTX is not assembled (set BITFOLD_PTXAS)";
  ShapedTemplate st = shapedCase(GetParam());
  ASSERT_TRUE(st.def);
  const TileConfig def = defaultConfig(*st.def, st.shape);
  std::string spilling;
  compileEveryConfig(GetParam(), st, "ptxas",
                     [&](const TileConfig &c, const PtxasUsage &u) {
                       // Spills cost time, never bits: the default must not
                       // spill; a few other configs of the accumulator orders
                       // do (ptxas keeps fewer registers than the estimate
                       // allows), listed here.
                       if (c == def) {
                         EXPECT_EQ(u.spillBytes, 0)
                             << label(GetParam()) << " default " << c.str();
                         EXPECT_EQ(u.stackBytes, 0)
                             << label(GetParam()) << " default " << c.str();
                       } else if (u.spillBytes || u.stackBytes) {
                         spilling += " " + c.str();
                       }
                     });
  std::cout << "[ configs  ] " << label(GetParam()) << ": default "
            << def.str() << (spilling.empty() ? "" : "; spilling:" + spilling)
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(Templates, AtenConfigs,
                         ::testing::ValuesIn(atenCases()));

TEST(ChannelsFirstRolled, WideRowsRunRolledWithoutLocalMemory) {
  // C = 192, 384, 512 had no config while a thread unrolled its whole row
  // (ptxas spilled kilobytes); rolled, only the lanes' accumulators stay
  // in registers: no local memory in the PTX, none in ptxas's report.
  const bool havePtxas = !findPtxas().empty();
  for (const AtenCase &c :
       {AtenCase{"wan_rmsnorm_silu", "layout=channels_first", "1,192,2,30,52"},
        AtenCase{"wan_rmsnorm_silu", "layout=channels_first,conv_bias=1",
                 "1,384,3,32,32"},
        AtenCase{"wan_rmsnorm_silu", "layout=channels_first,outvec=1",
                 "1,384,1,15,13"},
        AtenCase{"wan_rmsnorm_silu", "layout=channels_first,form=f32",
                 "1,512,1,30,52"},
        AtenCase{"conv_bias", "layout=channels_first", "1,384,3,32,32"}}) {
    ShapedTemplate st = shapedCase(c);
    ASSERT_TRUE(st.def);
    std::vector<TileConfig> configs = enumerateConfigs(*st.def, st.shape);
    int rolled = 0;
    for (const TileConfig &cfg : configs) {
      if (!cfg.twoPass)
        continue;
      ++rolled;
      CompileOptions opts;
      if (havePtxas)
        opts.cubinTool = "ptxas";
      llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, cfg, opts);
      ASSERT_TRUE(bool(k)) << label(c) << " config " << cfg.str() << ": "
                           << llvm::toString(k.takeError());
      EXPECT_EQ(k->ptx.find("ld.local"), std::string::npos)
          << label(c) << " " << cfg.str();
      EXPECT_EQ(k->ptx.find("st.local"), std::string::npos)
          << label(c) << " " << cfg.str();
      if (havePtxas) {
        PtxasUsage u = parsePtxasLog(k->assemblerLog);
        EXPECT_EQ(u.spillBytes, 0) << label(c) << " " << cfg.str();
        EXPECT_EQ(u.stackBytes, 0) << label(c) << " " << cfg.str();
      }
    }
    EXPECT_EQ(rolled, 4) << label(c) << ": a rolled config per CTA size";
  }
}

TEST(ChannelsFirstRolled, RowsOf64ChannelsAndMoreRunRolledByDefault) {
  // The H200 crossover (bench/results/2026-12-02-chanfirst-unroll-h200.md):
  // unrolled below 64 channels, the loop from 64 on; where aten's order
  // gives a pixel several lanes (C >= 64 at output_vec_size 4), one thread
  // per lane instead (ChannelsFirstLanes below).
  for (const auto &[shape, rolled] :
       {std::pair<const char *, bool>{"1,33,4,30,52", false},
        {"1,63,4,30,52", false},
        {"1,64,4,30,52", true},
        {"1,96,4,30,52", true},
        {"1,384,2,30,52", true}}) {
    ShapedTemplate st = shapedCase(
        AtenCase{"wan_rmsnorm_silu", "layout=channels_first,outvec=2", shape});
    ASSERT_TRUE(st.def) << shape;
    TileConfig c = defaultConfig(*st.def, st.shape);
    EXPECT_EQ(c.twoPass, rolled && c.threadsPerRow == 1) << shape;
  }
}

TEST(ChannelsFirstLanes, ThePixelsLanesRunOnThreadsAWarpApartByDefault) {
  // Wan C = 96 at output_vec_size 4: aten folds each pixel in 4 block.y
  // lanes of 24 channels. The default runs them on 4 threads a warp apart
  // (every warp access reads 32 adjacent pixels), the tree through shared
  // memory; H200: 411 -> 316 us at [1,96,4,480,832]
  // (bench/results/2026-12-02-s6-chanfirst-lanes-h200.md).
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,30,52"});
  ASSERT_TRUE(st.def);
  TileConfig c = defaultConfig(*st.def, st.shape);
  EXPECT_EQ(c.str(), "r64.t4.v1.p1.o2"); // two pixels a thread (below: .oN)
  llvm::Expected<CompiledKernel> k =
      compile(*st.def, st.shape, c, CompileOptions{});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(k->ptx.find("shfl"), std::string::npos);
  EXPECT_NE(k->ptx.find("bar.sync"), std::string::npos);
  EXPECT_NE(k->ptx.find("st.shared"), std::string::npos);
}

TEST(ChannelsFirstLanes, CtasOfPartialWarpsOfPixelsAreIllegal) {
  // A pixel's threads lie a warp apart: a CTA holds whole warps of pixels.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,30,52"});
  ASSERT_TRUE(st.def);
  llvm::Error e = checkConfig(*st.def, st.shape, TileConfig{16, 4, 1, false});
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("multiple of 32 pixels"),
            std::string::npos);
  EXPECT_FALSE(bool(checkConfig(*st.def, st.shape, TileConfig{32, 4, 1, false})));
  // No more threads than the lanes' accumulators (4 lanes x 4), no
  // vectors, no rolled lanes.
  for (TileConfig bad : {TileConfig{32, 32, 1, false}, TileConfig{32, 4, 2, false},
                         TileConfig{32, 4, 1, true}})
    EXPECT_TRUE(llvm::errorToBool(checkConfig(*st.def, st.shape, bad)))
        << bad.str();
}

TEST(ChannelsFirstLanes, MoreThreadsThanLanesSplitTheAccumulators) {
  // Wan C = 96 at ovs 4: 4 lanes of 4 round-robin accumulators. With 8 or
  // 16 threads a pixel each accumulator is a virtual lane (FoldPlan::split;
  // EveryConfigPushesEachColumnIntoTheOrdersState checks the columns), the
  // tree merges a lane's four serially first; at ovs 1 (one lane) 2 and 4
  // threads a pixel split it the same way. Compiled without spills. The
  // default splits where a lane would hold more than 24 channels
  // (pixelThreads), at most 8 threads a pixel: not at C = 96, ovs 4; at
  // ovs 1 four threads, 64 pixels.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,30,52"});
  ASSERT_TRUE(st.def);
  for (auto [cfg, split, k] : {std::tuple{TileConfig{32, 16, 1, false}, 4, 1},
                               std::tuple{TileConfig{128, 16, 1, false, 4}, 4, 1},
                               std::tuple{TileConfig{64, 8, 1, false, 2}, 4, 2},
                               std::tuple{TileConfig{32, 4, 1, false}, 1, 1}}) {
    llvm::Expected<Plan> p = makePlan(*st.def, st.shape, cfg);
    ASSERT_TRUE(bool(p)) << cfg.str() << ": " << llvm::toString(p.takeError());
    const FoldPlan &fp = p->folds[0];
    EXPECT_EQ(fp.split, split) << cfg.str();
    EXPECT_EQ(fp.treeLanes(), 4) << cfg.str();
    EXPECT_EQ(fp.k, k) << cfg.str();
    EXPECT_EQ(fp.acc, 4 / split) << cfg.str();
    if (split == 1)
      continue;
    llvm::Expected<CompiledKernel> kern =
        compile(*st.def, st.shape, cfg, CompileOptions{});
    ASSERT_TRUE(bool(kern)) << cfg.str() << ": "
                            << llvm::toString(kern.takeError());
    EXPECT_FALSE(bool(auditPtx(*kern, allowancesOf(*st.def))));
    if (!findPtxas().empty()) {
      EXPECT_EQ(parsePtxasLog(kern->assemblerLog).spillBytes, 0) << cfg.str();
    }
  }
  EXPECT_EQ(defaultConfig(*st.def, st.shape).threadsPerRow, 4);
  ShapedTemplate one = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=1", "1,96,4,30,52"});
  ASSERT_TRUE(one.def);
  ASSERT_EQ(one.def->folds[0].order.threads, 1);
  llvm::Expected<Plan> p = makePlan(*one.def, one.shape, TileConfig{32, 4, 1, false});
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(p->folds[0].split, 4);
  EXPECT_EQ(defaultConfig(*one.def, one.shape).str(), "r64.t4.v1.p1");
  for (auto [shape, dflt] : {std::pair{"1,192,4,240,416", "r64.t8.v1.p1.o2"},
                             std::pair{"1,384,2,120,208", "r32.t8.v1.p1"},
                             std::pair{"1,512,1,30,52", "r32.t8.v1.p1"},
                             std::pair{"1,48,4,30,52", "r64.t1.v1.p1"}}) {
    ShapedTemplate w = shapedCase(AtenCase{
        "wan_rmsnorm_silu", "layout=channels_first,outvec=4", shape});
    ASSERT_TRUE(w.def);
    EXPECT_EQ(defaultConfig(*w.def, w.shape).str(), dflt) << shape;
  }
}

TEST(ChannelsFirstPixels, AdjacentPixelsPerThreadAreLegalWhereTheBindingGuaranteesThem) {
  // o pixels per thread need S % o == 0 (the order's output_vec_size, which
  // the binding checks for every image operand), images aligned to o
  // elements, one pass, and whole warps of threads when lanes lie a warp
  // apart.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,30,52"});
  ASSERT_TRUE(st.def);
  for (TileConfig ok : {TileConfig{128, 4, 1, false, 4},
                        TileConfig{64, 4, 1, false, 2},
                        TileConfig{256, 4, 1, false, 4}})
    EXPECT_FALSE(llvm::errorToBool(checkConfig(*st.def, st.shape, ok)))
        << ok.str();
  auto whyNot = [&](const ShapedTemplate &t, TileConfig c) {
    llvm::Error e = checkConfig(*t.def, t.shape, c);
    return e ? llvm::toString(std::move(e)) : std::string("legal");
  };
  EXPECT_NE(whyNot(st, TileConfig{64, 4, 1, false, 4}).find("32 threads a warp"),
            std::string::npos); // 16 threads of pixels per lane
  EXPECT_NE(whyNot(st, TileConfig{256, 4, 1, false, 8}).find("2 or 4"),
            std::string::npos);
  EXPECT_NE(whyNot(st, TileConfig{128, 1, 1, true, 4}).find("unrolled (p1)"),
            std::string::npos);
  // An image aligned to 4 bytes cannot take 8-byte vectors of 4 pixels.
  ShapedTemplate misaligned = st;
  misaligned.shape.alignBytes.assign(st.def->operands.size(), 16);
  misaligned.shape.alignBytes[0] = 4;
  EXPECT_NE(whyNot(misaligned, TileConfig{128, 4, 1, false, 4}).find("4-byte aligned"),
            std::string::npos);
  EXPECT_EQ(whyNot(misaligned, TileConfig{64, 4, 1, false, 2}), "legal");
  // output_vec_size 2: S may be 2 mod 4.
  ShapedTemplate ovs2 = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=2", "1,12,2,5,7"});
  ASSERT_TRUE(ovs2.def);
  EXPECT_NE(whyNot(ovs2, TileConfig{128, 1, 1, false, 4}).find("output_vec_size 2"),
            std::string::npos);
  EXPECT_EQ(whyNot(ovs2, TileConfig{64, 1, 1, false, 2}), "legal");
  // No fold (conv bias: nothing guarantees S % o), rows (row-major).
  ShapedTemplate conv = shapedCase(
      AtenCase{"conv_bias", "layout=channels_first", "1,96,4,30,52"});
  ASSERT_TRUE(conv.def);
  EXPECT_NE(whyNot(conv, TileConfig{64, 1, 1, false, 2}).find("no fold"),
            std::string::npos);
  ShapedTemplate rows = shapedCase(AtenCase{"hf_rmsnorm", "", "1,256,1024"});
  ASSERT_TRUE(rows.def);
  EXPECT_NE(whyNot(rows, TileConfig{2, 64, 4, false, 2}).find("not channels-first"),
            std::string::npos);
}

TEST(ChannelsFirstPixels, TheMostPixelsPerThreadCompileWithoutSpillsTheDefaultIsOneOrTwo) {
  // aten's output_vec_size: up to 4 adjacent pixels a thread, one 8-byte
  // access per channel (bf16), where the copies of the kept row fit the
  // register estimate and a thread's unroll bound. The default takes two
  // pixels where a pixel's lanes are on several threads and a thread then
  // holds at most 48 elements (C = 96 ran 13% faster on the H200; C = 192
  // splits its accumulators to 24 channels a thread, so two pixels; C =
  // 384 to 48), else one; the most pixels legal at the default's threads
  // must still compile without spills for the tuner.
  const bool ptxas = !findPtxas().empty();
  for (const auto &[params, shape, o, dflt] :
       {std::tuple<const char *, const char *, int, int>{
            "layout=channels_first,outvec=4", "1,96,4,480,832", 4, 2},
        {"layout=channels_first,outvec=4,conv_bias=1", "1,96,4,480,832", 4, 2},
        {"layout=channels_first,outvec=4,form=f32", "1,192,4,240,416", 4, 2},
        {"layout=channels_first,outvec=4", "1,384,2,120,208", 4, 1},
        {"layout=channels_first,outvec=4,conv_bias=1", "1,384,2,120,208", 2, 1},
        {"layout=channels_first,outvec=4", "1,32,4,30,52", 2, 1},
        {"layout=channels_first,outvec=4", "1,12,4,30,52", 4, 1},
        {"layout=channels_first,outvec=4", "1,48,4,30,52", 1, 1},
        {"layout=channels_first,outvec=2", "1,12,4,30,52", 2, 1}}) {
    AtenCase c{"wan_rmsnorm_silu", params, shape};
    ShapedTemplate st = shapedCase(c);
    ASSERT_TRUE(st.def);
    TileConfig def = defaultConfig(*st.def, st.shape);
    EXPECT_EQ(def.pixelsPerThread, dflt) << label(c) << " default " << def.str();
    // The default's plan with the most pixels a thread (the rows of a CTA
    // scaled with them where legal).
    TileConfig d = def;
    auto rank = [&](const TileConfig &l) {
      return 2 * l.pixelsPerThread +
             (l.rowsPerCta == def.rowsPerCta * l.pixelsPerThread ? 1 : 0);
    };
    for (const TileConfig &l : enumerateConfigs(*st.def, st.shape))
      if (l.threadsPerRow == def.threadsPerRow && l.twoPass == def.twoPass &&
          l.vectorElems == def.vectorElems && rank(l) > rank(d))
        d = l;
    EXPECT_EQ(d.pixelsPerThread, o) << label(c) << " most pixels " << d.str();
    // Assembled as the tuner's compiles are (compile()'s default tool).
    // Without the kernel's .minnctapersm 1, whole-program allocation (the
    // PTX Compiler API, ptxas) held the conv_bias=1 .o4 kernel at C = 96 to
    // 128 registers and spilled 112 bytes; with it, 142 and none.
    CompileOptions opts;
    if (!ptxas)
      opts.emitCubin = false;
    llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, d, opts);
    ASSERT_TRUE(bool(k)) << label(c) << " " << d.str() << ": "
                         << llvm::toString(k.takeError());
    EXPECT_EQ(k->ptx.find("ld.local"), std::string::npos) << label(c);
    if (ptxas) {
      PtxasUsage u = parsePtxasLog(k->assemblerLog);
      EXPECT_EQ(u.spillBytes, 0) << label(c) << " " << d.str();
      EXPECT_EQ(u.stackBytes, 0) << label(c) << " " << d.str();
      std::cout << "[ pixels   ] " << label(c) << ": " << d.str() << ", "
                << u.registers << " registers\n";
    }
  }
}

/// Occurrences of `what` in `text` (PTX opcodes).
size_t countOf(const std::string &text, llvm::StringRef what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

/// The PTX of `st` at config `c` (no cubin); empty, with a failure, if it
/// does not compile.
std::string ptxOf(const ShapedTemplate &st, TileConfig c) {
  CompileOptions opts;
  opts.emitCubin = false;
  llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, c, opts);
  if (!k) {
    ADD_FAILURE() << c.str() << ": " << llvm::toString(k.takeError());
    return std::string();
  }
  return k->ptx;
}

TEST(ChannelsFirstLanes, LanesInOneWarpFoldInShufflesWithoutABarrier) {
  // .w1: a pixel's 4 lanes are adjacent threads, so aten's block_y_reduce
  // stages (offsets 2, 1) are warp shuffles: no shared memory, no barrier,
  // and a 256-thread CTA owns 128 pixels at 48 elements a thread (.o2).
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  TileConfig w{128, 4, 1, false, 2};
  w.lanesInWarp = true;
  ASSERT_EQ(w.ctaThreads(), 256);
  llvm::Expected<Plan> plan = makePlan(*st.def, st.shape, w);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_FALSE(plan->lanesAcrossWarps);
  for (const StagePlan &sp : plan->folds[0].stages)
    EXPECT_EQ(sp.where, StagePlan::Shuffle);
  CompileOptions opts;
  llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, w, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(countOf(k->ptx, "bar.sync"), 0u);
  EXPECT_EQ(countOf(k->ptx, ".shared"), 0u);
  // Per pixel copy: the two stages and the broadcast of lane 0's result.
  EXPECT_EQ(countOf(k->ptx, "shfl.sync.down"), 2u * 2);
  EXPECT_EQ(countOf(k->ptx, "shfl.sync.idx"), 2u);
  EXPECT_NE(k->ptx.find(".maxntid 256, 1, 1"), std::string::npos);
  PtxasUsage u = parsePtxasLog(k->assemblerLog);
  EXPECT_EQ(u.spillBytes, 0) << k->assemblerLog;
  // The space has them; the default does not take them before H200 timings.
  std::vector<TileConfig> all = enumerateConfigs(*st.def, st.shape);
  EXPECT_NE(std::find(all.begin(), all.end(), w), all.end());
  EXPECT_FALSE(defaultConfig(*st.def, st.shape).lanesInWarp);
  // Only channels-first programs with several threads a pixel, one pass.
  TileConfig one{32, 1, 1, false};
  one.lanesInWarp = true;
  TileConfig rolled{32, 4, 1, true};
  rolled.lanesInWarp = true;
  for (const TileConfig &bad : {one, rolled}) {
    llvm::Error e = checkConfig(*st.def, st.shape, bad);
    ASSERT_TRUE(bool(e)) << bad.str();
    EXPECT_NE(llvm::toString(std::move(e)).find(".w1"), std::string::npos);
  }
  ShapedTemplate rows =
      shapedCase(AtenCase{"wan_rmsnorm_silu", "", "1,96,4,60,104"});
  ASSERT_TRUE(rows.def);
  TileConfig rowsW{16, 4, 4, false};
  rowsW.lanesInWarp = true;
  EXPECT_TRUE(llvm::errorToBool(checkConfig(*rows.def, rows.shape, rowsW)));
}

TEST(ChannelsFirstPixels, ImagesMoveEveryPixelOfAThreadInOneVectorAccess) {
  // bf16 x 4 pixels: one 8-byte load (two 32-bit words) and one 8-byte
  // store per channel, no 2-byte access left; one pixel per thread moves
  // one element per instruction.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  std::string one = ptxOf(st, TileConfig{32, 4, 1, false});
  std::string four = ptxOf(st, TileConfig{128, 4, 1, false, 4});
  std::string two = ptxOf(st, TileConfig{64, 4, 1, false, 2});
  // A thread's 24 channels of x: 24 loads and 24 stores either way; gamma
  // and bias stay one 2-byte load per channel.
  auto loads16 = [&](const std::string &p) {
    return countOf(p, "ld.global.b16") + countOf(p, "ld.global.nc.b16") +
           countOf(p, "ld.global.u16") + countOf(p, "ld.global.nc.u16");
  };
  EXPECT_EQ(countOf(four, "ld.global.v2.b32") + countOf(four, "ld.global.nc.v2.b32") +
                countOf(four, "ld.global.v2.u32") + countOf(four, "ld.global.nc.v2.u32"),
            24u);
  EXPECT_EQ(countOf(four, "st.global.v4.b16") + countOf(four, "st.global.v2.b32"),
            24u);
  EXPECT_EQ(countOf(two, "ld.global.b32") + countOf(two, "ld.global.nc.b32") +
                countOf(two, "ld.global.u32") + countOf(two, "ld.global.nc.u32"),
            24u);
  EXPECT_EQ(countOf(two, "st.global.v2.b16") + countOf(two, "st.global.b32"), 24u);
  EXPECT_EQ(countOf(one, "st.global.b16"), 24u);
  for (const std::string *p : {&four, &two}) {
    EXPECT_EQ(loads16(*p) + 24, loads16(one));
    EXPECT_EQ(countOf(*p, "st.global.b16") + countOf(*p, "st.global.u16"), 0u);
  }
}

TEST(ChannelsFirstGathered, OnePixelPerThreadRunsItsOutputChainEightChannelsAtATime) {
  // One pixel a thread moves one element per access (columns S apart); its
  // outputs are gathered 8 channels at a time, so the exact row division
  // and the fast SiLU have one fallback each per 8 channels (2 x 3 for a
  // lane's 24: each a div.rn) and the roundings to bf16 pair up, as in a
  // channels-last bf16 x 8 access. Stores stay one per element.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  std::string lanes = ptxOf(st, TileConfig{32, 4, 1, false});
  EXPECT_EQ(countOf(lanes, "div.rn.f32"), 2u * 24 / 8);
  EXPECT_GE(countOf(lanes, "cvt.rn.bf16x2.f32"), 24u);
  EXPECT_EQ(countOf(lanes, "st.global.b16"), 24u);
  // Rolled (t1.v1.p2): the output loop's 8 channels are one group (one
  // division fallback; this plan keeps the exact SiLU chain per element).
  std::string rolled = ptxOf(st, TileConfig{64, 1, 1, true});
  EXPECT_EQ(countOf(rolled, "div.rn.f32"), 1u + 8u);
}

TEST(ChannelsFirstGathered, SeveralPixelsAThreadRunTheirOutputChainEightElementsAtATime) {
  // o pixels a thread: outputs are gathered 8 elements at a time (8 / o
  // channels of all o pixels, each element in its pixel's row state: its
  // own row division), so a thread's 24 x o elements have 2 fallbacks per
  // 8, as one pixel a thread has, and a channel's o pixels are still one
  // vector store.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  for (int o : {2, 4}) {
    std::string p = ptxOf(st, TileConfig{32 * o, 4, 1, false, o});
    EXPECT_EQ(countOf(p, "div.rn.f32"), 2u * 24 / 8 * o) << o;
    EXPECT_GE(countOf(p, "cvt.rn.bf16x2.f32"), 24u * o) << o;
    EXPECT_EQ(countOf(p, "st.global.b16"), 0u) << o;
    EXPECT_EQ(countOf(p, o == 2 ? "st.global.v2.b16" : "st.global.v4.b16") +
                  countOf(p, o == 2 ? "st.global.b32" : "st.global.v2.b32"),
              24u)
        << o;
  }
}

TEST(ChannelsFirstGathered, Bf16PairsStayPackedFromRoundingToWidening) {
  // The bf16 steps of a group's elements e, e+1 (gamma's mul, bias's add)
  // are one mul/add.rn.bf16x2, and every widening of a paired value comes
  // from the pair's 32-bit word (shl / and), not a cvt.f32.bf16 of an
  // unpacked half (each cost ptxas a PRMT).
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  for (int o : {1, 2, 4}) {
    std::string p = ptxOf(st, TileConfig{32 * o, 4, 1, false, o});
    EXPECT_EQ(countOf(p, "mul.rn.bf16x2"), 24u * o / 2) << o;
    EXPECT_EQ(countOf(p, "add.rn.bf16x2"), 24u * o / 2) << o;
    EXPECT_EQ(countOf(p, "mul.rn.bf16\t"), 0u) << o;
    EXPECT_EQ(countOf(p, "add.rn.bf16\t"), 0u) << o;
    // One pixel a thread loads each of its 24 x elements as one bf16: only
    // those widen from a 16-bit register.
    EXPECT_EQ(countOf(p, "cvt.f32.bf16"), o == 1 ? 24u : 0u) << o;
  }
}

TEST(RowBf16Pairs, AdjacentColumnsShareOneBf16x2OpAndWidenFromItsWord) {
  // Rows too: hf_rmsnorm's weight product round(w * round(x r)) of columns
  // c, c+1 is one mul.rn.bf16x2 of the cvt.rn.bf16x2 pair and the weights'
  // loaded word (no scalar mul.rn.bf16, no unpacking mov), and the Wan
  // norm's bias sum and SiLU bound are pairs as in channels-first images.
  ShapedTemplate rms = shapedCase(AtenCase{"hf_rmsnorm", "", "1,4096,4096"});
  ASSERT_TRUE(rms.def);
  std::string p = ptxOf(rms, TileConfig{2, 32, 4, false});
  EXPECT_EQ(countOf(p, "mul.rn.bf16x2"), 4096u / 32 / 2);
  EXPECT_EQ(countOf(p, "mul.rn.bf16\t"), 0u);
  EXPECT_EQ(countOf(p, "mov.b32 \t{"), 0u);
  ShapedTemplate wan = shapedCase(
      AtenCase{"wan_rmsnorm_silu", "bias=1", "1,96,4,60,104"});
  ASSERT_TRUE(wan.def);
  std::string w = ptxOf(wan, TileConfig{8, 4, 8, false});
  EXPECT_EQ(countOf(w, "add.rn.bf16x2"), 96u / 4 / 2);
  EXPECT_EQ(countOf(w, "add.rn.bf16\t"), 0u);
  EXPECT_EQ(countOf(w, "setp.ge.bf16x2"), 96u / 4 / 2);
}

TEST(ChannelsFirstGathered, TheSiluLowerBoundIsOneBf16x2ComparePerPair) {
  // SiLU's x = round(v + bias) is a bf16 pair (add.rn.bf16x2): its test
  // x >= -80 is one setp.ge.bf16x2 of the pair (exact: x and -80 are
  // bf16 values) where sm_90 has it, an f32 setp per element on sm_80.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  for (int o : {1, 2, 4}) {
    std::string p = ptxOf(st, TileConfig{32 * o, 4, 1, false, o});
    EXPECT_EQ(countOf(p, "setp.ge.bf16x2"), 24u * o / 2) << o;
  }
  CompileOptions sm80;
  sm80.emitCubin = false;
  sm80.arch = "sm_80";
  auto k = compile(*st.def, st.shape, TileConfig{64, 4, 1, false, 2}, sm80);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(countOf(k->ptx, "setp.ge.bf16x2"), 0u);
  EXPECT_GE(countOf(k->ptx, "0fC2A00000"), 48u); // -80 as f32, per element
}

TEST(ChannelsFirstColumnTables,
     GammaAndBiasAreStagedOncePerCtaAndReadAsVectors) {
  // Lanes across warps: gamma and bias (per column) go to shared memory
  // once per CTA, lane p's channels p + 4j adjacent, one 2-byte global
  // load per table and thread (96 columns, 128 threads); each gathered
  // group then reads its channels as one shared vector: 8 channels (o = 1,
  // 16 bytes), 4 (o = 2, v4.b16), 2 (o = 4, v2.b16). One thread per pixel
  // (no barrier to order the staging) keeps its global loads.
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  const struct {
    int o;
    const char *vector;
    unsigned vectors, xLoads;
  } rows[] = {{1, "ld.shared.v4.b32", 6, 24},
              {2, "ld.shared.v4.b16", 12, 0},
              {4, "ld.shared.v2.b16", 24, 0}};
  for (const auto &r : rows) {
    std::string p = ptxOf(st, TileConfig{32 * r.o, 4, 1, false, r.o});
    EXPECT_EQ(countOf(p, ".shared .align 16 .b8 bf_cols_"), 2u) << r.o;
    EXPECT_EQ(countOf(p, "st.shared.b16"), 2u) << r.o;
    EXPECT_EQ(countOf(p, "ld.global.b16"), 2u + r.xLoads) << r.o;
    EXPECT_EQ(countOf(p, r.vector), r.vectors) << r.o;
  }
  std::string t1 = ptxOf(st, TileConfig{32, 1, 1, false});
  EXPECT_EQ(countOf(t1, "bf_cols_"), 0u);
  EXPECT_EQ(countOf(t1, "ld.global.b16"), 3u * 96);
}

TEST(ChannelsFirstOneSpatial, OperandsOfOneSDivideThePixelIndexOnce) {
  // Dense operands share S (ShapeSpec::oneSpatial, ".s1"): x and the
  // output take one pixel offset, one integer division; without the fact
  // each divides by its own S argument. Both address columns by their own
  // S (a shared column offset would stay live from the loads to the
  // stores: ptxas spent 23 more registers at .o2).
  ShapedTemplate st = shapedCase(AtenCase{
      "wan_rmsnorm_silu", "layout=channels_first,outvec=4", "1,96,4,60,104"});
  ASSERT_TRUE(st.def);
  ASSERT_TRUE(st.shape.oneSpatial);
  EXPECT_NE(st.shape.str().find(".s1"), std::string::npos) << st.shape.str();
  ShapeSpec own = st.shape;
  own.oneSpatial = false;
  EXPECT_EQ(own.str().find(".s1"), std::string::npos) << own.str();
  ShapedTemplate ownSt = st;
  ownSt.shape = own;
  for (const TileConfig &c : {TileConfig{32, 4, 1, false},
                              TileConfig{64, 4, 1, false, 2},
                              TileConfig{64, 1, 1, true}}) {
    const std::string one = ptxOf(st, c), each = ptxOf(ownSt, c);
    EXPECT_EQ(countOf(one, "div.u"), 1u) << c.str();
    EXPECT_EQ(countOf(each, "div.u"), 2u) << c.str();
  }
}

TEST(ChannelsFirstMixed, AContiguousResidualUnderChannelsLastXRunsARowPlan) {
  // conv_bias residual_layout=channels_first: rows are the channels-last
  // pixels; x, bias and y move in 16-byte vectors, h one element at a time
  // (its columns lie S apart), a thread's 8 columns of h per x vector.
  ShapedTemplate st = shapedCase(AtenCase{
      "conv_bias", "residual=1,residual_layout=channels_first", "1,192,1,64,64"});
  ASSERT_TRUE(st.def);
  EXPECT_FALSE(dsl::isChannelsFirst(*st.def));
  TileConfig c = defaultConfig(*st.def, st.shape);
  EXPECT_EQ(c.vectorElems, 8) << c.str();
  EXPECT_EQ(c.pixelsPerThread, 1) << c.str();
  std::string ptx = ptxOf(st, c);
  EXPECT_EQ(countOf(ptx, "ld.global.b16"), 8u);
  EXPECT_EQ(countOf(ptx, "st.global.v4.b32"), 1u);
  for (const TileConfig &l : enumerateConfigs(*st.def, st.shape))
    EXPECT_EQ(l.pixelsPerThread, 1) << l.str();
}

/// A program folding x in `order` (norm pushes), its state as the output.
std::shared_ptr<const dsl::KernelDef> foldProgram(const dsl::FoldOrder &order) {
  dsl::RowProgram p("aten_fold_probe");
  dsl::Expr x = p.input("x", dsl::DType::F32, dsl::Layout::RowMajor).row();
  dsl::State s = p.fold(x, order, dsl::folds::norm_two_aten());
  p.output("y", dsl::DType::F32, dsl::Layout::RowMajor, s[0]);
  auto def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

/// Rows of `cols` columns for foldProgram's operands, 16-byte aligned.
ShapeSpec foldShape(const dsl::KernelDef &def, int64_t cols) {
  ShapeSpec shape;
  shape.cols = cols;
  shape.alignBytes.assign(def.operands.size(), 16);
  shape.maxElementOffset = cols * 64;
  return shape;
}

void expectRefusedForEveryConfig(const dsl::FoldOrder &order, int64_t cols,
                                 llvm::StringRef why) {
  auto def = foldProgram(order);
  ASSERT_TRUE(def);
  ShapeSpec shape = foldShape(*def, cols);
  EXPECT_TRUE(enumerateConfigs(*def, shape).empty()) << order.name;
  for (TileConfig c : {TileConfig{1, 32, 4, false}, TileConfig{1, 128, 4, true},
                       TileConfig{}}) {
    llvm::Error e = checkConfig(*def, shape, c);
    ASSERT_TRUE(bool(e)) << order.name << " config " << c.str();
    std::string msg = llvm::toString(std::move(e));
    EXPECT_NE(msg.find(order.name), std::string::npos) << msg;
    EXPECT_NE(msg.find(why.str()), std::string::npos) << msg;
  }
}

/// What a head/tail config's threads push in row `row` (FoldPlan::headTail:
/// EmitFold.cpp pushRowEdge, VectorAccess.cpp foldAccesses), thread by
/// thread, in the order emitPushes walks them: the head, the whole vectors
/// from column h, the tail.
std::vector<Push> plannedRowPushes(const FoldPlan &fp, int P, int64_t cols,
                                   int64_t row) {
  std::vector<Push> out;
  const int64_t V = fp.V, h = -(row * (cols % V)) & (V - 1);
  EXPECT_EQ(fp.A, 1);
  for (int64_t p = 0; p < P; ++p)
    for (int hi = 0; hi < fp.k; ++hi) {
      const int64_t t = p + int64_t(fp.Pf) * hi;
      const bool edges = int64_t(fp.Pf) * hi < V && t < V;
      if (edges && t + h >= V)
        out.push_back({t, 0, t + h - V});
      for (int64_t m = 0; m < fp.reps && p < fp.Pf; ++m)
        for (int64_t j = 0; j * fp.access < V; ++j) {
          int64_t col =
              p * V + (int64_t(fp.Pf) * hi + fp.T * m) * V + j * fp.access + h;
          if (col + V - 1 - j * fp.access >= cols)
            continue; // the vector is not whole
          for (int e = 0; e < fp.access; ++e) {
            int el = int(j * fp.access + e);
            out.push_back({t, fp.byElement ? el : int(m % fp.acc), col + e});
          }
        }
      int64_t tail = cols - ((cols - h) & (V - 1)) + t;
      if (edges && tail < cols)
        out.push_back({t, 0, tail});
    }
  return out;
}

/// The interpreter's own mapping of row `row` (dsl::forEachPush).
std::vector<Push> interpreterPushes(const dsl::FoldOrder &o, int64_t cols,
                                    int64_t row) {
  std::vector<Push> out;
  dsl::forEachPush(o, row, cols, [&](int64_t lane, int acc, int64_t col) {
    out.push_back({lane, acc, col});
  });
  return out;
}

std::vector<AtenCase> headTailCases() {
  std::vector<AtenCase> out;
  for (const char *rows : {"1", "7", "64"}) {
    for (int c : {129, 130, 131, 1001, 4099, 5121})
      for (const char *params :
           {"", "residual=1", "dtype=f32", "dtype=f32,residual=1,weight=f32"})
        out.push_back({"hf_rmsnorm", params,
                       std::string("1,") + rows + "," + std::to_string(c)});
    for (int c : {129, 130, 131, 1001}) // the Wan norm takes C <= 1024
      for (const char *params : {"", "form=f32,gamma=f32,bias=0"})
        out.push_back({"wan_rmsnorm_silu", params,
                       "1," + std::to_string(c) + ",1," + rows + ",1"});
  }
  return out;
}

class HeadTailConfigs : public ::testing::TestWithParam<AtenCase> {};

TEST_P(HeadTailConfigs, EveryConfigPushesEveryRowPhaseInTheInterpretersOrder) {
  ShapedTemplate st = shapedCase(GetParam());
  ASSERT_TRUE(st.def);
  const dsl::FoldOrder &o = st.def->folds[0].order;
  const int64_t D = st.shape.cols;
  ASSERT_TRUE(o.alignedVectors && D % o.vector != 0) << label(GetParam());
  std::vector<TileConfig> configs = enumerateConfigs(*st.def, st.shape);
  ASSERT_FALSE(configs.empty()) << label(GetParam()) << ": no legal config";
  for (const TileConfig &c : configs) {
    llvm::Expected<Plan> p = makePlan(*st.def, st.shape, c);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    ASSERT_TRUE(p->folds[0].headTail) << c.str();
    EXPECT_TRUE(c.twoPass) << c.str();
    for (int64_t row = 0; row < o.vector; ++row) // every head -(r*D) mod V
      EXPECT_EQ(byState(plannedRowPushes(p->folds[0], c.threadsPerRow, D, row)),
                byState(interpreterPushes(o, D, row)))
          << label(GetParam()) << " config " << c.str() << " row " << row
          << ": a column lands in another lane or accumulator, or out of "
             "push order";
  }
}

TEST_P(HeadTailConfigs, EveryConfigCompilesAuditedWithoutSpills) {
  // Assembled by the tool the runtime picks (the PTX Compiler API where it
  // loads). Whole-program allocation spilled 20-46 bytes at 56 registers on
  // some of these configs until kernels declared .minnctapersm 1 (now 112-
  // 142 registers and none, as nvJitLink's relocatable allocation).
  if (findPtxas().empty())
    GTEST_SKIP() << "ptxas not found: PTX is not assembled (set BITFOLD_PTXAS)";
  ShapedTemplate st = shapedCase(GetParam());
  ASSERT_TRUE(st.def);
  compileEveryConfig(
      GetParam(), st, "", [&](const TileConfig &c, const PtxasUsage &u) {
        EXPECT_EQ(u.spillBytes, 0) << label(GetParam()) << " " << c.str();
        EXPECT_EQ(u.stackBytes, 0) << label(GetParam()) << " " << c.str();
      });
}

INSTANTIATE_TEST_SUITE_P(Templates, HeadTailConfigs,
                         ::testing::ValuesIn(headTailCases()));

TEST(PackedRows, WideBf16RowsKeepTheirPairsAndAskForFiveHundredTwelveThreads) {
  // Plan::packedRow: hf_rmsnorm's one-pass thread at 4096 columns keeps
  // 128 elements of its row, 176 registers as f32 by the estimate, 112 as
  // the loaded bf16 pairs. The outputs widen each element again with a
  // prmt from its word, the kernel asks for 512 threads an SM, and ptxas
  // fits it in 128 registers without spilling; the default is then the
  // 32-thread CTA. At 5120 columns (128 registers as pairs: no room left),
  // 2048, or an f16 or f32 row, nothing changes.
  const bool havePtxas = !findPtxas().empty();
  for (const auto &[params, shape, packed] :
       {std::tuple<const char *, const char *, bool>{"", "1,4096,4096", true},
        {"", "8,1024,5120", false},
        {"", "1,1024,2048", false},
        {"dtype=f16", "1,4096,4096", false},
        {"dtype=f32", "1,4096,4096", false}}) {
    AtenCase c{"hf_rmsnorm", params, shape};
    ShapedTemplate st = shapedCase(c);
    ASSERT_TRUE(st.def);
    const TileConfig cfg = defaultConfig(*st.def, st.shape);
    llvm::Expected<Plan> p = makePlan(*st.def, st.shape, cfg);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_EQ(p->packedRow, packed) << label(c) << " " << cfg.str();
    if (packed)
      EXPECT_EQ(cfg.ctaThreads(), 32) << label(c) << " " << cfg.str();
    const int ctas = packed ? 512 / cfg.ctaThreads() : 1;
    EXPECT_EQ(p->minCtasPerSm, ctas) << label(c);
    CompileOptions opts;
    if (havePtxas)
      opts.cubinTool = "ptxas";
    else
      opts.emitCubin = false;
    llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, cfg, opts);
    ASSERT_TRUE(bool(k)) << label(c) << ": " << llvm::toString(k.takeError());
    EXPECT_NE(k->ptx.find(".minnctapersm " + std::to_string(ctas) + "\n"),
              std::string::npos)
        << label(c);
    const int64_t perThread = st.shape.cols / cfg.threadsPerRow;
    EXPECT_EQ(countOf(k->ptx, "prmt.b32"), size_t(packed ? perThread : 0))
        << label(c);
    if (havePtxas) {
      PtxasUsage u = parsePtxasLog(k->assemblerLog);
      EXPECT_EQ(u.spillBytes, 0) << label(c);
      EXPECT_EQ(u.stackBytes, 0) << label(c);
      if (packed)
        EXPECT_LE(u.registers, 128) << label(c);
    }
  }
}

TEST(AtenFold, HeadAndTailRowsDefaultToOneThreadPerLane) {
  // H200, hf_rmsnorm [1,4096,4099]: r4.t32.v1.p2 25.0 us, r1.t128.v1.p2
  // (32 elements a thread) 36.6; aten's 32 lanes a row from 16 rows on.
  for (int64_t cols : {1001, 4099, 130}) {
    dsl::FoldOrder o = dsl::folds::aten_reduce(
        cols, 16, dsl::folds::aten_norm_kernel(dsl::DType::F32));
    ASSERT_TRUE(o.alignedVectors && o.threads == 32 && o.ctas == 1);
    auto def = foldProgram(o);
    ASSERT_TRUE(def);
    EXPECT_EQ(defaultConfig(*def, foldShape(*def, cols)).threadsPerRow, 32)
        << cols;
  }
}

TEST(AtenFold, HeadAndTailRowsTakeTwoPassesAndAccessesThatDivideTheHead) {
  // C = 1001 >= 128, not a multiple of 4: each row has its own head, a
  // multiple of gcd(1001, 4) = 1; C = 130: of 2.
  for (auto [cols, widest] : {std::pair<int64_t, int>{1001, 1}, {130, 2}}) {
    dsl::FoldOrder o = dsl::folds::aten_reduce(
        cols, 16, dsl::folds::aten_norm_kernel(dsl::DType::F32));
    ASSERT_TRUE(o.alignedVectors);
    auto def = foldProgram(o);
    ASSERT_TRUE(def);
    ShapeSpec shape = foldShape(*def, cols);
    std::vector<TileConfig> configs = enumerateConfigs(*def, shape);
    ASSERT_FALSE(configs.empty()) << cols;
    for (const TileConfig &c : configs) {
      EXPECT_TRUE(c.twoPass) << c.str();
      EXPECT_LE(c.vectorElems, widest) << c.str();
    }
    auto whyNot = [&](TileConfig c) {
      llvm::Error e = checkConfig(*def, shape, c);
      return e ? llvm::toString(std::move(e)) : std::string("legal");
    };
    EXPECT_NE(whyNot(TileConfig{1, 32, 1, false}).find("two passes only"),
              std::string::npos);
    EXPECT_NE(whyNot(TileConfig{1, 128, 4, true}).find("must divide"),
              std::string::npos);
    EXPECT_EQ(whyNot(TileConfig{1, 128, widest, true}), "legal");
    // The head follows r * C, the row's memory offset only for rows in one
    // level: two-level rows (a permuted view) are refused.
    shape.rowLevels.assign(def->operands.size(), RowLevels{});
    shape.rowLevels[0] = RowLevels{4, cols * 8};
    EXPECT_NE(whyNot(TileConfig{1, 128, widest, true}).find("two levels"),
              std::string::npos);
    EXPECT_TRUE(enumerateConfigs(*def, shape).empty()) << cols;
  }
}

TEST(AtenFold, RowsSplitAcrossCtasAreRefusedNamingTheOrder) {
  dsl::FoldOrder o = dsl::folds::aten_reduce(
      1 << 18, 1, dsl::folds::aten_norm_kernel(dsl::DType::F32));
  ASSERT_GT(o.ctas, 1);
  expectRefusedForEveryConfig(o, 1 << 18, "CTA groups");
}

TEST(AtenFold, F32RowsWithAResidualHaveConfigsAtEveryWidthThatDoNotSpill) {
  // 64 rows (aten's T = 32 lanes a row): one pass keeps 128..255 f32 of x
  // and of the residual per thread, so only two passes (x and the residual
  // read again for the outputs, h = x + r recomputed by the same DAG) fit.
  const bool ptxas = !findPtxas().empty();
  for (int64_t D : {3600, 8160}) { // the ends of the widths one pass lacks
    AtenCase c{"hf_rmsnorm", "dtype=f32,residual=1",
               "1,64," + std::to_string(D)};
    ShapedTemplate st = shapedCase(c);
    ASSERT_TRUE(st.def);
    std::vector<TileConfig> configs = enumerateConfigs(*st.def, st.shape);
    ASSERT_FALSE(configs.empty()) << label(c) << ": no legal config";
    if (!ptxas)
      continue; // PTX is not assembled: the spill count is unknown.
    for (const TileConfig &cfg : configs) {
      CompileOptions opts;
      opts.cubinTool = "ptxas";
      llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, cfg, opts);
      ASSERT_TRUE(bool(k)) << label(c) << " config " << cfg.str() << ": "
                           << llvm::toString(k.takeError());
      PtxasUsage u = parsePtxasLog(k->assemblerLog);
      EXPECT_EQ(u.spillBytes, 0) << label(c) << " config " << cfg.str();
      EXPECT_EQ(u.stackBytes, 0) << label(c) << " config " << cfg.str();
    }
  }
  if (!ptxas)
    GTEST_SKIP() << "ptxas not found: configs listed, spills not checked "
                    "(set BITFOLD_PTXAS)";
}

TEST(AtenFold, OneAccumulatorOrdersPlanAsBefore) {
  // The stock orders have one accumulator: acc 1, no per-element split.
  llvm::Expected<templates::Problem> p =
      templates::makeProblem("ln_modulate", "", "1,4096,4096");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  ShapedTemplate st = shapeProblem(*p);
  for (const TileConfig &c : enumerateConfigs(*st.def, st.shape)) {
    llvm::Expected<Plan> plan = makePlan(*st.def, st.shape, c);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->folds[0].acc, 1) << c.str();
    EXPECT_FALSE(plan->folds[0].byElement) << c.str();
  }
}


// Shared rows (TileConfig::sharedRow, codegen/README.md): twins of the
// one-pass configs whose row in registers is large, after the rest of the
// space and never the default; refused in two passes and past 48 KiB.
TEST(SharedRow, TwinsFollowTheSpaceAndAreNeverTheDefault) {
  ShapedTemplate st = shapedCase({"hf_rmsnorm", "", "1,4096,4096"});
  ASSERT_TRUE(st.def);
  std::vector<TileConfig> all = enumerateConfigs(*st.def, st.shape);
  TileConfig base{2, 32, 4, false}, twin = base;
  twin.sharedRow = true;
  EXPECT_NE(std::find(all.begin(), all.end(), twin), all.end());
  auto firstTwin = std::find_if(all.begin(), all.end(),
                                [](const TileConfig &c) { return c.sharedRow; });
  EXPECT_TRUE(std::all_of(firstTwin, all.end(),
                          [](const TileConfig &c) { return c.sharedRow; }));
  EXPECT_FALSE(defaultConfig(*st.def, st.shape).sharedRow);
  // Nor where only the twin of a config fits (its base needs too many
  // registers), and those defaults are the ones before shared rows.
  for (auto [params, shape, want] :
       {std::tuple{"residual=1", "8,1024,5120", "r1.t128.v8.p2"},
        std::tuple{"dtype=f32,residual=1", "1,64,4096", "r1.t128.v8.p2"}}) {
    ShapedTemplate r = shapedCase({"hf_rmsnorm", params, shape});
    ASSERT_TRUE(r.def);
    EXPECT_EQ(defaultConfig(*r.def, r.shape).str(), want) << params << shape;
  }
  llvm::Expected<Plan> pb = makePlan(*st.def, st.shape, base);
  llvm::Expected<Plan> pt = makePlan(*st.def, st.shape, twin);
  ASSERT_TRUE(pb && pt);
  EXPECT_EQ(pt->sharedBytes, pb->sharedBytes + 2 * 4096 * 2); // 2 rows of x
  EXPECT_TRUE(pt->outputUsesFoldMapping);
  TileConfig big{8, 32, 4, false, 1, true}; // 8 rows: 64 KiB
  std::string why = llvm::toString(checkConfig(*st.def, st.shape, big));
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
  // Two passes: a twin where the accesses are 16 bytes; not with a head
  // and tail per row (its edges are loaded apart from the fold's vectors).
  TileConfig two{1, 64, 8, true, 1, true};
  EXPECT_NE(std::find(all.begin(), all.end(), two), all.end());
  ShapedTemplate ht = shapedCase({"hf_rmsnorm", "", "1,4096,4099"});
  ASSERT_TRUE(ht.def);
  why = llvm::toString(checkConfig(*ht.def, ht.shape, {4, 32, 1, true, 1, true}));
  EXPECT_NE(why.find("head and tail"), std::string::npos) << why;
  ShapedTemplate wan = shapedCase({"wan_rmsnorm_silu", "", "1,96,4,480,832"});
  ASSERT_TRUE(wan.def);
  EXPECT_TRUE(bool(checkConfig(*wan.def, wan.shape, {8, 4, 4, false, 1, true})));
}

// One pass: the outputs read the fold's loads of x (and the residual)
// back from shared memory: as many shared loads as stores, the same global
// loads as the row in registers, no barrier (each thread reads what it
// stored), and far fewer registers.
TEST(SharedRow, OutputsReadTheFoldsLoadsBackWithFewerRegisters) {
  for (auto [params, shape] : {std::pair{"", "8,1024,5120"},
                                std::pair{"residual=1", "4,4096,3072"}}) {
    ShapedTemplate st = shapedCase({"hf_rmsnorm", params, shape});
    ASSERT_TRUE(st.def);
    TileConfig base{2, 32, 4, false}, twin = base;
    twin.sharedRow = true;
    std::string pb = ptxOf(st, base), pt = ptxOf(st, twin);
    // 32 threads, 4-element accesses: 5120 columns of x, 40 per thread;
    // 3072 columns of x and the residual, 2 x 24.
    const size_t staged = params[0] ? 48 : 40;
    EXPECT_EQ(countOf(pb, "st.shared"), 0u) << params;
    EXPECT_EQ(countOf(pt, "st.shared"), staged) << params;
    EXPECT_EQ(countOf(pt, "ld.shared"), staged) << params;
    EXPECT_EQ(countOf(pt, "ld.global"), countOf(pb, "ld.global")) << params;
    EXPECT_EQ(countOf(pt, "bar.sync") + countOf(pt, "barrier.sync"), 0u);
    if (findPtxas().empty())
      continue;
    auto regs = [&](const TileConfig &c) {
      CompileOptions opts;
      opts.cubinTool = "ptxas";
      llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, c, opts);
      if (!k) {
        ADD_FAILURE() << c.str() << ": " << llvm::toString(k.takeError());
        return PtxasUsage{};
      }
      return parsePtxasLog(k->assemblerLog);
    };
    PtxasUsage ub = regs(base), ut = regs(twin);
    EXPECT_EQ(ut.spillBytes, 0) << params;
    EXPECT_LE(ut.registers, 128) << params; // base: 216..255
    EXPECT_GT(ub.registers, ut.registers + 48) << params;
  }
}

// Two passes: the fold's loads of x staged, one barrier, then the output
// mapping reads x from shared memory only (16-byte ld.shared): x is read
// once from global memory, and the staging stores keep constant offsets
// where a thread's accesses are clamped (idle threads: under a predicate,
// no select in the address), so the registers stay near the base's.
TEST(SharedRow, TwoPassesReadTheRowOnceFromGlobalMemory) {
  ShapedTemplate st = shapedCase({"hf_rmsnorm", "", "1,4096,4096"});
  ASSERT_TRUE(st.def);
  TileConfig base{1, 64, 8, true}, twin = base;
  twin.sharedRow = true;
  std::string pb = ptxOf(st, base), pt = ptxOf(st, twin);
  // Fold: T = 32 lanes on 32 of the 64 threads, 32 accesses of 4 elements;
  // outputs: 8 chunks of 8 (x, then the weight).
  EXPECT_EQ(countOf(pt, "st.shared.v2.b32"), 32u);
  EXPECT_EQ(countOf(pt, "ld.shared.v4.b32"), 8u);
  EXPECT_EQ(countOf(pt, "ld.global"), countOf(pb, "ld.global") - 8);
  EXPECT_EQ(countOf(pt, "bar.sync") + countOf(pt, "barrier.sync"),
            countOf(pb, "bar.sync") + countOf(pb, "barrier.sync") + 1);
  if (findPtxas().empty())
    GTEST_SKIP() << "ptxas not found: registers not checked";
  CompileOptions opts;
  opts.cubinTool = "ptxas";
  llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, twin, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  PtxasUsage u = parsePtxasLog(k->assemblerLog);
  EXPECT_EQ(u.spillBytes, 0);
  EXPECT_LE(u.registers, 96); // 128 with clamped staging addresses
}

} // namespace
