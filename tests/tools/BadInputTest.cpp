//===- tests/tools/BadInputTest.cpp - Command-line misuse exits 2 ---------===//
//
// Every misuse of the command line exits with the usage code (2) and one
// line saying what was expected; none crashes, wraps silently or runs with
// a value it did not ask for. No GPU: the driver is a missing library.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "autotune/TuneDB.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

using namespace bitfold::tools::test;

namespace {

const bool noDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", "/nonexistent/bitfold-test/libcuda.so.1", 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

/// Runs `args`; expects exit 2 and one stderr line containing `expected`.
void expectUsage(const std::vector<std::string> &args,
                 const std::string &expected) {
  ASSERT_TRUE(noDriver);
  // cl reports a malformed value on the process's stderr itself.
  testing::internal::CaptureStderr();
  Output o = cli(args);
  o.err += testing::internal::GetCapturedStderr();
  EXPECT_EQ(o.status, 2) << joined(args) << "\nstderr: " << o.err;
  EXPECT_NE(o.err.find(expected), std::string::npos)
      << joined(args) << "\nstderr: " << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1)
      << joined(args) << "\nstderr: " << o.err;
}

TEST(BadInput, SeedMustBeAnUnsigned64BitInteger) {
  for (const char *seed : {"abc", "1180591620717411303424", "-1", ""})
    expectUsage({"interp", "ln_modulate", "--shape", "1,8,64", "--seed", seed},
                "--seed");
}

TEST(BadInput, UnknownOptionsAndCommandsAreRejected) {
  expectUsage({"templates", "--bogus"}, "'--bogus'");
  expectUsage({"interp", "ln_modulate", "--shape", "1,8,64", "--residual"},
              "'--residual'");
  expectUsage({"frobnicate"}, "unknown command 'frobnicate'");
  expectUsage({}, "expected a command");
  expectUsage({"interp", "ln_modulate", "extra", "--shape", "1,8,64"},
              "Too many positional");
}

TEST(BadInput, MissingKernelOrShapeSaysWhatIsExpected) {
  expectUsage({"interp"}, "expected a kernel name");
  expectUsage({"compile", "ln_modulate"}, "expected --shape DIMS");
  expectUsage({"run", "no_such_kernel", "--shape", "1,8,64"},
              "no template 'no_such_kernel'");
  expectUsage({"interp", "conv_bias", "--shape", "1,8,64"},
              "conv_bias: shape is N,C,H,W or N,C,D,H,W");
  expectUsage({"interp", "ln_modulate", "--shape", "1,x,64"},
              "'x' is not a positive 64-bit integer");
}

TEST(BadInput, RunRejectsAScalarTheKernelDoesNotHave) {
  expectUsage({"run", "ln_modulate", "--shape", "1,8,64", "--scalar",
               "bogus=1"},
              "ln_modulate has no scalar 'bogus' (scalars: eps)");
  expectUsage({"run", "ln_modulate", "--shape", "1,8,64", "--scalar", "eps"},
              "expected NAME=VALUE");
}

TEST(BadInput, ParametersAKernelDoesNotTakeAreRejected) {
  expectUsage({"compile", "ln_modulate", "--shape", "1,8,64", "--params",
               "gate=global"},
              "unknown parameter 'gate' (ln_modulate takes: dtype)");
  expectUsage({"interp", "conv_bias", "--shape", "1,8,4,4", "--params",
               "dtype=f17"},
              "dtype='f17' is not a dtype");
}

TEST(BadInput, ShapesWhoseRowProductOverflowsAreRejected) {
  for (const char *cmd : {"interp", "run", "compile"})
    expectUsage({cmd, "ln_modulate", "--shape", "4294967296,4294967296,128"},
                "overflows 64 bits");
  expectUsage({"interp", "conv_bias", "--shape",
               "1,128,4294967296,4294967296"},
              "overflows 64 bits");
}

