//===- tests/tools/PrebuildTest.cpp - `bitfold prebuild` without a GPU ----===//
//
// Prebuild compiles for real (codegen, nvJitLink or ptxas) into a temporary
// cache directory; then `bitfold run` on the fake libcuda (two sm_90
// devices, "Fake H200 #0") launches the same shapes with that directory as
// $BITFOLD_CACHE_DIR and must compile nothing: the keys prebuild wrote are
// the ones a launch looks up. A second prebuild finds everything cached.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "autotune/ShapeClass.h"
#include "autotune/TuneDB.h"
#include "codegen/Codegen.h"
#include "runtime/Runtime.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

using namespace bitfold;
using namespace bitfold::tools::test;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::unsetenv("BITFOLD_DISK_CACHE");
  ::setenv("BITFOLD_QUIET", "1", 1);
  return true;
}();

/// Sets $BITFOLD_CACHE_DIR for the scope; then restores what was there.
struct CacheDirEnv {
  explicit CacheDirEnv(const std::string &dir) {
    if (const char *old = std::getenv("BITFOLD_CACHE_DIR"))
      saved = old;
    ::setenv("BITFOLD_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDirEnv() {
    if (saved)
      ::setenv("BITFOLD_CACHE_DIR", saved->c_str(), 1);
    else
      ::unsetenv("BITFOLD_CACHE_DIR");
  }
  std::optional<std::string> saved;
};

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// The seed-like shapes every test prebuilds: a stock kernel with params,
/// one without, and a user kernel from a program file.
std::string writeShapes(TempDir &dir) {
  dir.write("scale.bfk", scaleProgram("prebuild_user_scale"));
  return dir.write("shapes.json", R"([
  {"template": "ln_modulate", "shape": "1,8,128", "params": {"dtype": "bf16"}},
  {"template": "residual_gate", "shape": "2,4,64"},
  {"program": "scale.bfk", "shape": "4,256"}
])");
}

/// `bitfold run ARGS --iters 0` on the fake sm_90 GPU (with
/// $BITFOLD_CACHE_DIR set by the caller): its first launch must be a disk
/// hit.
void expectRunCompilesNothing(std::vector<std::string> args) {
  args.insert(args.end(), {"--iters", "0"});
  Output o = cli(args);
  const char *dir = std::getenv("BITFOLD_CACHE_DIR");
  // The fake driver runs nothing: outputs differ from the interpreter.
  EXPECT_EQ(o.status, 3) << joined(args) << "\n" << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "kernel cache: 0 compiled, 1 disk hits"))
      << joined(args) << " with BITFOLD_CACHE_DIR=" << (dir ? dir : "(unset)")
      << "\n"
      << o.out << o.err;
}

/// `bitfold run` of each shape of writeShapes() with `cache` as the cache
/// directory: every first launch must be a disk hit.
void expectRunsCompileNothing(const std::string &cache,
                              std::vector<std::string> extra = {}) {
  CacheDirEnv env(cache);
  const std::vector<std::vector<std::string>> runs = {
      {"run", "ln_modulate", "--shape", "1,8,128", "--params", "dtype=bf16"},
      {"run", "residual_gate", "--shape", "2,4,64"},
      {"run", "prebuild_user_scale", "--shape", "4,256"}};
  for (std::vector<std::string> args : runs) {
    args.insert(args.end(), extra.begin(), extra.end());
    expectRunCompilesNothing(args);
  }
}

TEST(Prebuild, ALaunchOnTheArchCompilesNothingAndASecondPrebuildNeither) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  std::string shapes = writeShapes(dir);
  std::string cache = dir.file("cache");
  std::vector<std::string> args = {"prebuild", "--shapes", shapes,
                                   "--arch",   "sm_90",    "--cache-dir",
                                   cache,      "-j",       "2"};
  Output first = cli(args);
  ASSERT_EQ(first.status, 0) << joined(args) << "\n" << first.out << first.err;
  EXPECT_TRUE(contains(first.out, "3 compiled, 0 already cached, 0 failed"))
      << first.out;
  EXPECT_TRUE(contains(first.out, "[3/3] ")) << first.out;
  EXPECT_TRUE(contains(first.out, " sm_90 ")) << first.out;

  expectRunsCompileNothing(cache);

  Output second = cli(args);
  ASSERT_EQ(second.status, 0) << second.out << second.err;
  EXPECT_TRUE(contains(second.out, "0 compiled, 3 already cached, 0 failed"))
      << second.out;
  EXPECT_FALSE(contains(second.out, ": compiled ")) << second.out;
}

