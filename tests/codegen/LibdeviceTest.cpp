//===- tests/codegen/LibdeviceTest.cpp - libdevice linked into kernels ----===//
//
// Kernels calling log/tanh/erf_libdevice get libdevice's bodies inlined
// (no call, no __nv_ symbol, no __nvvm_reflect left), with nvcc's
// non-fast-math settings (no .ftz beyond the MUFU approximations) and pass
// the PTX audit, fmas counted; kernels without them are not touched. The
// embedded bitcode is libdevice and its hash is the cache key's.
//
//===----------------------------------------------------------------------===//

#include "codegen/Assemble.h"
#include "codegen/Codegen.h"
#include "codegen/LinkLibdevice.h"
#include "codegen/PtxAudit.h"
#include "keys/CacheKey.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::dsl;

namespace {

std::shared_ptr<const KernelDef> oneOp(const char *name,
                                        Expr (*f)(const Expr &)) {
  RowProgram p(name);
  Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
  p.output("y", DType::F32, Layout::RowMajor, f(x));
  llvm::Expected<std::shared_ptr<const KernelDef>> def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

ShapeSpec shape256() {
  ShapeSpec s;
  s.cols = 256;
  s.alignBytes = {16, 16};
  s.maxElementOffset = 256 * 64;
  return s;
}

struct Case {
  const char *name;
  Expr (*f)(const Expr &);
  bool ex2, rcp; ///< MUFU instructions libdevice's body uses.
};

const Case kCases[] = {
    {"log", log_libdevice, false, false},
    {"tanh", tanh_libdevice, true, true},
    {"erf", erf_libdevice, true, false},
    {"gelu_erf", gelu_erf, true, false},
    {"gelu_tanh", gelu_tanh, true, true},
};

TEST(Libdevice, OpsAreInlinedWithNvccSettingsAndPassTheAudit) {
  for (const Case &c : kCases) {
    std::shared_ptr<const KernelDef> def = oneOp(c.name, c.f);
    ASSERT_TRUE(def);
    ShapeSpec shape = shape256();
    TileConfig config = defaultConfig(*def, shape);
    CompileOptions opts;
    opts.emitCubin = !findPtxas().empty();
    opts.cubinTool = "ptxas";
    llvm::Expected<CompiledKernel> k = compile(*def, shape, config, opts);
    ASSERT_TRUE(bool(k)) << c.name << ": " << llvm::toString(k.takeError());
    std::string at = std::string(c.name) + " shape " + shape.str() +
                     " config " + config.str();
    if (llvm::Error e = auditPtx(*k, allowancesOf(*def)))
      ADD_FAILURE() << at << ": " << llvm::toString(std::move(e));
    llvm::StringRef ptx = k->ptx;
    for (const char *absent : {"call", "__nv_", "__nvvm_reflect", "fma.rn.ftz"})
      EXPECT_FALSE(ptx.contains(absent)) << at << ": PTX has " << absent;
    EXPECT_EQ(ptx.contains("ex2.approx.ftz.f32"), c.ex2) << at;
    EXPECT_EQ(ptx.contains("rcp.approx.ftz.f32"), c.rcp) << at;
    EXPECT_GT(k->ir.fmaWritten, 0) << at << ": libdevice's fmas not counted";
  }
}

TEST(Libdevice, KernelsWithoutLibdeviceOpsAreNotLinked) {
  std::shared_ptr<const KernelDef> def =
      oneOp("plain", [](const Expr &x) { return exp_libdevice(x) * x; });
  ASSERT_TRUE(def);
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("bitfold-ld", dir));
  CompileOptions opts;
  opts.emitCubin = false;
  opts.dumpDir = dir.str().str();
  ShapeSpec shape = shape256();
  llvm::Expected<CompiledKernel> k =
      compile(*def, shape, defaultConfig(*def, shape), opts);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  std::error_code ec;
  bool found = false;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    if (!llvm::StringRef(it->path()).ends_with("llvm-before-opt.ll"))
      continue;
    found = true;
    auto buf = llvm::MemoryBuffer::getFile(it->path());
    ASSERT_TRUE(bool(buf));
    EXPECT_FALSE((*buf)->getBuffer().contains("nvvm-reflect"))
        << it->path() << ": libdevice settings in a kernel that calls none";
  }
  EXPECT_TRUE(found) << "no llvm-before-opt.ll dump in " << dir.str().str();
  llvm::sys::fs::remove_directories(dir);
}

TEST(Libdevice, EmbeddedBitcodeIsTheOneInTheCacheKey) {
  llvm::StringRef bc = embeddedLibdevice();
  ASSERT_GT(bc.size(), 4u);
  EXPECT_EQ(bc.take_front(4), llvm::StringRef("BC\xC0\xDE", 4))
      << "not LLVM bitcode";
  std::string hash = llvm::toHex(
      llvm::SHA256::hash(llvm::arrayRefFromStringRef(bc)), /*LowerCase=*/true);
  EXPECT_EQ(keys::libdeviceIdentity(), "sha256:" + hash);
  std::shared_ptr<const KernelDef> def = oneOp("key", tanh_libdevice);
  ASSERT_TRUE(def);
  keys::CacheKey key = keys::makeCacheKey(*def, shape256(), TileConfig{},
                                          CompileOptions{}, "toolchain");
  EXPECT_NE(key.text().find("libdevice: sha256:" + hash + "\n"),
            std::string::npos)
      << key.text();
}

} // namespace
