//===- runtime/CacheKey.cpp - How a launch keys its compiled kernel -------===//

#include "runtime/CacheKey.h"

#include "bitfold/Config.h"

#include "llvm/Support/FormatVariadic.h"

#include <climits>

using namespace bitfold;
using namespace bitfold::runtime;

CacheKey bitfold::runtime::makeCacheKey(const dsl::KernelDef &def,
                                        llvm::StringRef shapeText,
                                        llvm::StringRef configText,
                                        const codegen::CompileOptions &options,
                                        llvm::StringRef toolchain) {
  CacheKey ck;
  ck.kernelName = def.name;
  ck.kernelHash = def.hash;
  ck.shape = shapeText.str();
  ck.config = configText.str();
  ck.arch = options.arch;
  ck.options = llvm::formatv("cubin={0} tool={1}", options.emitCubin ? 1 : 0,
                             options.cubinTool.empty() ? "auto"
                                                       : options.cubinTool);
  // Appended only when set: keys of plain kernels stay as they were.
  if (options.gridDependencyControl)
    ck.options += " pdl=1";
  ck.bitfoldVersion = BITFOLD_VERSION;
  ck.llvmVersion = BITFOLD_LLVM_VERSION;
  ck.toolchain = toolchain.str();
  ck.environment = codegenEnvironment();
  return ck;
}

int64_t bitfold::runtime::maxElementOffsetClass(int64_t maxElementOffset) {
  return maxElementOffset > int64_t(INT32_MAX) ? int64_t(1) << 62
                                               : int64_t(INT32_MAX);
}
