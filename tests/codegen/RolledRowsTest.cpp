//===- tests/codegen/RolledRowsTest.cpp - Rolled two-pass rows (CPU) ------===//
//
// Rolled rows (codegen/EmitRolledRows.cpp): row plans loop over a row's
// chunks. By default only plans past 64 vector accesses per thread roll
// (wide rows: none of the norms' seed shapes, whose PTX is the same as
// with BITFOLD_ROLLED_ROWS=0); =1 rolls every two-pass plan; never a
// one-pass plan with folds. Rolled, every two-pass config of the norm
// kernels passes the PTX audit and ptxas without spills, is several times
// smaller, and does per thread exactly the unrolled kernel's float ops,
// loads and stores (counted in the PTX: each loop body times its trip
// count), so the loop only stops re-emitting the body.
//
//===----------------------------------------------------------------------===//

#include "codegen/Assemble.h"
#include "codegen/PtxAudit.h"
#include "dsl/Parser.h"
#include "keys/CacheKey.h"
#include "tools/ShapedTemplate.h"

#include "CompileStock.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;

namespace {

/// Sets (or, with nullptr, unsets) BITFOLD_ROLLED_ROWS for a scope.
class RolledRowsEnv {
public:
  explicit RolledRowsEnv(const char *value) {
    if (const char *old = std::getenv(kName))
      saved = old;
    set(value);
  }
  ~RolledRowsEnv() { set(saved ? saved->c_str() : nullptr); }

private:
  static constexpr const char *kName = "BITFOLD_ROLLED_ROWS";
  static void set(const char *value) {
    if (value)
      ::setenv(kName, value, 1);
    else
      ::unsetenv(kName);
  }
  std::optional<std::string> saved;
};

struct Stock {
  const char *name, *params, *shape;
};

/// The row-layout norm kernels at seed shapes.
const Stock kNorms[] = {
    {"hf_rmsnorm", "", "1,4096,4096"},
    {"hf_rmsnorm", "", "8,1024,5120"},
    {"hf_rmsnorm", "", "1,256,8192"},
    {"rmsnorm_modulate", "", "1,4096,4096"},
    {"ln_modulate", "", "1,4096,4096"},
    {"ln_modulate", "", "2,1024,2240"},
    {"qk_layernorm", "", "1,4360,32,128"},
    {"wan_rmsnorm_silu", "bias=0", "1,384,2,120,208"},
};

tools::ShapedTemplate shaped(const Stock &s) {
  llvm::Expected<templates::Problem> p =
      templates::makeProblem(s.name, s.params, s.shape);
  EXPECT_TRUE(bool(p)) << llvm::toString(p.takeError());
  return tools::shapeProblem(*p);
}

std::string label(const Stock &s, const TileConfig &c) {
  return llvm::formatv("{0} {1} {2} {3}", s.name, s.params, s.shape, c.str());
}

llvm::Expected<CompiledKernel> compileWith(const tools::ShapedTemplate &st,
                                           const TileConfig &c,
                                           const char *rolledRows,
                                           bool assemble = false) {
  RolledRowsEnv env(rolledRows);
  CompileOptions opts;
  opts.emitCubin = assemble;
  if (assemble)
    opts.cubinTool = "ptxas";
  return compile(*st.def, st.shape, c, opts);
}

std::vector<TileConfig> twoPassConfigs(const tools::ShapedTemplate &st) {
  std::vector<TileConfig> out;
  for (const TileConfig &c : enumerateConfigs(*st.def, st.shape))
    if (c.twoPass)
      out.push_back(c);
  return out;
}

/// Per-thread counts of the PTX's float ops, loads, stores and shuffles,
/// each instruction counted once per execution: a loop (from a label to the
/// last branch back to it; LLVM may put the latch first, so a branch back
/// from inside the body belongs to the same loop) runs `trips[i]` times,
/// loops in order of their first line.
std::map<std::string, int64_t> dynamicCounts(llvm::StringRef ptx,
                                             const std::vector<int64_t> &trips) {
  llvm::SmallVector<llvm::StringRef> lines;
  ptx.split(lines, '\n');
  std::map<std::string, size_t> labelAt;
  std::vector<std::pair<size_t, size_t>> loops; // [first, last] line
  for (size_t i = 0; i < lines.size(); ++i) {
    llvm::StringRef l = lines[i].trim();
    if (l.starts_with("$L") && l.ends_with(":"))
      labelAt[l.drop_back().str()] = i;
    size_t bra = l.find("bra");
    if (bra == llvm::StringRef::npos)
      continue;
    llvm::StringRef target = l.substr(bra).split(' ').second.trim().rtrim(';');
    auto it = labelAt.find(target.trim().str());
    if (it == labelAt.end())
      continue; // forward
    if (!loops.empty() && it->second <= loops.back().second)
      loops.back() = {std::min(loops.back().first, it->second), i};
    else
      loops.push_back({it->second, i});
  }
  EXPECT_EQ(loops.size(), trips.size()) << "loops in the PTX";
  std::vector<int64_t> times(lines.size(), 1);
  for (size_t k = 0; k < loops.size() && k < trips.size(); ++k)
    for (size_t j = loops[k].first; j <= loops[k].second; ++j)
      times[j] = trips[k];
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i < lines.size(); ++i) {
    llvm::StringRef op = lines[i].trim();
    if (op.starts_with("@"))
      op = op.split(' ').second.trim();
    op = op.split(' ').first.split('\t').first;
    bool memory = op.starts_with("ld.global") || op.starts_with("st.global") ||
                  op.starts_with("shfl.");
    bool arith = op.contains("f32") &&
                 (op.starts_with("add.") || op.starts_with("sub.") ||
                  op.starts_with("mul.") || op.starts_with("fma.") ||
                  op.starts_with("div.") || op.starts_with("rsqrt.") ||
                  op.starts_with("sqrt.") || op.starts_with("rcp.") ||
                  op.starts_with("ex2.") || op.starts_with("cvt.rn."));
    if (memory || arith)
      counts[op.str()] += times[i];
  }
  return counts;
}

