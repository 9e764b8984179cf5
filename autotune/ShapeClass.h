//===- autotune/ShapeClass.h - The shape class a problem is tuned in -*- C++ -*-===//
//
// `bitfold tune` times a problem in the shape class of dense, freshly
// allocated tensors of its shape (keys::denseShapeClass, rows bucketed):
// the class a launch on such tensors looks up. Tune keys are
// keys/TuneKey.h's (keys::tuneKeyFor, currentEnvironment, dtypesText):
// include it where they are used.
//
// See autotune/README.md for the policy.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_SHAPECLASS_H
#define BITFOLD_AUTOTUNE_SHAPECLASS_H

#include "autotune/TuneDB.h"

#include "keys/ShapeSpec.h"
#include "templates/Problem.h"

namespace bitfold::autotune {

/// The class `bitfold tune` times a problem of `shape` in.
keys::ShapeClass tunedShapeClass(const dsl::KernelDef &def,
                                 const templates::ProblemShape &shape);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_SHAPECLASS_H
