//===- tests/tools/HelpTest.cpp - --help and --version of the binary ------===//
//
// Runs the built `bitfold` (help and version print and exit the process,
// so they are checked from outside it).
//
//===----------------------------------------------------------------------===//

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

#include <gtest/gtest.h>

namespace {

struct Result {
  int status = -1;
  std::string out;
};

Result bitfold(std::vector<llvm::StringRef> args) {
  args.insert(args.begin(), BITFOLD_BINARY);
  llvm::SmallString<128> outFile;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("bitfold-help", "txt",
                                                  outFile));
  std::optional<llvm::StringRef> redirects[] = {std::nullopt,
                                                llvm::StringRef(outFile),
                                                llvm::StringRef(outFile)};
  Result r;
  r.status = llvm::sys::ExecuteAndWait(BITFOLD_BINARY, args, std::nullopt,
                                       redirects, 60);
  if (auto buf = llvm::MemoryBuffer::getFile(outFile))
    r.out = (*buf)->getBuffer().str();
  llvm::sys::fs::remove(outFile);
  return r;
}

TEST(Help, TopLevelListsEveryCommandAndOnlyBitfoldsOptions) {
  Result r = bitfold({"--help"});
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char *cmd : {"version", "templates", "interp", "compile", "run",
                          "cache", "tune"})
    EXPECT_NE(r.out.find(std::string("  ") + cmd + " "), std::string::npos)
        << cmd << "\n"
        << r.out;
  // LLVM's own options (the NVPTX backend's, the pass manager's) stay out.
  EXPECT_EQ(r.out.find("--print-after"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("nvptx"), std::string::npos) << r.out;
}

TEST(Help, EverySubcommandHasADescriptionAndAnExample) {
  for (llvm::StringRef cmd : {"version", "templates", "interp", "compile",
                              "run", "cache", "tune"}) {
    Result r = bitfold({cmd, "--help"});
    EXPECT_EQ(r.status, 0) << cmd.str() << "\n" << r.out;
    EXPECT_NE(r.out.find("example: bitfold " + cmd.str()), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("--print-after"), std::string::npos) << r.out;
  }
}

TEST(Help, VersionFlagPrintsTheVersion) {
  Result r = bitfold({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("bitfold ", 0), 0u) << r.out;
}

TEST(Help, UnknownOptionExitsWithTheUsageCode) {
  EXPECT_EQ(bitfold({"templates", "--bogus"}).status, 2);
  EXPECT_EQ(bitfold({"templates", "--print-after-all"}).status, 2);
}

} // namespace
