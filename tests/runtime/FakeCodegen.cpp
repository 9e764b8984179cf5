//===- tests/runtime/FakeCodegen.cpp - A compiler without codegen ---------===//

#include "FakeCodegen.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::runtime;

std::atomic<int> bitfold::runtime::fake::fakeCompiles{0};

Compiler bitfold::runtime::fake::fakeCompiler() {
  Compiler c;
  c.compile = [](const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                 const keys::TileConfig &config,
                 const keys::CompileOptions &options)
      -> llvm::Expected<codegen::CompiledKernel> {
    ++fakeCompiles;
    codegen::CompiledKernel k;
    k.entryName = "fake_" + def.name;
    k.ptx = "// fake PTX for " + def.name + " " + options.arch + "\n";
    std::string body = "FAKE-CUBIN " + def.name + " " + config.str();
    k.cubin.assign(body.begin(), body.end());
    k.cubin.push_back(0); // the fake driver reads it as text
    k.cubinTool = "fake";
    k.gridDependencyWait = options.gridDependencyControl;
    k.config = config;
    k.abi.numGroups = def.groups;
    k.abi.numOperands = int(def.operands.size());
    k.abi.numDims = int(def.dims.size());
    k.abi.numScalars = int(def.scalars.size());
    return k;
  };
  c.defaultConfig = [](const dsl::KernelDef &, const keys::ShapeSpec &) {
    keys::TileConfig t;
    t.rowsPerCta = 2;
    t.threadsPerRow = 64;
    t.vectorElems = 4;
    return t;
  };
  c.checkConfig = [](const dsl::KernelDef &, const keys::ShapeSpec &,
                     const keys::TileConfig &t) -> llvm::Error {
    if (t.threadsPerRow > 1024)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "too many threads");
    return llvm::Error::success();
  };
  // Quick-first mode: rows of 4096 columns and more have a quicker config.
  c.quickConfig = [def = c.defaultConfig](const dsl::KernelDef &d,
                                          const keys::ShapeSpec &shape) {
    keys::TileConfig t = def(d, shape);
    if (shape.cols >= 4096) {
      t.rowsPerCta = 1;
      t.threadsPerRow = 32;
    }
    return t;
  };
  c.toolchainVersion = [] { return std::string("fake-toolchain"); };
  return c;
}

Compiler bitfold::runtime::defaultCompiler() { return fake::fakeCompiler(); }
