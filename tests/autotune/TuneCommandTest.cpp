//===- tests/autotune/TuneCommandTest.cpp - `bitfold tune` without a GPU --===//

#include "TestEnv.h"

#include "autotune/TuneCommand.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace bitfold::autotune;
using namespace bitfold::autotune::test;

namespace {

int run(std::vector<std::string> args, std::string &out) {
  llvm::raw_string_ostream os(out);
  return runTuneCommand(args, os);
}

TEST(TuneCommand, MergeWritesTheOrderIndependentUnion) {
  TempDir dir;
  TuneDB a, b;
  a.record(keyFor("h1", "cls"), "d", {meas("r1.t128.v8.p1", 10)});
  b.record(keyFor("h2", "cls"), "d", {meas("r1.t128.v8.p1", 12)});
  ASSERT_FALSE(bool(a.save(dir.file("a.json"))));
  ASSERT_FALSE(bool(b.save(dir.file("b.json"))));
  std::string out;
  EXPECT_EQ(run({"merge", dir.file("a.json"), dir.file("b.json"), "-o",
                 dir.file("ab.json")},
                out),
            0);
  EXPECT_EQ(run({"merge", dir.file("b.json"), dir.file("a.json"), "-o",
                 dir.file("ba.json")},
                out),
            0);
  auto ab = TuneDB::load(dir.file("ab.json"));
  auto ba = TuneDB::load(dir.file("ba.json"));
  ASSERT_TRUE(bool(ab) && bool(ba));
  EXPECT_EQ(ab->size(), 2u);
  EXPECT_EQ(ab->toJsonText(), ba->toJsonText());
}

TEST(TuneCommand, MissingArgumentsAreUsageErrors) {
  std::string out;
  EXPECT_EQ(run({"--out", "/tmp/x"}, out), 1);
  EXPECT_EQ(run({"merge", "a.json"}, out), 1);
  EXPECT_EQ(run({"--help"}, out), 0);
  EXPECT_NE(out.find("--shard i/n"), std::string::npos);
  EXPECT_NE(out.find("--timing steady|flushed"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run({"--shapes", "s.json", "--out", "/tmp/x", "--timing", "warm"},
                out),
            1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "--timing is steady or flushed, not 'warm'"),
            std::string::npos);
}

TEST(TuneCommand, WithoutAGpuFailsWithTheDriversReason) {
  // Runs before anything else loads the driver in this process.
  setenv("BITFOLD_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  TempDir dir;
  std::string out;
  int rc = run({"--shapes", BITFOLD_SOURCE_DIR "/bench/shapes/seed-shapes.json",
                "--out", dir.file("out"), "--templates", "residual_gate"},
               out);
  EXPECT_EQ(rc, 1);
}

} // namespace