std::vector<int64_t> loopTrips(const tools::ShapedTemplate &st,
                               const TileConfig &c,
                               const char *rolledRows = "1") {
  RolledRowsEnv env(rolledRows);
  llvm::Expected<Plan> plan = makePlan(*st.def, st.shape, c);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  std::vector<int64_t> trips;
  if (!plan->rolledRows)
    return trips;
  for (const FoldPlan &fp : plan->folds)
    if (fp.loopReps)
      trips.push_back(fp.loopReps / fp.loopStep);
  if (plan->outLoopChunks)
    trips.push_back(plan->outLoopChunks / plan->outLoopStep);
  return trips;
}

} // namespace

TEST(RolledRows, AtASeedShapeOnlyTheVariableSetToOneRollsTwoPassPlansWithALoop) {
  tools::ShapedTemplate st = shaped(kNorms[0]);
  int rolled = 0;
  for (const TileConfig &c : enumerateConfigs(*st.def, st.shape))
    for (const char *v : {(const char *)nullptr, "0", "", "yes", "1"}) {
      RolledRowsEnv env(v);
      llvm::Expected<Plan> p = makePlan(*st.def, st.shape, c);
      ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
      bool on = v && llvm::StringRef(v) == "1";
      if (!on || !c.twoPass) {
        EXPECT_FALSE(p->rolledRows) << c.str() << " " << (v ? v : "unset");
        continue;
      }
      bool loop = p->outLoopChunks > 0;
      for (const FoldPlan &fp : p->folds)
        loop = loop || fp.loopReps > 0;
      EXPECT_EQ(p->rolledRows, loop) << c.str();
      rolled += p->rolledRows;
    }
  EXPECT_GT(rolled, 0);
}

