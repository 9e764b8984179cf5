//===- tools/ShapedTemplate.h - A template at a tensor shape -----*- C++ -*-===//
//
// What `bitfold compile` (tools/) and the codegen tests compile: a stock
// template, by name, at a tensor shape, with the ShapeSpec of contiguous
// tensors from a caching allocator. The shape rule is the registry's
// (templates/Problem.h).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TOOLS_SHAPEDTEMPLATE_H
#define BITFOLD_TOOLS_SHAPEDTEMPLATE_H

#include "keys/ShapeSpec.h"

#include "templates/Problem.h"

namespace bitfold::tools {

/// A template instance at a tensor shape.
struct ShapedTemplate {
  std::shared_ptr<const dsl::KernelDef> def;
  keys::ShapeSpec shape;
  std::vector<int64_t> groupRows; ///< rows per group.
  std::vector<int64_t> dims;      ///< named dim values.
};
struct TemplateRequest {
  std::string name;
  std::vector<int64_t> tensorShape;
  dsl::DType dtype = dsl::DType::BF16;
  dsl::DType biasDtype = dsl::DType::BF16;
  bool residual = false;
  std::string gate = "full";
};
llvm::Expected<ShapedTemplate> shapeTemplate(const TemplateRequest &req);

/// The ShapeSpec of `p` for dense tensors: 16-byte bases, rows of cols
/// elements, offsets up to rows * cols of one group.
ShapedTemplate shapeProblem(const templates::Problem &p);

} // namespace bitfold::tools

#endif // BITFOLD_TOOLS_SHAPEDTEMPLATE_H
