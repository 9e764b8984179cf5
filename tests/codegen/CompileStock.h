//===- tests/codegen/CompileStock.h - A stock kernel's PTX, for tests -----===//
//
// Shared by the tests of the exact rewrites (ExactDivisionTest.cpp,
// FastSiluTest.cpp): a stock kernel's PTX at a shape, first legal config,
// and how often a string occurs in it.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_CODEGEN_COMPILESTOCK_H
#define BITFOLD_TESTS_CODEGEN_COMPILESTOCK_H

#include "codegen/Codegen.h"
#include "codegen/Plan.h"
#include "templates/Problem.h"
#include "tools/ShapedTemplate.h"

namespace bitfold::testing {

inline llvm::Expected<codegen::CompiledKernel>
compileStock(const char *name, const char *params, const char *shape,
             const char *arch = "sm_90") {
  llvm::Expected<templates::Problem> p =
      templates::makeProblem(name, params, shape);
  if (!p)
    return p.takeError();
  tools::ShapedTemplate st = tools::shapeProblem(*p);
  std::vector<keys::TileConfig> configs =
      codegen::enumerateConfigs(*st.def, st.shape);
  keys::CompileOptions opts;
  opts.emitCubin = false;
  opts.arch = arch;
  return codegen::compile(*st.def, st.shape, configs.front(), opts);
}

inline size_t countOf(llvm::StringRef text, llvm::StringRef what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != llvm::StringRef::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_CODEGEN_COMPILESTOCK_H
