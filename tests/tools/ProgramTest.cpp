//===- tests/tools/ProgramTest.cpp - --program FILE in every command ------===//
//
// A kernel text file stands in for a kernel name in interp, compile, run
// (on the fake libcuda, which runs nothing: "results differ") and tune's
// shapes file; the example programs of examples/user_kernels/ interpret.
// A bad file is an error naming FILE:line:column.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "autotune/TuneTasks.h"
#include "dsl/Parser.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::tools::test;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

const std::string kScale = scaleProgram("cli_user_scale");

TEST(Program, InterpCompileAndRunTakeAProgramFile) {
  ASSERT_TRUE(fakeDriver);
  TempDir dir;
  std::string file = dir.write("scale.bfk", kScale);
  std::vector<std::vector<std::string>> ok = {
      {"interp", "--program", file, "--shape", "2,64"},
      {"compile", "--program", file, "--shape", "2,64", "--ptx-only"}};
  for (const auto &args : ok) {
    Output o = cli(args);
    EXPECT_EQ(o.status, 0) << joined(args) << "\n" << o.out << o.err;
  }
  std::vector<std::string> run = {"run",   "--program", file, "--shape",
                                  "2,64", "--iters",   "0"};
  Output o = cli(run);
  EXPECT_EQ(o.status, 3) << joined(run) << "\n" << o.out << o.err;
  EXPECT_NE(o.out.find("compare y: 128 elements, 128 differ"),
            std::string::npos)
      << joined(run) << "\n" << o.out;
  // Registered: the name reaches it now.
  Output byName = cli({"interp", "cli_user_scale", "--shape", "2,64"});
  EXPECT_EQ(byName.status, 0) << byName.err;
}

TEST(Program, TheExampleProgramsInterpret) {
  for (const char *name : {"add_rmsnorm", "bias_gelu_tanh", "softmax"}) {
    std::string file = std::string(BITFOLD_SOURCE_DIR) +
                       "/examples/user_kernels/" + name + ".bfk";
    std::vector<std::string> args = {"interp", "--program", file, "--shape",
                                     "4,256"};
    Output o = cli(args);
    EXPECT_EQ(o.status, 0) << joined(args) << "\n" << o.out << o.err;
  }
}

TEST(Program, TheExampleProgramsRoundTripWithTheSameHash) {
  for (const char *name : {"add_rmsnorm", "bias_gelu_tanh", "softmax"}) {
    std::string file = std::string(BITFOLD_SOURCE_DIR) +
                       "/examples/user_kernels/" + name + ".bfk";
    auto buf = llvm::MemoryBuffer::getFile(file);
    ASSERT_TRUE(bool(buf)) << file;
    auto def = dsl::parseKernel((*buf)->getBuffer(), file);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    auto again = dsl::parseKernel((*def)->canonicalText, file);
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_EQ((*again)->canonicalText, (*def)->canonicalText) << file;
    EXPECT_EQ((*again)->hash, (*def)->hash) << file;
    EXPECT_EQ(dsl::printCanonical(**again), (*def)->canonicalText) << file;
  }
}

TEST(Program, AMalformedFileNamesFileLineAndColumn) {
  TempDir dir;
  std::string text = kScale;
  text.replace(text.find("groups 1"), 8, "groups x");
  std::string file = dir.write("bad.bfk", text);
  std::vector<std::string> args = {"interp", "--program", file, "--shape",
                                   "2,64"};
  Output o = cli(args);
  EXPECT_EQ(o.status, 1) << joined(args) << "\n" << o.err;
  EXPECT_NE(o.err.find(file + ":2:8: expected"), std::string::npos) << o.err;
  Output missing = cli({"interp", "--program", file + ".nope", "--shape", "2"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("cannot read program file"), std::string::npos)
      << missing.err;
}

TEST(Program, TuneRegistersItsProgramsBeforeReadingTheShapesFile) {
  TempDir dir;
  std::string text = kScale;
  text.replace(text.find("groups 1"), 8, "groups x");
  std::string bad = dir.write("bad.bfk", text);
  std::vector<std::string> args = {"tune", "--program", bad, "--shapes",
                                   dir.write("s.json", "[]"), "--out",
                                   dir.path.str().str() + "/out"};
  Output o = cli(args);
  EXPECT_EQ(o.status, 1) << joined(args) << "\n" << o.err;
  EXPECT_NE(o.err.find(bad + ":2:8: expected"), std::string::npos) << o.err;
}

TEST(Program, ANameAndAProgramTogetherIsAUsageError) {
  TempDir dir;
  std::string file = dir.write("scale.bfk", kScale);
  Output o =
      cli({"interp", "ln_modulate", "--program", file, "--shape", "1,8,64"});
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("not both"), std::string::npos) << o.err;
}

TEST(Program, AShapesFileEntryMayNameAProgramFile) {
  TempDir dir;
  std::string text = kScale;
  text.replace(text.find("cli_user_scale"), 14, "tune_user_scale");
  dir.write("prog.bfk", text);
  std::string shapes = dir.write(
      "shapes.json", R"([{"program": "prog.bfk", "shape": "4,256"},
 {"template": "ln_modulate", "shape": "1,8,64"}])");
  auto requests = autotune::loadShapesFile(shapes);
  ASSERT_TRUE(bool(requests)) << llvm::toString(requests.takeError());
  ASSERT_EQ(requests->size(), 2u);
  EXPECT_EQ((*requests)[0].templateName, "tune_user_scale");
  EXPECT_EQ((*requests)[0].program, "prog.bfk");
  std::string again = autotune::shapesFileText(*requests);
  EXPECT_NE(again.find("\"program\":\"prog.bfk\""), std::string::npos)
      << again;
  EXPECT_EQ(again.find("tune_user_scale"), std::string::npos) << again;
}

} // namespace
