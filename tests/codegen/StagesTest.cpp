//===- tests/codegen/StagesTest.cpp - The driver's checks and dumps --------===//
//
// Bad targets and dump folders are errors (never an LLVM fatal error or a
// silent no-op); the MLIR-free stages dump what they found; MLIR dumps map
// every op back to a DSL node and the PTX carries no debug lines.
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "tools/ShapedTemplate.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::tools;

namespace {

ShapedTemplate lnModulate() {
  TemplateRequest r;
  r.name = "ln_modulate";
  r.tensorShape = {1, 256, 4096};
  llvm::Expected<ShapedTemplate> st = shapeTemplate(r);
  EXPECT_TRUE(bool(st));
  return std::move(*st);
}

const TileConfig kConfig{2, 64, 8, false};

std::string errorOf(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : std::string();
}

struct TempDir {
  llvm::SmallString<128> path;
  TempDir() { llvm::sys::fs::createUniqueDirectory("bitfold-stages", path); }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
};

std::string readDump(llvm::StringRef dir, llvm::StringRef suffix) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(suffix)) {
      auto buf = llvm::MemoryBuffer::getFile(it->path());
      return buf ? (*buf)->getBuffer().str() : std::string();
    }
  return "";
}

TEST(Stages, UnsupportedArchsAreErrorsNamingTheArchAndTheMinimum) {
  for (const char *arch : {"sm_60", "sm_52", "sm_75", "sm_70", "sm_XX", "sm_0",
                           "x86_64", "", "sm_", "sm_90x", "sm_999", "compute_90"}) {
    std::string e = errorOf(checkTargetArch(arch));
    EXPECT_NE(e.find(std::string("'") + arch + "'"), std::string::npos)
        << "arch '" << arch << "': " << e;
    EXPECT_NE(e.find("sm_80 or later"), std::string::npos)
        << "arch '" << arch << "': " << e;
  }
}

TEST(Stages, SupportedArchsPass) {
  for (const char *arch : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a",
                           "sm_100", "sm_100a", "sm_120"})
    EXPECT_EQ(errorOf(checkTargetArch(arch)), "") << arch;
}

TEST(Stages, CompileForAnOldArchFailsCleanly) {
  ShapedTemplate st = lnModulate();
  for (const char *arch : {"sm_60", "x86_64", ""}) {
    CompileOptions opts;
    opts.arch = arch;
    opts.emitCubin = false;
    llvm::Expected<CompiledKernel> k =
        compile(*st.def, st.shape, kConfig, opts);
    ASSERT_FALSE(bool(k)) << "arch '" << arch << "' compiled";
    EXPECT_NE(llvm::toString(k.takeError()).find("sm_80"), std::string::npos);
  }
}

TEST(Stages, UnusableDumpDirsAreErrors) {
  ShapedTemplate st = lnModulate();
  TempDir tmp;
  llvm::SmallString<128> file(tmp.path);
  llvm::sys::path::append(file, "a-file");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    ASSERT_FALSE(ec);
    os << "x";
  }
  llvm::SmallString<128> below(file);
  llvm::sys::path::append(below, "sub");
  for (std::string dir : {std::string(), std::string(file), std::string(below)}) {
    CompileOptions opts;
    opts.emitCubin = false;
    opts.dumpDir = dir;
    llvm::Expected<CompiledKernel> k =
        compile(*st.def, st.shape, kConfig, opts);
    ASSERT_FALSE(bool(k)) << "dump dir '" << dir << "' accepted";
    EXPECT_NE(llvm::toString(k.takeError()).find("--dump-dir"),
              std::string::npos);
  }
}

TEST(Stages, DumpsMapOpsToDslNodesAndPtxHasNoDebugLines) {
  ShapedTemplate st = lnModulate();
  TempDir tmp;
  CompileOptions opts;
  opts.emitCubin = false;
  opts.dumpDir = std::string(tmp.path);
  llvm::Expected<CompiledKernel> k = compile(*st.def, st.shape, kConfig, opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  std::string mlir = readDump(tmp.path, "mlir-built.mlir");
  // A body node inside the output phase, and a combiner node in fold 0.
  EXPECT_NE(mlir.find("loc(\"%"), std::string::npos) << mlir.substr(0, 2000);
  EXPECT_NE(mlir.find("(\"outputs\")"), std::string::npos);
  EXPECT_NE(mlir.find(".push.%"), std::string::npos);
  EXPECT_NE(mlir.find("(\"fold 0\")"), std::string::npos);
  EXPECT_EQ(k->ptx.find(".loc"), std::string::npos);
  EXPECT_EQ(k->ptx.find(".file"), std::string::npos);
  // The MLIR-free stages: Welford's count is a known constant after the
  // pushes; the modulate chain's bf16 ops are narrow rewrites on sm_90.
  EXPECT_NE(readDump(tmp.path, "fold-knowledge.txt").find("L0.f0=0x"),
            std::string::npos);
  EXPECT_NE(readDump(tmp.path, "rewrites.txt").find(" in bf16"),
            std::string::npos);
}

} // namespace
