//===- runtime/CodegenCompiler.cpp - The runtime's view of codegen --------===//
//
// The only file of the runtime that calls into codegen; everything else
// goes through runtime::Compiler, so tests can inject a fake one.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"

#include "cuda/Driver.h"

#include "codegen/Assemble.h"
#include "keys/CacheKey.h"
#include "templates/Problem.h"

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;

namespace {

/// Lets codegen assemble PTX with the driver's linker (its "driver" tool),
/// on the first device. Installed once.
void installDriverLinker() {
  static bool done = [] {
    codegen::setDriverLinker([](llvm::StringRef ptx, llvm::StringRef arch,
                                int optLevel, std::string &log)
                                 -> llvm::Expected<std::vector<char>> {
      // The driver's levels run 0-4, its default 4: ptxas's 3 is its top.
      return linkPtxWithDriver(ptx, arch, /*ordinal=*/0, &log,
                               optLevel == 3 ? 4 : optLevel);
    });
    return true;
  }();
  (void)done;
}

/// One small compile through the whole pipeline (LLVM's NVPTX target, the
/// MLIR passes, and with a GPU the cubin tool's load and first link), so
/// that the first real compile of the process pays none of it. Errors are
/// dropped: a real compile reports them.
void warmUpCodegen() {
  auto p = templates::makeProblem("residual_gate", "", "1,1,256");
  if (!p) {
    llvm::consumeError(p.takeError());
    return;
  }
  keys::ShapeSpec shape =
      keys::denseShapeClass(*p->def, p->shape.cols, p->shape.groupRows,
                            p->shape.rowsPerBatch, /*bucketRows=*/false)
          .shapeSpec();
  auto arch = deviceArch(/*ordinal=*/0);
  keys::CompileOptions options =
      keys::launchOptions(arch ? llvm::StringRef(*arch) : "sm_90", false);
  if (!arch) {
    llvm::consumeError(arch.takeError());
    options.emitCubin = false;
  }
  auto k = codegen::compile(*p->def, shape,
                            codegen::defaultConfig(*p->def, shape), options);
  if (!k)
    llvm::consumeError(k.takeError());
}

} // namespace

Compiler bitfold::runtime::defaultCompiler() {
  installDriverLinker();
  Compiler c;
  c.compile = [](const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                 const keys::TileConfig &config,
                 const keys::CompileOptions &options) {
    return codegen::compile(def, shape, config, options);
  };
  c.defaultConfig = [](const dsl::KernelDef &def,
                       const keys::ShapeSpec &shape) {
    return codegen::defaultConfig(def, shape);
  };
  c.checkConfig = [](const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                     const keys::TileConfig &config) {
    return codegen::checkConfig(def, shape, config);
  };
  c.quickConfig = [](const dsl::KernelDef &def, const keys::ShapeSpec &shape) {
    return codegen::quickConfig(def, shape);
  };
  c.toolchainVersion = [] { return codegen::toolchainVersion(); };
  c.toolchainFingerprint = [] { return codegen::toolchainFingerprint(); };
  c.warmUp = warmUpCodegen;
  return c;
}
