//===- tests/codegen/GoldenTest.cpp - Lowering snippets via FileCheck -----===//

#include "codegen/Codegen.h"
#include "tools/ShapedTemplate.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::tools;

namespace {

std::string findDump(llvm::StringRef dir, llvm::StringRef suffix) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(suffix))
      return it->path();
  return "";
}

/// FileCheck `input` against tests/codegen/golden/`checkFile`.
void fileCheck(llvm::StringRef input, llvm::StringRef checkFile) {
  std::string check = std::string(BITFOLD_GOLDEN_DIR) + "/" + checkFile.str();
  llvm::StringRef args[] = {BITFOLD_FILECHECK, check, "--input-file", input};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(BITFOLD_FILECHECK, args, std::nullopt, {},
                                     0, 0, &err);
  EXPECT_EQ(rc, 0) << "FileCheck " << check << " on " << input.str() << " " << err;
}

llvm::SmallString<128> compileWithDumps(const TemplateRequest &r,
                                        const TileConfig &c) {
  llvm::Expected<ShapedTemplate> st = shapeTemplate(r);
  EXPECT_TRUE(bool(st));
  if (!st) {
    llvm::consumeError(st.takeError());
    return {};
  }
  llvm::SmallString<128> dir;
  llvm::sys::fs::createUniqueDirectory("bitfold-golden", dir);
  CompileOptions opts;
  opts.dumpDir = std::string(dir);
  opts.emitCubin = false;
  llvm::Expected<CompiledKernel> k = compile(*st->def, st->shape, c, opts);
  EXPECT_TRUE(bool(k)) << (k ? "" : llvm::toString(k.takeError()));
  if (!k)
    return {};
  return dir;
}

TEST(Golden, ResidualGateLowersToVectorAccessesAndRnOps) {
  TemplateRequest r;
  r.name = "residual_gate";
  r.tensorShape = {1, 8, 64};
  llvm::SmallString<128> dir = compileWithDumps(r, {8, 8, 8, false});
  ASSERT_FALSE(dir.empty());
  fileCheck(findDump(dir, "mlir-built.mlir"), "residual_gate.mlir.check");
  fileCheck(findDump(dir, "kernel.ptx"), "residual_gate.ptx.check");
  llvm::sys::fs::remove_directories(dir);
}

TEST(Golden, LnModulateFoldUsesShufflesAndSharedMemory) {
  TemplateRequest r;
  r.name = "ln_modulate";
  r.tensorShape = {1, 4096, 4096};
  llvm::SmallString<128> dir = compileWithDumps(r, {2, 64, 8, false});
  ASSERT_FALSE(dir.empty());
  fileCheck(findDump(dir, "kernel.ptx"), "ln_modulate.ptx.check");
  llvm::sys::fs::remove_directories(dir);
}

} // namespace