TEST(Prebuild, EveryArchGetsItsOwnEntries) {
  TempDir dir;
  std::string shapes = writeShapes(dir);
  std::string cache = dir.file("cache");
  Output o = cli({"prebuild", "--shapes", shapes, "--arch", "sm_80,sm_90",
                  "--cache-dir", cache, "--templates", "residual_gate"});
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "2 compiled, 0 already cached, 0 failed"))
      << o.out;
  EXPECT_TRUE(contains(o.out, " sm_80 ")) << o.out;
  EXPECT_TRUE(contains(o.out, " sm_90 ")) << o.out;
  Output ls = cli({"cache", "ls", "--dir", cache});
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_TRUE(contains(ls.out, "sm_80") && contains(ls.out, "sm_90")) << ls.out;
}

/// A tune DB naming, for residual_gate 2,4,64 on the fake GPU, a winner
/// that is not the default; returns that winner.
std::string writeTuneDb(const std::string &path) {
  auto p = templates::makeProblem("residual_gate", "", "2,4,64");
  EXPECT_TRUE(bool(p)) << llvm::toString(p.takeError());
  const dsl::KernelDef &def = *p->def;
  keys::ShapeClass cls = autotune::tunedShapeClass(def, p->shape);
  keys::TileConfig dflt = codegen::defaultConfig(def, cls.shapeSpec());
  std::string winner;
  for (const keys::TileConfig &c :
       codegen::enumerateConfigs(def, cls.shapeSpec()))
    if (!(c == dflt) && winner.empty())
      winner = c.str();
  EXPECT_FALSE(winner.empty()) << "residual_gate 2,4,64 has one config only";
  std::string toolchain = runtime::defaultCompiler().toolchainVersion();
  autotune::TuneDB db;
  db.record(keys::tuneKeyFor(
                def, cls.str(),
                keys::currentEnvironment("Fake H200 #0", "sm_90", toolchain)),
            dflt.str(),
            {{winner, 1.0, 0.1, 0.9, 1.1, 20, false},
             {dflt.str(), 2.0, 0.1, 1.9, 2.1, 20, false}});
  EXPECT_FALSE(bool(db.save(path)));
  return winner;
}

TEST(Prebuild, TuneDbWinnersAreWhatALaunchWithThatDbFinds) {
  TempDir dir;
  std::string shapes = writeShapes(dir);
  std::string db = dir.file("tune-db.json");
  std::string winner = writeTuneDb(db);
  std::string cache = dir.file("cache");
  Output o = cli({"prebuild", "--shapes", shapes, "--tune-db", db, "--arch",
                  "sm_90", "--cache-dir", cache});
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, winner + " (tune DB on Fake H200 #0)"))
      << "winner " << winner << "\n"
      << o.out;
  // Shapes the DB has no entry for get the default.
  EXPECT_TRUE(contains(o.out, "(default on Fake H200 #0)")) << o.out;
  expectRunsCompileNothing(cache, {"--tune-db", db});
}

TEST(Prebuild, EveryConfigBuildsEachLegalConfigThatALaunchPinningItFinds) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  std::string shapes = dir.write(
      "one.json", R"([{"template": "residual_gate", "shape": "2,4,64"}])");
  std::string cache = dir.file("cache");
  Output o = cli({"prebuild", "--shapes", shapes, "--arch", "sm_90",
                  "--cache-dir", cache, "--every-config", "-j", "2"});
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  auto p = templates::makeProblem("residual_gate", "", "2,4,64");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  keys::ShapeClass cls = autotune::tunedShapeClass(*p->def, p->shape);
  std::vector<keys::TileConfig> all =
      codegen::enumerateConfigs(*p->def, cls.shapeSpec());
  ASSERT_GT(all.size(), 2u);
  EXPECT_TRUE(contains(o.out, std::to_string(all.size()) +
                                  " compiled, 0 already cached, 0 failed"))
      << o.out;
  CacheDirEnv env(cache);
  for (const keys::TileConfig &c : {all.front(), all.back()})
    expectRunCompilesNothing(
        {"run", "residual_gate", "--shape", "2,4,64", "--config", c.str()});
}

