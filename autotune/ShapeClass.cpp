//===- autotune/ShapeClass.cpp - The shape class a problem is tuned in ----===//

#include "autotune/ShapeClass.h"

using namespace bitfold;
using namespace bitfold::autotune;

keys::ShapeClass
autotune::tunedShapeClass(const dsl::KernelDef &def,
                          const templates::ProblemShape &shape) {
  return keys::denseShapeClass(def, shape.cols, shape.groupRows,
                               shape.rowsPerBatch, /*bucketRows=*/true);
}
