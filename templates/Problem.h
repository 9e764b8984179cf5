//===- templates/Problem.h - Shapes and host data for templates --*- C++ -*-===//
//
// The user-facing shape of a kernel (what `--shape` means), derived from
// its definition's layouts and groups, and host buffers filled with seeded
// random data: shared by the CLI's commands, the autotuner and tests.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_PROBLEM_H
#define BITFOLD_TEMPLATES_PROBLEM_H

#include "dsl/Interp.h"
#include "templates/Registry.h"

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

/// Tensors have at most this many dims (the C API's limit too).
constexpr int kMaxDims = 8;
/// Host buffers of one problem may total at most this many bytes.
constexpr uint64_t kMaxHostBytes = uint64_t(32) << 30;

/// Comma-separated positive dims, e.g. "1,4096,4096".
llvm::Expected<std::vector<int64_t>> parseDims(llvm::StringRef text);

/// Which dim of an ndim-dim tensor of `sig`'s first operand holds the
/// columns: 1 (C) for channels-last kernels, else the last.
int colsAxis(const dsl::KernelDef &sig, int ndim);

/// The problem shape of tensor dims for a kernel, read from its definition
/// (any column count's: layouts and groups do not change with D):
///  channels-last operands: N,C,H,W or N,C,D,H,W (rows = pixels, cols = C);
///  row-major: B,S,D (rows = B*S, S rows per batch), any B,...,D (rows per
///  batch = rows / B), or rows,D (one batch);
///  several groups (q and k): every group has all the rows, no batches.
/// Every product is checked for overflow.
llvm::Expected<ProblemShape> shapeFromDims(const dsl::KernelDef &sig,
                                           llvm::ArrayRef<int64_t> dims);

/// A registered kernel with its parameters, definition and shape: what
/// interp, run, compile and tune build from their arguments.
struct Problem {
  DescriptorRef desc;
  ParamValues params;
  KernelDefRef def; ///< built for shape.cols.
  ProblemShape shape;
  std::vector<float> scalars; ///< defaults, in def.scalars order.
  /// Scalars that declare no default and were not set yet (their slot in
  /// `scalars` is NaN). Compiling needs no scalar value (scalars are launch
  /// arguments); running does (HostProblem::make refuses them).
  std::vector<std::string> unsetScalars;
  /// Sets scalar `name`; an error names the kernel's scalars.
  llvm::Error setScalar(llvm::StringRef name, float value);
  /// An error naming the first unset scalar, else success.
  llvm::Error checkScalarsSet() const;
  /// The program's column guard against the shape, with codegen's message:
  /// outside it the program does not copy the reference.
  llvm::Error checkGuard() const;
};
/// Looks `kernel` up in the registry, parses `params` and the shape, builds
/// the definition and its default scalars. Every error is the caller's
/// input (unknown kernel or parameter, bad or unsupported shape).
llvm::Expected<Problem> makeProblem(llvm::StringRef kernel,
                                    llvm::StringRef params,
                                    llvm::ArrayRef<int64_t> dims);
llvm::Expected<Problem> makeProblem(llvm::StringRef kernel,
                                    llvm::StringRef params,
                                    llvm::StringRef shapeText);
/// The shape of `kernel` (default parameters) for comma-separated dims.
llvm::Expected<ProblemShape> parseShape(llvm::StringRef kernel,
                                        llvm::StringRef text);

/// The default scalars of `def` at `shape`: shape-derived ones from the
/// descriptor, the rest as the definition declares them. A scalar without
/// a default is an error, or, when `unset` is given, NaN with its name
/// appended to `unset`.
llvm::Expected<std::vector<float>>
defaultScalars(const KernelDescriptor &desc, const dsl::KernelDef &def,
               const ProblemShape &shape,
               std::vector<std::string> *unset = nullptr);

/// Host buffers for one problem, seeded; outputs poisoned (0xFF bytes, a
/// NaN in every float dtype) so unwritten elements are visible.
struct HostProblem {
  ProblemShape shape;
  std::vector<std::vector<std::vector<uint8_t>>> storage; ///< [group][operand]
  dsl::Binding binding;
  /// Fills inputs with normal(0, amplitude) values (never all zero); the
  /// per-batch modulation operands get 0.1 of it as in real models, weights
  /// the full amplitude. Fails above kMaxHostBytes.
  static llvm::Expected<HostProblem> make(const dsl::KernelDef &def,
                                          const ProblemShape &shape,
                                          uint64_t seed,
                                          std::vector<float> scalars,
                                          float amplitude = 1.0f);
  /// Fails when a scalar without a default was not set.
  static llvm::Expected<HostProblem> make(const Problem &p, uint64_t seed) {
    if (llvm::Error e = p.checkScalarsSet())
      return std::move(e);
    return make(*p.def, p.shape, seed, p.scalars);
  }
  /// A deep copy whose binding points at its own storage.
  HostProblem clone() const;
  /// Rows of operand `operand` in group g.
  int64_t rows(int g, int operand) const {
    return binding.tensors[g][operand].rows;
  }
  /// Bytes of one operand's buffer in group g.
  size_t bytes(int g, int operand) const { return storage[g][operand].size(); }
};

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_PROBLEM_H
