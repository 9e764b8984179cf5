//===- tools/ShapeTasks.h - A shapes file planned without a GPU --*- C++
//-*-===//
//
// `bitfold tune` and `bitfold prebuild` read the same shapes file
// (autotune/TuneTasks.h) and plan it the same way: each entry becomes a
// problem (templates::makeProblem) and the shape class a launch on dense
// tensors of its shape looks up, rows bucketed as the tune DB keys it
// (autotune::tunedShapeClass). Entries of the same kernel and class are
// planned once.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TOOLS_SHAPETASKS_H
#define BITFOLD_TOOLS_SHAPETASKS_H

#include "autotune/TuneTasks.h"

#include "keys/ShapeSpec.h"
#include "templates/Problem.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace bitfold::tools {

/// One shape of a shapes file, planned without a GPU.
struct ShapeTask {
  autotune::ShapeRequest request;
  templates::Problem problem;
  keys::ShapeClass cls;    ///< rows bucketed (the tune DB's class).
  keys::ShapeSpec spec;    ///< cls.shapeSpec().
  std::string shapeClass;  ///< cls.str().
  std::string error;       ///< planning failed: why.
};

/// The tasks of `requests` whose kernel is in `filter` (empty: all), in
/// file order, one per (kernel hash, shape class); a request that cannot be
/// planned is a task with `error` set.
std::vector<ShapeTask>
planShapeTasks(llvm::ArrayRef<autotune::ShapeRequest> requests,
               llvm::ArrayRef<std::string> filter);

} // namespace bitfold::tools

#endif // BITFOLD_TOOLS_SHAPETASKS_H
