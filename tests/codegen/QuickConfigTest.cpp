//===- tests/codegen/QuickConfigTest.cpp - The fastest-compiling config ---===//
//
// codegen::quickConfig, what quick-first mode (runtime/Runtime.h) launches
// while the chosen config compiles: at every stock kernel's seed shapes it
// is a legal config of the space with the default's access width and at
// least a quarter of its rows a CTA (so it runs near memory speed, not
// 6x slower), and its PTX is never longer than the default's; where the
// default is a long one-pass row (the RMSNorms, the Wan norm) it is at most
// four fifths of it. ptxas's time follows the PTX's length
// (bench/results/2026-12-03-s17-compile-cpu.md).
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "keys/CacheKey.h"
#include "templates/Problem.h"
#include "templates/Registry.h"
#include "tools/ShapedTemplate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;

namespace {

size_t ptxBytes(const tools::ShapedTemplate &st, const TileConfig &c,
                CompileOptions opts = CompileOptions()) {
  opts.emitCubin = false;
  auto k = compile(*st.def, st.shape, c, opts);
  EXPECT_TRUE(bool(k)) << c.str() << ": " << llvm::toString(k.takeError());
  return k ? k->ptx.size() : 0;
}

/// Calls f(kernel name, seed shape, shaped problem) for every stock
/// kernel's seed shapes.
template <typename F> void forEachSeedShape(F &&f) {
  for (const templates::DescriptorRef &d : templates::Registry::global().all())
    for (const std::string &shape : d->seedShapes) {
      auto p = templates::makeProblem(d->name, "", shape);
      ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
      f(d->name, shape, tools::shapeProblem(*p));
    }
}

TEST(QuickConfig, IsLegalAndNeverLongerThanTheDefaultAtEverySeedShape) {
  int cases = 0, shorter = 0;
  forEachSeedShape([&](const std::string &name, const std::string &shape,
                       const tools::ShapedTemplate &st) {
    const TileConfig quick = quickConfig(*st.def, st.shape);
    const TileConfig dflt = defaultConfig(*st.def, st.shape);
    std::vector<TileConfig> space = enumerateConfigs(*st.def, st.shape);
    EXPECT_NE(std::find(space.begin(), space.end(), quick), space.end())
        << name << " " << shape << ": " << quick.str();
    EXPECT_EQ(quick.vectorElems, dflt.vectorElems)
        << name << " " << shape << ": " << quick.str();
    EXPECT_GE(quick.rowsPerCta * 4, dflt.rowsPerCta)
        << name << " " << shape << ": " << quick.str();
    const size_t q = ptxBytes(st, quick), base = ptxBytes(st, dflt);
    EXPECT_LE(q, base) << name << " " << shape << ": quick "
                       << quick.str() << ", default " << dflt.str();
    const bool longRow = name == "hf_rmsnorm" && shape != "1,256,8192";
    if (longRow || name == "rmsnorm_modulate" ||
        name == "wan_rmsnorm_silu")
      EXPECT_LE(q * 5, base * 4) << name << " " << shape << ": quick "
                                 << quick.str() << " " << q
                                 << " bytes, default " << dflt.str() << " "
                                 << base;
    ++cases;
    shorter += q < base;
  });
  EXPECT_GE(cases, 20);
  EXPECT_GE(shorter, cases / 2) << "the quick config rarely differs";
}

// Synchronous quick-first compiles the quick config for the shortest
// compile (keys::launchOptions' fastCompile: rows rolled, ptxas -O0): never
// more PTX than async mode's quick kernel, for the two-pass RMSNorm rows at
// least a sixth less (hf_rmsnorm at 4096 columns: 23164 -> 8817 bytes; the
// rolled loop stops re-emitting each chunk), and for the channels-last Wan
// norm's one-pass rows at least two fifths less (their output loop spells
// the divisions and exp out once a chunk: 17990 -> 9869 bytes at C = 96).
TEST(QuickConfig, SynchronousQuickKernelsRollTheirRows) {
  const CompileOptions fast = launchOptions("sm_90", false, true);
  ASSERT_TRUE(fast.rollRows);
  ASSERT_EQ(fast.assemblerOptLevel, 0);
  int shorter = 0, onePass = 0;
  forEachSeedShape([&](const std::string &name, const std::string &shape,
                       const tools::ShapedTemplate &st) {
    const TileConfig quick = quickConfig(*st.def, st.shape);
    const size_t rolled = ptxBytes(st, quick, fast),
                 plain = ptxBytes(st, quick);
    EXPECT_LE(rolled, plain) << name << " " << shape << " " << quick.str();
    const bool rms = name == "hf_rmsnorm" || name == "rmsnorm_modulate";
    if (rms && quick.twoPass) {
      EXPECT_LE(rolled * 6, plain * 5) << name << " " << shape << " "
                                       << quick.str();
      ++shorter;
    }
    const bool wanRows = name == "wan_rmsnorm_silu" &&
                         !dsl::isChannelsFirst(*st.def);
    if (wanRows && !quick.twoPass) {
      EXPECT_LE(rolled * 5, plain * 3) << name << " " << shape << " "
                                       << quick.str();
      ++onePass;
    }
  });
  EXPECT_GE(shorter, 6);
  EXPECT_GE(onePass, 2);
}

// Among configs that spell out as much, the one with the default's rows a
// CTA (its CTA count): at these shapes the two-pass row on 256 threads at
// one row a CTA ran 1.2-1.3x faster on the H200 than at two or four
// (bench/results/2026-12-04-s22-gpu-session.md, section 5).
TEST(QuickConfig, TiesKeepTheDefaultsRowsACta) {
  const std::pair<const char *, const char *> cases[] = {
      {"hf_rmsnorm", "1,4096,4096"},
      {"rmsnorm_modulate", "1,4096,4096"},
      {"ln_modulate", "2,1024,2240"}};
  for (const auto &[name, shape] : cases) {
    auto p = templates::makeProblem(name, "", shape);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    tools::ShapedTemplate st = tools::shapeProblem(*p);
    const TileConfig quick = quickConfig(*st.def, st.shape);
    EXPECT_EQ(quick.rowsPerCta, defaultConfig(*st.def, st.shape).rowsPerCta)
        << name << " " << shape << ": " << quick.str();
    EXPECT_EQ(quick.ctaThreads(), 256) << name << " " << shape;
  }
}

} // namespace