TEST(BadInput, HostBuffersAreCappedInsteadOfAborting) {
  for (const char *cmd : {"interp", "run"})
    expectUsage({cmd, "ln_modulate", "--shape", "1,8589934592,128"},
                "the host buffers would exceed 32 GiB");
}

TEST(BadInput, TuneNumbersMustBeFiniteAndInRange) {
  const std::vector<std::string> base = {"tune", "--shapes", "s.json",
                                         "--out", "/tmp/bitfold-never"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expectUsage(with({"--budget-s", "1e308"}), "--budget-s: expected");
  expectUsage(with({"--budget-s", "nan"}), "--budget-s: expected");
  expectUsage(with({"--budget-s", "-5"}), "--budget-s: expected");
  expectUsage(with({"--cut-ratio", "nan"}), "--cut-ratio: expected");
  expectUsage(with({"--cut-ratio", "0.5"}), "--cut-ratio: expected");
  expectUsage(with({"--repetitions", "5"}), "--repetitions: expected");
  expectUsage(with({"--timing", "warm"}), "--timing");
  expectUsage(with({"--shard", "5/5"}), "--shard");
  expectUsage(with({"--devices", "0,x"}), "--devices: bad device 'x'");
  expectUsage({"tune", "--out", "/tmp/x"}, "expected --shapes");
  expectUsage({"tune", "merge", "a.json"}, "expected: tune merge");
}

TEST(BadInput, CompileErrorsGoToStderr) {
  Output o = cli({"compile", "ln_modulate", "--shape", "1,8,64", "--config",
                  "r1.t1024.v8.p1"});
  EXPECT_EQ(o.status, 1) << o.out << o.err;
  EXPECT_EQ(o.out.find("error"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("bitfold compile: error: "), std::string::npos)
      << o.err;
}

TEST(Cli, EqualsAndSpaceSpellingsAreTheSame) {
  Output a = cli({"interp", "ln_modulate", "--shape", "1,4,64", "--seed",
                  "7", "--params", "dtype=f16"});
  Output b = cli({"interp", "ln_modulate", "--shape=1,4,64", "--seed=7",
                  "--params=dtype=half"});
  EXPECT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(b.status, 0) << b.err;
  // Same data and kernel: the same checksum (times differ).
  auto checksum = [](const std::string &s) {
    return s.substr(s.find("checksum"), 26);
  };
  EXPECT_EQ(checksum(a.out), checksum(b.out));
}

TEST(Cli, CompilePrintsStageTimesAndAudit) {
  Output o = cli({"compile", "ln_modulate", "--shape", "1,4096,4096",
                  "--config", "r2.t64.v8.p2", "--ptx-only"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("llvm-opt"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("audit    ok"), std::string::npos) << o.out;
  o = cli({"compile", "conv_bias", "--shape", "1,96,4,480,832",
           "--list-configs"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("r64.t4.v8.p1"), std::string::npos) << o.out;
}

TEST(Cli, RunWithoutAGpuFailsWithTheDriversReason) {
  ASSERT_TRUE(noDriver);
  Output o = cli({"run", "ln_modulate", "--shape", "1,8,64"});
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("bitfold run: error: "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("/nonexistent/bitfold-test/libcuda.so.1"),
            std::string::npos)
      << o.err;
}

TEST(Cli, TuneWithoutAGpuFailsWithoutCrashing) {
  ASSERT_TRUE(noDriver);
  TempDir dir;
  std::ofstream(dir.file("s.json"))
      << R"([{"template": "ln_modulate", "shape": "4294967296,4294967296,128"},
             {"template": "residual_gate", "shape": "1,4096,4096"}])";
  Output o = cli({"tune", "--shapes", dir.file("s.json"), "--out",
                  dir.file("out")});
  EXPECT_EQ(o.status, 1) << o.err;
}

TEST(BadInput, InterpRefusesAShapeOutsideTheProgramsGuard) {
  TempDir dir;
  std::string text = scaleProgram("interp_guarded");
  text.replace(text.find("guard cols % 1 == 0, 1 <= cols <= 16777216"), 42,
               "guard cols % 4 == 0, 4 <= cols <= 64");
  std::string file = dir.write("guarded.bfk", text);
  for (const char *shape : {"2,6", "2,2", "2,128"}) {
    Output o = cli({"interp", "--program", file, "--shape", shape});
    EXPECT_NE(o.status, 0) << shape << ": " << o.out;
    EXPECT_NE(o.err.find("needs cols % 4 == 0 and 4 <= cols <= 64"),
              std::string::npos)
        << shape << ": " << o.err;
  }
  EXPECT_EQ(cli({"interp", "--program", file, "--shape", "2,8"}).status, 0);
}

/// A consistent measurement of r1.t128.v8.p1: 10 us (9.5..11), 20 samples.
bitfold::autotune::Measurement tenMicroseconds() {
  bitfold::autotune::Measurement m;
  m.config = "r1.t128.v8.p1";
  m.medianUs = 10;
  m.spreadUs = 0.5;
  m.minUs = 9.5;
  m.maxUs = 11;
  m.samples = 20;
  return m;
}

TEST(BadInput, TuneMergeWritesNothingThroughForASilentlyBadDB) {
  using namespace bitfold::autotune;
  TempDir dir;
  TuneDB a;
  TuneEnvironment env{"NVIDIA H200", "sm_90", "0.1.0", "22.1.8", "tc"};
  a.record(TuneKey{"k", "h1", "cls", "x:bf16", env}, "r1.t128.v8.p1",
           {tenMicroseconds()});
  std::string good = a.toJsonText();
  struct Bad {
    const char *what, *from, *to;
  } bad[] = {{"median below min", "\"medianUs\": 10.0", "\"medianUs\": 1.0"},
             {"min above max", "\"minUs\": 9.5", "\"minUs\": 12.0"},
             {"unknown config", "\"r1.t128.v8.p1\"", "\"fastest\""},
             {"duplicate key", "\"samples\": 20", "\"samples\": 20, \"samples\": 1"}};
  for (const Bad &b : bad) {
    std::string text = good;
    size_t at = text.find(b.from);
    ASSERT_NE(at, std::string::npos) << b.from << " in " << text;
    text.replace(at, std::strlen(b.from), b.to);
    std::string in = dir.write("in.json", text), out = dir.file("out.json");
    Output o = cli({"tune", "merge", in, "--out", out});
    EXPECT_NE(o.status, 0) << b.what;
    EXPECT_FALSE(llvm::sys::fs::exists(out)) << b.what << ": written through";
  }
}

TEST(Cli, TuneMergeWritesTheOrderIndependentUnion) {
  using namespace bitfold::autotune;
  TempDir dir;
  TuneDB a, b;
  TuneEnvironment env{"NVIDIA H200", "sm_90", "0.1.0", "22.1.8", "tc"};
  TuneKey k1{"k", "h1", "cls", "x:bf16", env}, k2{"k", "h2", "cls", "x:bf16", env};
  Measurement m = tenMicroseconds();
  a.record(k1, "r1.t128.v8.p1", {m});
  b.record(k2, "r1.t128.v8.p1", {m});
  ASSERT_FALSE(bool(a.save(dir.file("a.json"))));
  ASSERT_FALSE(bool(b.save(dir.file("b.json"))));
  EXPECT_EQ(cli({"tune", "merge", dir.file("a.json"), dir.file("b.json"),
                 "--out", dir.file("ab.json")})
                .status,
            0);
  EXPECT_EQ(cli({"tune", "merge", dir.file("b.json"), dir.file("a.json"),
                 "--out=" + dir.file("ba.json")})
                .status,
            0);
  auto ab = TuneDB::load(dir.file("ab.json"));
  auto ba = TuneDB::load(dir.file("ba.json"));
  ASSERT_TRUE(bool(ab) && bool(ba));
  EXPECT_EQ(ab->size(), 2u);
  EXPECT_EQ(ab->toJsonText(), ba->toJsonText());
}

} // namespace
