//===- autotune/ShapeClass.cpp - Tune keys --------------------------------===//

#include "autotune/ShapeClass.h"

#include "bitfold/Config.h"

using namespace bitfold;
using namespace bitfold::autotune;

std::string autotune::dtypesText(const dsl::KernelDef &def) {
  std::string s;
  for (size_t i = 0; i < def.operands.size(); ++i)
    s += (i ? "," : "") + def.operands[i].name + ":" +
         dsl::dtypeName(def.operands[i].dtype).str();
  return s;
}

TuneEnvironment autotune::currentEnvironment(llvm::StringRef gpuName,
                                            llvm::StringRef arch,
                                            llvm::StringRef toolchain) {
  return TuneEnvironment{gpuName.str(), arch.str(), BITFOLD_VERSION,
                         BITFOLD_LLVM_VERSION, toolchain.str()};
}

TuneKey autotune::tuneKeyFor(const dsl::KernelDef &def,
                             llvm::StringRef shapeClass,
                             const TuneEnvironment &env) {
  return TuneKey{def.name, def.hash, shapeClass.str(), dtypesText(def), env};
}

spec::ShapeClass
autotune::tunedShapeClass(const dsl::KernelDef &def,
                          const templates::ProblemShape &shape) {
  return spec::denseShapeClass(def, shape.cols, shape.groupRows,
                               shape.rowsPerBatch, /*bucketRows=*/true);
}
