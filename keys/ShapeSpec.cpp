//===- keys/ShapeSpec.cpp - What a kernel is specialised on ---------------===//

#include "keys/ShapeSpec.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <climits>

using namespace bitfold;
using namespace bitfold::keys;

std::string ShapeSpec::str() const {
  std::string s = llvm::formatv("c{0}.a", cols);
  for (size_t i = 0; i < alignBytes.size(); ++i)
    s += (i ? "-" : "") + std::to_string(alignBytes[i]);
  s += llvm::formatv(".o{0}", maxElementOffset >= (int64_t(1) << 31) ||
                                      maxElementOffset == 0
                                  ? 64
                                  : 32);
  for (size_t i = 0; i < rowLevels.size(); ++i)
    if (rowLevels[i].inner > 0)
      s += llvm::formatv(".l{0}:{1}x{2}", i, rowLevels[i].inner,
                         rowLevels[i].outer);
  if (oneSpatial)
    s += ".s1";
  if (manyRows)
    s += ".R";
  return s;
}

ShapeSpec ShapeClass::shapeSpec() const {
  ShapeSpec s;
  s.cols = cols;
  s.alignBytes.assign(alignBytes.begin(), alignBytes.begin() + numOperands);
  s.maxElementOffset = index64 ? int64_t(1) << 62 : int64_t(INT32_MAX);
  if (twoLevel)
    s.rowLevels.assign(levels.begin(), levels.begin() + numOperands);
  s.oneSpatial = oneSpatial;
  s.manyRows = manyRows;
  return s;
}

std::string ShapeClass::str() const {
  std::string s = shapeSpec().str();
  if (rowBucket)
    s += "/r" + std::to_string(rowBucket);
  return s;
}

int64_t keys::definitionRowClass(const dsl::KernelDef &def) {
  int64_t cls = 0;
  for (const dsl::FoldDecl &f : def.folds)
    if (f.order.hasRowRange())
      cls = std::max(cls, f.order.minRows);
  return cls;
}

bool keys::rowCountSplits(const dsl::KernelDef &def, int64_t cols) {
  return !def.folds.empty() && def.folds[0].order.threads > 32 &&
         !def.folds[0].order.stridedAxis() && cols >= 2048 && cols <= 2304;
}

bool keys::spatialSharable(const dsl::KernelDef &def) {
  int n = 0;
  for (const dsl::OperandDecl &o : def.operands)
    n += o.layout == dsl::Layout::ChannelsFirst; // the views with an S
  return n >= 2;
}

ShapeClass keys::denseShapeClass(const dsl::KernelDef &def, int64_t cols,
                                 llvm::ArrayRef<int64_t> groupRows,
                                 int64_t rowsPerBatch, bool bucketRows) {
  std::vector<int> align(def.operands.size(), 16);
  int64_t maxOffset = 0, totalRows = 0;
  for (int64_t groupR : groupRows) {
    totalRows += groupR;
    for (size_t i = 0; i < def.operands.size(); ++i) {
      const dsl::OperandDecl &op = def.operands[i];
      int64_t rows = op.map == dsl::IndexMap::PerColumn ? 1
                     : op.map == dsl::IndexMap::PerBatch
                         ? (groupR + rowsPerBatch - 1) /
                               std::max<int64_t>(rowsPerBatch, 1)
                         : groupR;
      const int64_t width = dsl::storedCols(op, cols);
      uint64_t rowBytes = uint64_t(width) * dsl::dtypeBytes(op.dtype);
      align[i] = std::min(align[i], viewAlignBytes(0, rows, rowBytes));
      int64_t last = 0;
      if (!lastElementOffset(rows, width, width, last))
        last = INT64_MAX;
      maxOffset = std::max(maxOffset, last);
    }
  }
  ShapeClass c = classifyShape(cols, align, maxOffset, totalRows, bucketRows);
  c.rowClass = definitionRowClass(def);
  c.oneSpatial = spatialSharable(def);
  c.manyRows = manyRowsOf(def, cols, totalRows);
  return c;
}
