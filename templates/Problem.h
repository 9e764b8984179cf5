//===- templates/Problem.h - Shapes and host data for templates --*- C++ -*-===//
//
// The user-facing shape of each template (what `--shape` means) and host
// buffers filled with seeded random data, shared by the CLI's interp/run
// commands, the autotuner and tests.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_PROBLEM_H
#define BITFOLD_TEMPLATES_PROBLEM_H

#include "dsl/Interp.h"
#include "templates/Templates.h"

namespace bitfold::templates {

/// A template's problem size in its own terms, reduced to rows x cols.
struct ProblemShape {
  std::vector<int64_t> dims; ///< as given, e.g. {B, S, D} or {N, C, D, H, W}.
  int64_t cols = 0;
  int64_t rowsPerBatch = 1;  ///< S for per-batch operands.
  std::vector<int64_t> groupRows;
  int64_t totalRows() const;
  std::string str() const;   ///< "1x4096x4096"
};

/// The problem shape of `tmpl` for tensor dims:
///  row-major templates: B,S,D (rows = B*S, S = rows per batch), or any
///  B,...,D with at least three dims (rows per batch = rows / B), or
///  rows,D (one batch);
///  qk_layernorm: B,S,H,D (rows = B*S*H per group, q and k);
///  channels-last templates: N,C,H,W or N,C,D,H,W (rows = pixels, cols = C).
llvm::Expected<ProblemShape> shapeFromDims(llvm::StringRef tmpl,
                                           llvm::ArrayRef<int64_t> dims);
/// shapeFromDims of comma-separated text, e.g. "1,4096,4096".
llvm::Expected<ProblemShape> parseShape(llvm::StringRef tmpl,
                                        llvm::StringRef text);

/// Host buffers for one problem, seeded; outputs poisoned (0xFFFF / NaN
/// pattern) so unwritten elements are visible.
struct HostProblem {
  ProblemShape shape;
  std::vector<std::vector<std::vector<uint8_t>>> storage; ///< [group][operand]
  dsl::Binding binding;
  /// Fills inputs with normal(0, amplitude) values (never all zero); the
  /// per-batch modulation operands get smaller amplitudes as real models do.
  static llvm::Expected<HostProblem> make(const dsl::KernelDef &def,
                                          const ProblemShape &shape,
                                          uint64_t seed,
                                          float amplitude = 1.0f);
  /// Bytes of one operand's buffer in group g.
  size_t bytes(int g, int operand) const { return storage[g][operand].size(); }
};

/// Default scalars (eps = 1e-6, scale = sqrt(C)) for a template.
std::vector<float> defaultScalars(const dsl::KernelDef &def,
                                  const ProblemShape &shape);

/// Consumes the template options the CLI accepts from `args` (--dtype T,
/// --bias-dtype T, --residual, --gate full|per_batch|global) into `out`;
/// everything else is returned in `rest`, in order.
llvm::Error parseTemplateArgs(llvm::ArrayRef<std::string> args,
                              TemplateArgs &out, std::vector<std::string> &rest);
/// Help text for those options.
llvm::StringRef templateArgsHelp();

/// The seed shapes of NUMERICS.md for a template.
std::vector<std::string> seedShapes(llvm::StringRef tmpl);

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_PROBLEM_H