// CompileOptions::rollRows (the synchronous quick tier's, and in every
// cache key) rolls as BITFOLD_ROLLED_ROWS=1 does, whatever the variable
// says: the same PTX.
TEST(RolledRows, TheRollRowsOptionRollsAsTheVariableSetToOne) {
  tools::ShapedTemplate st = shaped(kNorms[0]); // hf_rmsnorm 1,4096,4096
  const TileConfig c{1, 256, 4, true};
  llvm::Expected<CompiledKernel> byVariable = compileWith(st, c, "1");
  llvm::Expected<CompiledKernel> unrolled = compileWith(st, c, nullptr);
  ASSERT_TRUE(byVariable && unrolled);
  for (const char *v : {(const char *)nullptr, "0", "1"}) {
    RolledRowsEnv env(v);
    CompileOptions opts;
    opts.emitCubin = false;
    opts.rollRows = true;
    EXPECT_EQ(rolledRowsMode(opts), RolledRowsMode::Always);
    llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, c, opts);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ(k->ptx, byVariable->ptx) << (v ? v : "unset");
    EXPECT_LT(k->ptx.size() * 2, unrolled->ptx.size()) << (v ? v : "unset");
  }
}

// A Welford fold's count is the same in every row: unrolled, it is a
// constant per vector; a loop would carry it and redo its adds per element.
TEST(RolledRows, WelfordFoldsStayUnrolledTheirOutputsRoll) {
  RolledRowsEnv env("1");
  tools::ShapedTemplate st = shaped(kNorms[4]); // ln_modulate 1,4096,4096
  tools::ShapedTemplate sum = shaped(kNorms[0]); // hf_rmsnorm 1,4096,4096
  TileConfig c{1, 64, 4, true};
  llvm::Expected<Plan> p = makePlan(*st.def, st.shape, c);
  llvm::Expected<Plan> q = makePlan(*sum.def, sum.shape, c);
  ASSERT_TRUE(p && q);
  EXPECT_EQ(p->folds[0].loopReps, 0);
  EXPECT_GT(p->outLoopChunks, 0);
  EXPECT_GT(q->folds[0].loopReps, 0);
  EXPECT_GT(q->outLoopChunks, 0);
}

TEST(RolledRows, ConfigSpaceDoesNotDependOnTheVariable) {
  for (const Stock &s : kNorms) {
    tools::ShapedTemplate st = shaped(s);
    std::vector<TileConfig> off, on;
    {
      RolledRowsEnv env(nullptr);
      off = enumerateConfigs(*st.def, st.shape);
    }
    {
      RolledRowsEnv env("1");
      on = enumerateConfigs(*st.def, st.shape);
    }
    ASSERT_EQ(off.size(), on.size()) << s.name << " " << s.shape;
    for (size_t i = 0; i < off.size(); ++i)
      EXPECT_EQ(off[i].str(), on[i].str());
  }
}

TEST(RolledRows, UnsetOrZeroLeavesThePtxByteIdentical) {
  for (const Stock &s : {kNorms[0], kNorms[4]}) {
    tools::ShapedTemplate st = shaped(s);
    for (const TileConfig &c : enumerateConfigs(*st.def, st.shape)) {
      llvm::Expected<CompiledKernel> unset = compileWith(st, c, nullptr);
      llvm::Expected<CompiledKernel> zero = compileWith(st, c, "0");
      ASSERT_TRUE(unset && zero) << label(s, c);
      EXPECT_EQ(unset->ptx, zero->ptx) << label(s, c);
    }
  }
}

