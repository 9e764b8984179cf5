//===- codegen/CompileCommand.cpp - A template at a tensor shape ----------===//

#include "codegen/CompileCommand.h"

#include <numeric>

using namespace bitfold;
using namespace bitfold::codegen;

ShapedTemplate codegen::shapeProblem(const templates::Problem &p) {
  ShapedTemplate out;
  out.def = p.def;
  out.dims.assign(p.def->dims.size(), p.shape.rowsPerBatch);
  out.groupRows = p.shape.groupRows;
  const int64_t cols = p.shape.cols;
  const int64_t rows = p.shape.groupRows.front(); // per group
  out.shape.cols = cols;
  for (const dsl::OperandDecl &o : p.def->operands) {
    int bytes = int(dsl::dtypeBytes(o.dtype));
    // Contiguous tensors from a caching allocator: 16-byte base; the row
    // stride (cols elements) decides the rest.
    out.shape.alignBytes.push_back(int(std::gcd(int64_t(16), cols * bytes)));
  }
  out.shape.maxElementOffset = rows * cols;
  return out;
}

llvm::Expected<ShapedTemplate>
codegen::shapeTemplate(const TemplateRequest &req) {
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
