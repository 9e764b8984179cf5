//===- autotune/ShapeClass.cpp - Shape classes ----------------------------===//

#include "autotune/ShapeClass.h"

#include "runtime/CacheKey.h"

#include "bitfold/Config.h"

#include <bit>

using namespace bitfold;
using namespace bitfold::autotune;

int64_t autotune::rowBucket(int64_t rows) {
  if (rows <= 1)
    return 1;
  return int64_t(std::bit_floor(uint64_t(rows)));
}

std::string autotune::shapeClass(llvm::StringRef shapeSpecText, int64_t rows) {
  return shapeSpecText.str() + "/r" + std::to_string(rowBucket(rows));
}

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
                             llvm::StringRef shapeSpecText, int64_t rows,
                             const TuneEnvironment &env) {
  return TuneKey{def.name, def.hash, shapeClass(shapeSpecText, rows),
                 dtypesText(def), env};
}

codegen::ShapeSpec
autotune::denseShapeSpec(const dsl::KernelDef &def,
                         const templates::ProblemShape &shape) {
  codegen::ShapeSpec spec;
  spec.cols = shape.cols;
  int64_t maxRows = 0;
  for (int64_t r : shape.groupRows)
    maxRows = std::max(maxRows, r);
  if (shape.groupRows.empty())
    maxRows = shape.totalRows();
  int64_t maxOffset = 0;
  for (const dsl::OperandDecl &op : def.operands) {
    int64_t rowBytes = shape.cols * int64_t(dsl::dtypeBytes(op.dtype));
    int align = 16;
    while (align > 1 && rowBytes % align != 0)
      align /= 2;
    spec.alignBytes.push_back(align);
    int64_t rows = op.map == dsl::IndexMap::PerColumn ? 1
                   : op.map == dsl::IndexMap::PerBatch
                       ? (maxRows + shape.rowsPerBatch - 1) /
                             std::max<int64_t>(shape.rowsPerBatch, 1)
                       : maxRows;
    maxOffset = std::max(maxOffset, rows * shape.cols - 1);
  }
  // A class, with the runtime's own function (runtime/CacheKey.h).
  spec.maxElementOffset = runtime::maxElementOffsetClass(maxOffset);
  return spec;
}