TEST(RolledRows, TwoPassConfigsAreAuditedAssembleWithoutSpillsAndShrink) {
  const bool assemble = !findPtxas().empty();
  for (const Stock &s : kNorms) {
    tools::ShapedTemplate st = shaped(s);
    PtxAllowances allow = allowancesOf(*st.def);
    for (const TileConfig &c : twoPassConfigs(st)) {
      llvm::Expected<CompiledKernel> rolled = compileWith(st, c, "1", assemble);
      ASSERT_TRUE(bool(rolled)) << label(s, c) << ": "
                                << llvm::toString(rolled.takeError());
      if (llvm::Error e = auditPtx(*rolled, allow))
        ADD_FAILURE() << label(s, c) << ": " << llvm::toString(std::move(e));
      if (assemble) {
        PtxasUsage u = parsePtxasLog(rolled->assemblerLog);
        EXPECT_EQ(u.spillBytes, 0) << label(s, c);
        EXPECT_EQ(u.stackBytes, 0) << label(s, c);
      }
      llvm::Expected<CompiledKernel> unrolled = compileWith(st, c, "0");
      ASSERT_TRUE(bool(unrolled)) << llvm::toString(unrolled.takeError());
      EXPECT_LE(rolled->ptx.size(), unrolled->ptx.size()) << label(s, c);
      std::vector<int64_t> trips = loopTrips(st, c);
      std::cout << "[ ptx size ] " << label(s, c) << ": "
                << unrolled->ptx.size() << " -> " << rolled->ptx.size()
                << " bytes\n";
      // Rows of 4096 columns and more, at most 64 threads per row, every
      // fold and the outputs rolled: the loops hold most of the row.
      if (st.shape.cols >= 4096 && c.threadsPerRow <= 64 &&
          trips.size() == st.def->folds.size() + 1) {
        EXPECT_GE(unrolled->ptx.size(), 2 * rolled->ptx.size()) << label(s, c);
      }
      if (trips.empty()) {
        EXPECT_EQ(rolled->ptx, unrolled->ptx) << label(s, c) << ": no loop";
      }
    }
  }
}

// The DAG is the unrolled one's: per thread, the same float ops, loads,
// stores and shuffles, once each.
TEST(RolledRows, PerThreadOpsLoadsAndStoresEqualTheUnrolledKernels) {
  for (const Stock &s : kNorms) {
    tools::ShapedTemplate st = shaped(s);
    for (const TileConfig &c : twoPassConfigs(st)) {
      std::vector<int64_t> trips = loopTrips(st, c);
      if (trips.empty())
        continue;
      llvm::Expected<CompiledKernel> rolled = compileWith(st, c, "1");
      llvm::Expected<CompiledKernel> unrolled = compileWith(st, c, "0");
      ASSERT_TRUE(rolled && unrolled) << label(s, c);
      std::map<std::string, int64_t> r = dynamicCounts(rolled->ptx, trips);
      std::map<std::string, int64_t> u = dynamicCounts(unrolled->ptx, {});
      // LLVM folds the unrolled first push `0 + x*x` to x*x (exact: x*x is
      // never -0); in the loop the empty state is a carried value, so each
      // accumulator may keep that one add.
      int64_t emptyAdds = 0;
      {
        RolledRowsEnv env("1");
        llvm::Expected<Plan> p = makePlan(*st.def, st.shape, c);
        ASSERT_TRUE(bool(p));
        for (const FoldPlan &fp : p->folds)
          emptyAdds += fp.loopReps ? fp.k * fp.acc : 0;
      }
      for (auto &[op, n] : u) {
        if (op == "add.rn.f32") {
          EXPECT_GE(r[op], n) << label(s, c);
          EXPECT_LE(r[op], n + emptyAdds) << label(s, c);
          continue;
        }
        EXPECT_EQ(r[op], n) << label(s, c) << ": " << op;
      }
      int64_t stores = 0;
      for (auto &[op, n] : u)
        stores += llvm::StringRef(op).starts_with("st.global") ? n : 0;
      EXPECT_GT(stores, 0) << label(s, c);
    }
  }
}

/// Bytes a per-thread count moves through the global accesses whose op
/// starts with `prefix` ("ld.global", "st.global"): width x vector.
int64_t globalBytes(const std::map<std::string, int64_t> &counts,
                    llvm::StringRef prefix) {
  int64_t bytes = 0;
  for (const auto &[name, n] : counts) {
    llvm::StringRef op(name);
    if (!op.consume_front(prefix))
      continue;
    int64_t lanes = op.contains(".v4.") ? 4 : op.contains(".v2.") ? 2 : 1;
    int64_t width = op.ends_with("b16") ? 2 : op.ends_with("b64") ? 8
                    : op.ends_with("b8") ? 1 : 4;
    bytes += n * lanes * width;
  }
  return bytes;
}

