//===- keys/CacheKey.cpp - Everything that determines a cubin -------------===//

#include "keys/CacheKey.h"

#include "bitfold/CodegenRevision.h"
#include "bitfold/Config.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace bitfold;
using namespace bitfold::keys;

std::string CacheKey::text() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "bitfold kernel cache key, format " << kCacheKeyFormat << "\n"
     << "kernel: " << kernelName << "\n"
     << "kernel-hash: " << kernelHash << "\n"
     << "shape: " << shape << "\n"
     << "config: " << config << "\n"
     << "arch: " << arch << "\n"
     << "options: " << options << "\n"
     << "bitfold: " << bitfoldVersion << "\n"
     << "codegen: " << codegenRevision << "\n"
     << "llvm: " << llvmVersion << "\n"
     << "toolchain: " << toolchain << "\n"
     << "libdevice: " << libdevice << "\n";
  llvm::SmallVector<llvm::StringRef, 8> lines;
  llvm::StringRef(environment).split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef l : lines)
    os << "env: " << l << "\n";
  return s;
}

std::string CacheKey::hash() const {
  std::string t = text();
  auto digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(t));
  return llvm::toHex(digest, /*LowerCase=*/true);
}

CacheKey keys::makeCacheKey(const dsl::KernelDef &def, const ShapeSpec &shape,
                            const TileConfig &config,
                            const CompileOptions &options,
                            llvm::StringRef toolchain) {
  CacheKey ck;
  ck.kernelName = def.name;
  ck.kernelHash = def.hash;
  ck.shape = shape.str();
  ck.config = config.str();
  ck.arch = options.arch;
  ck.options = options.keyText();
  ck.bitfoldVersion = BITFOLD_VERSION;
  ck.codegenRevision = codegenRevision().str();
  ck.llvmVersion = BITFOLD_LLVM_VERSION;
  ck.toolchain = toolchain.str();
  ck.libdevice = libdeviceIdentity().str();
  ck.environment = codegenEnvironment();
  return ck;
}

llvm::StringRef keys::codegenRevision() { return BITFOLD_CODEGEN_REVISION; }

llvm::StringRef keys::libdeviceIdentity() {
  return "sha256:" BITFOLD_LIBDEVICE_SHA256;
}

CompileOptions keys::launchOptions(llvm::StringRef arch, bool pdl,
                                   bool fastCompile) {
  CompileOptions options;
  options.arch = arch.str();
  options.gridDependencyControl = pdl;
  if (fastCompile) {
    options.assemblerOptLevel = 0;
    options.rollRows = true;
  }
  return options;
}

LaunchCompile keys::launchCompile(const dsl::KernelDef &def,
                                  const ShapeClass &cls,
                                  const TileConfig &config,
                                  llvm::StringRef arch, bool pdl,
                                  llvm::StringRef toolchain) {
  LaunchCompile lc;
  lc.shape = cls.shapeSpec();
  lc.options = launchOptions(arch, pdl);
  lc.key = makeCacheKey(def, lc.shape, config, lc.options, toolchain);
  return lc;
}

llvm::ArrayRef<const char *> keys::codegenEnvVars() {
  static const char *vars[] = {
      "BITFOLD_CUBIN_TOOL", // the PTX -> cubin tool (codegen/Assemble.cpp)
      "BITFOLD_PTXAS",      // which ptxas binary (codegen/Assemble.cpp)
      "BITFOLD_ROW_DIVISION", // the per-row reciprocal (codegen/ExactRewrites.h)
      "BITFOLD_FAST_SILU",    // the SiLU fast path (codegen/ExactRewrites.h)
      "BITFOLD_ROLLED_ROWS",  // rolled two-pass rows (codegen/Plan.h)
      "BITFOLD_FALLBACK_LOOPS", // exact fallbacks as loops (ExactRewrites.h)
      "BITFOLD_ROUNDED_DIVISION", // row division to bf16 (ExactRewrites.h)
      "BITFOLD_ROW_BOUND", // a row division's range from d (ExactRewrites.h)
      "BITFOLD_SM90_SILU", // bf16 SiLU on sm_90's models (ExactRewrites.h)
  };
  return vars;
}

std::string keys::codegenEnvironment() {
  std::string out;
  for (const char *name : codegenEnvVars())
    if (const char *value = std::getenv(name))
      out += std::string(name) + "=" + value + "\n";
  return out;
}