TEST(Prebuild, LayerNormRowCountsEitherSideOfManyRowsFindTheirOwnEntries) {
  // ln_modulate at 2240 columns: 16 rows and 2048 rows are two classes
  // (keys::rowCountSplits) with different defaults; a launch of each finds
  // the entry prebuild wrote for it.
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  std::string shapes = dir.write("ln.json", R"([
  {"template": "ln_modulate", "shape": "1,16,2240"},
  {"template": "ln_modulate", "shape": "2,1024,2240"}
])");
  std::string cache = dir.file("cache");
  Output o = cli({"prebuild", "--shapes", shapes, "--arch", "sm_90",
                  "--cache-dir", cache, "-j", "2"});
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "2 compiled, 0 already cached, 0 failed"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "1,16,2240 sm_90 r1.t64.v8.p1 (default)"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "2,1024,2240 sm_90 r1.t32.v8.p1 (default)"))
      << o.out;
  CacheDirEnv env(cache);
  for (const char *shape : {"1,16,2240", "2,1024,2240"})
    expectRunCompilesNothing({"run", "ln_modulate", "--shape", shape});
}

TEST(Prebuild, BadArchsShapesAndOptionsAreUsageErrors) {
  TempDir dir;
  std::string shapes = writeShapes(dir);
  std::string cache = dir.file("cache");
  std::string badJson = dir.write("bad.json", "[{\"template\": ");
  std::string badShape = dir.write(
      "badshape.json", R"([{"template": "ln_modulate", "shape": "1,8,0"}])");
  std::string unknown = dir.write(
      "unknown.json", R"([{"template": "no_such_kernel", "shape": "1,8"}])");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--shapes", shapes, "--arch", "sm_75", "--cache-dir", cache},
       "--arch: target arch 'sm_75'"},
      {{"--shapes", shapes, "--arch", "sm_90,gfx90a", "--cache-dir", cache},
       "--arch: target arch 'gfx90a'"},
      {{"--shapes", shapes, "--arch", ",", "--cache-dir", cache},
       "expected --arch"},
      {{"--shapes", dir.file("missing.json"), "--cache-dir", cache},
       "missing.json"},
      {{"--shapes", badJson, "--cache-dir", cache}, "bad.json"},
      {{"--shapes", badShape, "--cache-dir", cache}, "ln_modulate 1,8,0"},
      {{"--shapes", unknown, "--cache-dir", cache}, "no_such_kernel"},
      {{"--shapes", shapes}, "expected --cache-dir"},
      {{"--cache-dir", cache}, "expected --shapes"},
      {{"--shapes", shapes, "--cache-dir", cache, "--gpu", "NVIDIA H200"},
       "--gpu"},
      {{"--shapes", shapes, "--cache-dir", cache, "--tune-db",
        dir.file("nodb.json")},
       "nodb.json: no such file"},
      {{"--shapes", shapes, "--cache-dir", cache, "--jobs", "100000"},
       "--jobs"},
      {{"--shapes", shapes, "--cache-dir", cache, "--every-config",
        "--tune-db", dir.file("nodb.json")},
       "--every-config"},
  };
  for (const Case &c : cases) {
    std::vector<std::string> args = {"prebuild"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Output o = cli(args);
    EXPECT_EQ(o.status, 2) << joined(args) << "\n" << o.out << o.err;
    EXPECT_TRUE(contains(o.err, c.message))
        << joined(args) << "\nexpected '" << c.message << "' in\n"
        << o.err;
  }
  EXPECT_FALSE(llvm::sys::fs::exists(cache)) << "a usage error wrote " << cache;
}

} // namespace