/// Counts with each paired conversion (cvt.rn.bf16x2.f32) as two single
/// ones: narrower output chunks may pair the roundings differently.
std::map<std::string, int64_t>
unpaired(const std::map<std::string, int64_t> &counts) {
  std::map<std::string, int64_t> out;
  for (const auto &[name, n] : counts) {
    llvm::StringRef op(name);
    size_t x2 = op.find("16x2");
    if (x2 == llvm::StringRef::npos)
      out[name] += n;
    else
      out[(op.take_front(x2 + 2) + op.drop_front(x2 + 4)).str()] += 2 * n;
  }
  return out;
}

// With the variable set (and in the quick tier, CompileOptions::rollRows) a
// one-pass plan folds as a two-pass one and loops over its output chunks,
// reading the row again: the same float ops per thread and the same bytes
// stored, more bytes loaded, and much less PTX where the output math is
// long (the Wan norm's divisions and exp). Rows that do not loop keep the
// unrolled PTX byte for byte.
TEST(RolledRows, OnePassPlansRollTheirOutputsRereadingTheRow) {
  const Stock onePass[] = {
      {"ln_modulate", "", "1,4096,4096"},
      {"rmsnorm_modulate", "", "1,4096,4096"},
      {"qk_layernorm", "", "1,4360,32,128"},
      {"wan_rmsnorm_silu", "bias=0", "1,96,4,480,832"},
      {"wan_rmsnorm_silu", "bias=0", "1,192,4,240,416"},
      {"wan_rmsnorm_silu", "form=f32", "1,384,2,120,208"}};
  int looped = 0;
  for (const Stock &s : onePass) {
    tools::ShapedTemplate st = shaped(s);
    for (const TileConfig &c : enumerateConfigs(*st.def, st.shape)) {
      if (c.twoPass || c.sharedRow)
        continue;
      llvm::Expected<CompiledKernel> rolled = compileWith(st, c, "1");
      llvm::Expected<CompiledKernel> unrolled = compileWith(st, c, "0");
      ASSERT_TRUE(rolled && unrolled) << label(s, c);
      std::vector<int64_t> trips = loopTrips(st, c);
      if (trips.empty()) {
        EXPECT_EQ(rolled->ptx, unrolled->ptx) << label(s, c) << ": no loop";
        continue;
      }
      ++looped;
      EXPECT_LT(rolled->ptx.size(), unrolled->ptx.size()) << label(s, c);
      // The Wan norm's exact divisions and SiLU have out-of-line slow
      // paths that branch back, which dynamicCounts cannot tell from loops:
      // its PTX size only.
      if (s.name == llvm::StringRef("wan_rmsnorm_silu")) {
        EXPECT_LE(rolled->ptx.size() * 10, unrolled->ptx.size() * 7)
            << label(s, c);
        continue;
      }
      std::map<std::string, int64_t> r =
          unpaired(dynamicCounts(rolled->ptx, trips));
      std::map<std::string, int64_t> u =
          unpaired(dynamicCounts(unrolled->ptx, {}));
      int64_t emptyAdds = 0;
      {
        RolledRowsEnv env("1");
        llvm::Expected<Plan> p = makePlan(*st.def, st.shape, c);
        ASSERT_TRUE(bool(p));
        EXPECT_FALSE(p->outputUsesFoldMapping) << label(s, c);
        for (const FoldPlan &fp : p->folds)
          emptyAdds += fp.loopReps ? fp.k * fp.acc : 0;
      }
      std::set<std::string> ops;
      for (const auto &[op, n] : u)
        ops.insert(op);
      for (const auto &[op, n] : r)
        ops.insert(op);
      for (const std::string &op : ops) {
        llvm::StringRef o(op);
        if (o.starts_with("ld.global") || o.starts_with("st.global"))
          continue; // the output chunks may be narrower: bytes, below
        if (op == "add.rn.f32") {
          EXPECT_GE(r[op], u[op]) << label(s, c);
          EXPECT_LE(r[op], u[op] + emptyAdds) << label(s, c);
          continue;
        }
        EXPECT_EQ(r[op], u[op]) << label(s, c) << ": " << op;
      }
      EXPECT_EQ(globalBytes(r, "st.global"), globalBytes(u, "st.global"))
          << label(s, c);
      EXPECT_GT(globalBytes(r, "ld.global"), globalBytes(u, "ld.global"))
          << label(s, c);
    }
  }
  EXPECT_GE(looped, 10);
}

