//===- autotune/ShapeClass.cpp - Shape classes ----------------------------===//

#include "autotune/ShapeClass.h"

#include <bit>
#include <climits>

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
  // A class, exactly as runtime/Runtime.cpp builds it.
  spec.maxElementOffset =
      maxOffset > int64_t(INT32_MAX) ? int64_t(1) << 62 : int64_t(INT32_MAX);
  return spec;
}
