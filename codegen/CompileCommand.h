//===- codegen/CompileCommand.h - `bitfold compile` ---------------*- C++ -*-===//
//
//   bitfold compile TEMPLATE --shape 1,4096,4096 [--config r1.t128.v8.p1]
//       [--arch sm_90] [--dump-dir DIR] [--dtype bf16] [--bias-dtype f32]
//       [--residual] [--gate full|per_batch|global] [--cubin-tool TOOL]
//       [--ptx-only] [--list-configs]
//
// Shapes: row-major templates take (B, S, D) (rows = B*S, S is the named
// dim, cols = D) or any (..., D); channels-last templates (conv_bias,
// wan_rmsnorm_silu) take NCHW / NCDHW: cols = C, rows = N * spatial.
// Prints the chosen config, the tool, sizes, registers and per-stage times.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_COMPILECOMMAND_H
#define BITFOLD_CODEGEN_COMPILECOMMAND_H

#include "codegen/Codegen.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

namespace bitfold::codegen {

/// `args` excludes "compile" itself. Returns the process exit code; errors
/// go to `out` too.
int runCompileCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out);

/// A template instance at a tensor shape, as the CLI understands it.
struct ShapedTemplate {
  std::shared_ptr<const dsl::KernelDef> def;
  ShapeSpec shape;
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

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_COMPILECOMMAND_H