// Channels-first plans map pixels and lanes, not row chunks: rolling rows
// leaves every one of their configs as it was (the variable, and the quick
// tier's option at the quick config), byte for byte.
TEST(RolledRows, ChannelsFirstPlansKeepTheirPtx) {
  const Stock cf[] = {
      {"wan_rmsnorm_silu", "layout=channels_first,bias=0", "1,96,4,480,832"},
      {"wan_rmsnorm_silu", "layout=channels_first,form=f32",
       "1,384,2,120,208"}};
  for (const Stock &s : cf) {
    tools::ShapedTemplate st = shaped(s);
    std::vector<TileConfig> configs = enumerateConfigs(*st.def, st.shape);
    ASSERT_FALSE(configs.empty()) << s.name;
    for (const TileConfig &c : configs) {
      llvm::Expected<CompiledKernel> on = compileWith(st, c, "1");
      llvm::Expected<CompiledKernel> off = compileWith(st, c, "0");
      ASSERT_TRUE(on && off) << label(s, c);
      EXPECT_EQ(on->ptx, off->ptx) << label(s, c);
    }
    const TileConfig quick = quickConfig(*st.def, st.shape);
    CompileOptions fast = launchOptions("sm_90", false, true);
    fast.emitCubin = false;
    llvm::Expected<CompiledKernel> q = compile(*st.def, st.shape, quick, fast);
    llvm::Expected<CompiledKernel> plain = compileWith(st, quick, "0");
    ASSERT_TRUE(q && plain) << label(s, quick);
    EXPECT_EQ(q->ptx, plain->ptx) << label(s, quick);
  }
}

/// Wide rows: the configs of a kernel and shape past 64 vector accesses of
/// a row per thread (a loop that may roll: two passes, or no fold), one per
/// threads and vector width (the rows per CTA change no loop).
std::vector<TileConfig> wideConfigs(const tools::ShapedTemplate &st) {
  std::vector<TileConfig> out;
  std::set<std::pair<int, int>> seen;
  for (const TileConfig &c : enumerateConfigs(*st.def, st.shape)) {
    if (!seen.insert({c.threadsPerRow, c.vectorElems}).second)
      continue;
    int64_t perThread =
        (st.shape.cols + int64_t(c.threadsPerRow) * c.vectorElems - 1) /
        (int64_t(c.threadsPerRow) * c.vectorElems);
    if (perThread > 64 && (c.twoPass || st.def->folds.empty()))
      out.push_back(c);
  }
  return out;
}

// By default a wide row rolls (an elementwise row, and a sum fold's two
// passes), with the unrolled kernel's per-thread ops, loads and stores.
TEST(RolledRows, WideRowsRollByDefaultDoingTheUnrolledKernelsWork) {
  const Stock wide[] = {{"residual_gate", "", "1,4096,4096"},
                        {"conv_bias", "", "1,8192,1,2,2"},
                        {"hf_rmsnorm", "", "1,2,65536"}};
  for (const Stock &s : wide) {
    tools::ShapedTemplate st = shaped(s);
    std::vector<TileConfig> configs = wideConfigs(st);
    EXPECT_FALSE(configs.empty()) << s.name;
    for (const TileConfig &c : configs) {
      std::vector<int64_t> trips = loopTrips(st, c, nullptr);
      ASSERT_FALSE(trips.empty()) << label(s, c) << ": not rolled by default";
      llvm::Expected<CompiledKernel> rolled = compileWith(st, c, nullptr);
      llvm::Expected<CompiledKernel> unrolled = compileWith(st, c, "0");
      ASSERT_TRUE(rolled && unrolled) << label(s, c);
      EXPECT_LT(2 * rolled->ptx.size(), unrolled->ptx.size()) << label(s, c);
      std::map<std::string, int64_t> r = dynamicCounts(rolled->ptx, trips);
      std::map<std::string, int64_t> u = dynamicCounts(unrolled->ptx, {});
      for (auto &[op, n] : u) {
        if (op == "add.rn.f32")
          continue; // the carried empty state, as above
        EXPECT_EQ(r[op], n) << label(s, c) << ": " << op;
      }
    }
  }
}

