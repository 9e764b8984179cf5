//===- tools/ShapedTemplate.cpp - A template at a tensor shape ----------===//

#include "tools/ShapedTemplate.h"

#include "keys/ShapeSpec.h"

#include <numeric>

using namespace bitfold;
using namespace bitfold::tools;

ShapedTemplate tools::shapeProblem(const templates::Problem &p) {
  ShapedTemplate out;
  out.def = p.def;
  out.dims.assign(p.def->dims.size(), p.shape.rowsPerBatch);
  out.groupRows = p.shape.groupRows;
  // What a launch on dense tensors of this shape compiles.
  out.shape = keys::denseShapeClass(*out.def, p.shape.cols, p.shape.groupRows,
                                    p.shape.rowsPerBatch, /*bucketRows=*/false)
                  .shapeSpec();
  return out;
}

llvm::Expected<ShapedTemplate>
tools::shapeTemplate(const TemplateRequest &req) {
  std::string params = "dtype=" + dsl::dtypeName(req.dtype).str();
  auto desc = templates::Registry::global().lookup(req.name);
  if (!desc)
    return desc.takeError();
  for (const templates::ParamSpec &p : (*desc)->params) {
    if (p.name == "bias_dtype")
      params += ",bias_dtype=" + dsl::dtypeName(req.biasDtype).str();
    else if (p.name == "residual")
      params += req.residual ? ",residual=1" : ",residual=0";
    else if (p.name == "gate")
      params += ",gate=" + req.gate;
  }
  auto p = templates::makeProblem(req.name, params, req.tensorShape);
  if (!p)
    return p.takeError();
  return shapeProblem(*p);
}
