//===- tools/ShapeTasks.cpp - A shapes file planned without a GPU ---------===//

#include "tools/ShapeTasks.h"

#include "autotune/ShapeClass.h"

#include "llvm/ADT/STLExtras.h"

#include <set>

using namespace bitfold;
using namespace bitfold::tools;

std::vector<ShapeTask>
tools::planShapeTasks(llvm::ArrayRef<autotune::ShapeRequest> requests,
                      llvm::ArrayRef<std::string> filter) {
  std::vector<ShapeTask> tasks;
  std::set<std::string> seen;
  for (const autotune::ShapeRequest &r : requests) {
    if (!filter.empty() && !llvm::is_contained(filter, r.templateName))
      continue;
    ShapeTask t;
    t.request = r;
    auto p = templates::makeProblem(r.templateName, r.paramsText(), r.shape);
    if (!p) {
      t.error = llvm::toString(p.takeError());
      tasks.push_back(std::move(t));
      continue;
    }
    t.problem = std::move(*p);
    t.cls = autotune::tunedShapeClass(*t.problem.def, t.problem.shape);
    t.spec = t.cls.shapeSpec();
    t.shapeClass = t.cls.str();
    // One task per (kernel, shape class): later shapes of a class share it.
    if (!seen.insert(t.problem.def->hash + "\n" + t.shapeClass).second)
      continue;
    tasks.push_back(std::move(t));
  }
  return tasks;
}