// What the fuzz target met: an elementwise program with a libdevice call
// per element at 4097 columns on 4 threads per row unrolled 1025 vectors
// per thread (1.2 MB of PTX, 4 s); rolled it stays small.
TEST(RolledRows, AWideElementwiseRowCompilesToBoundedPtx) {
  const char *text = R"(bitfold.row_program wide_tanh v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16777216
input x : f32 row_major per_element
body:
  %x = load x : f32
  %t = tanh_libdevice %x : f32
  output y : f32 row_major = %t
)";
  auto def = dsl::parseKernel(text, "wide");
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  ShapeSpec shape;
  shape.cols = 4097;
  TileConfig c{64, 4, 1, false};
  CompileOptions opts;
  opts.emitCubin = false;
  RolledRowsEnv env(nullptr);
  llvm::Expected<CompiledKernel> k = compile(**def, shape, c, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_LT(k->ptx.size(), size_t(64 * 1024));
}

// A Welford fold never rolls (its count would be redone per element), so a
// wide row bounds its thread's share: LayerNorm at 65536 columns on 32
// threads x 4 (512 vectors per thread; the fuzz target met it, seconds to
// compile) is illegal with a reason, and the configs that stay have at
// most 128 vectors per thread.
TEST(RolledRows, AFoldThatNeverRollsBoundsAThreadsShareOfAWideRow) {
  tools::ShapedTemplate st = shaped({"ln_modulate", "", "1,4,65536"});
  llvm::Error e = checkConfig(*st.def, st.shape, TileConfig{4, 32, 4, true});
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("a fold that does not roll"),
            std::string::npos);
  std::vector<TileConfig> legal = enumerateConfigs(*st.def, st.shape);
  EXPECT_FALSE(legal.empty());
  for (const TileConfig &c : legal)
    EXPECT_LE(st.shape.cols / (int64_t(c.threadsPerRow) * c.vectorElems), 128)
        << c.str();
}

// A fold's share is its lanes' vectors, not the row over all threads: a
// serial order (one lane) on 256 threads had one thread unroll all 4096
// columns (the fuzz target: 168 s and 2 GB to compile). Now it rolls by
// default, and past 4096 vectors the config is illegal with the reason.
TEST(RolledRows, AOneLaneFoldOnManyThreadsIsBoundedByItsOwnShare) {
  const char *text = R"(bitfold.row_program serial_mean v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 65536
input x : f32 row_major per_element
body:
  %x = load x : f32
  fold 0 of %x order serial threads 1 vector 1 stages []
  combiner sum (acc) empty (0) results (acc)
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
  %sum = fold_value 0.acc : f32
  %d = sub %x, %sum : f32
  output y : f32 row_major = %d
)";
  auto def = dsl::parseKernel(text, "serial");
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  RolledRowsEnv env(nullptr);
  ShapeSpec shape;
  shape.cols = 4096;
  TileConfig c{1, 256, 1, true};
  llvm::Expected<Plan> plan = makePlan(**def, shape, c);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_TRUE(plan->rolledRows);
  CompileOptions opts;
  opts.emitCubin = false;
  llvm::Expected<CompiledKernel> k = compile(**def, shape, c, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_LT(k->ptx.size(), size_t(64 * 1024));
  shape.cols = 8192;
  llvm::Error e = checkConfig(**def, shape, c);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("fold 0: each thread would fold"),
            std::string::npos);
}
