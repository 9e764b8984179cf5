//===- tests/runtime/FakeCodegen.cpp - A compiler without codegen ---------===//

#include "FakeCodegen.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::runtime;

std::atomic<int> bitfold::runtime::fake::fakeCompiles{0};

namespace {

std::string configText(const codegen::TileConfig &c) {
  return llvm::formatv("r{0}.t{1}.v{2}.p{3}", c.rowsPerCta, c.threadsPerRow,
                       c.vectorElems, c.twoPass ? 2 : 1);
}

} // namespace

Compiler bitfold::runtime::fake::fakeCompiler() {
  Compiler c;
  c.compile = [](const dsl::KernelDef &def, const codegen::ShapeSpec &shape,
                 const codegen::TileConfig &config,
                 const codegen::CompileOptions &options)
      -> llvm::Expected<codegen::CompiledKernel> {
    ++fakeCompiles;
    codegen::CompiledKernel k;
    k.entryName = "fake_" + def.name;
    k.ptx = "// fake PTX for " + def.name + " " + options.arch + "\n";
    std::string body = "FAKE-CUBIN " + def.name + " " + configText(config);
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
  c.defaultConfig = [](const dsl::KernelDef &, const codegen::ShapeSpec &) {
    codegen::TileConfig t;
    t.rowsPerCta = 2;
    t.threadsPerRow = 64;
    t.vectorElems = 4;
    return t;
  };
  c.checkConfig = [](const dsl::KernelDef &, const codegen::ShapeSpec &,
                     const codegen::TileConfig &t) -> llvm::Error {
    if (t.threadsPerRow > 1024)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "too many threads");
    return llvm::Error::success();
  };
  c.parseConfig = [](llvm::StringRef text) -> llvm::Expected<codegen::TileConfig> {
    codegen::TileConfig t;
    int pass = 1;
    if (std::sscanf(text.str().c_str(), "r%d.t%d.v%d.p%d", &t.rowsPerCta,
                    &t.threadsPerRow, &t.vectorElems, &pass) != 4 ||
        t.rowsPerCta <= 0 || t.threadsPerRow <= 0 || t.vectorElems <= 0 ||
        (pass != 1 && pass != 2)) // as codegen's parser: positive fields
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "expected r<R>.t<T>.v<V>.p<P>");
    t.twoPass = pass == 2;
    return t;
  };
  c.configText = configText;
  c.shapeText = [](const codegen::ShapeSpec &s) {
    std::string a;
    for (int x : s.alignBytes)
      a += (a.empty() ? "" : ",") + std::to_string(x);
    return llvm::formatv("c{0}.a{1}.o{2}", s.cols, a, s.maxElementOffset).str();
  };
  c.toolchainVersion = [] { return std::string("fake-toolchain"); };
  return c;
}

Compiler bitfold::runtime::defaultCompiler() { return fake::fakeCompiler(); }
