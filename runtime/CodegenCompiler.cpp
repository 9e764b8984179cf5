//===- runtime/CodegenCompiler.cpp - The runtime's view of codegen --------===//
//
// The only file of the runtime that calls into codegen; everything else
// goes through runtime::Compiler, so tests can inject a fake one.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"

#include "cuda/Driver.h"

#include "codegen/Assemble.h"

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;

namespace {

/// Lets codegen assemble PTX with the driver's linker (its "driver" tool),
/// on the first device. Installed once.
void installDriverLinker() {
  static bool done = [] {
    codegen::setDriverLinker([](llvm::StringRef ptx, llvm::StringRef arch,
                                std::string &log)
                                 -> llvm::Expected<std::vector<char>> {
      return linkPtxWithDriver(ptx, arch, /*ordinal=*/0, &log);
    });
    return true;
  }();
  (void)done;
}

} // namespace

Compiler bitfold::runtime::defaultCompiler() {
  installDriverLinker();
  Compiler c;
  c.compile = [](const dsl::KernelDef &def, const spec::ShapeSpec &shape,
                 const spec::TileConfig &config,
                 const spec::CompileOptions &options) {
    return codegen::compile(def, shape, config, options);
  };
  c.defaultConfig = [](const dsl::KernelDef &def,
                       const spec::ShapeSpec &shape) {
    return codegen::defaultConfig(def, shape);
  };
  c.checkConfig = [](const dsl::KernelDef &def, const spec::ShapeSpec &shape,
                     const spec::TileConfig &config) {
    return codegen::checkConfig(def, shape, config);
  };
  c.toolchainVersion = [] { return codegen::toolchainVersion(); };
  c.toolchainFingerprint = [] { return codegen::toolchainFingerprint(); };
  return c;
}
