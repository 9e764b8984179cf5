//===- tests/dsl/Sm90Golden.h - stock templates vs H200 outputs -*- C++ -*-===//
//
// Small, fixed problems of every stock template whose GPU outputs, captured
// on an H200, are committed under tests/dsl/golden-sm90: the interpreter with
// the sm_90 approximation models must reproduce them bit for bit, on a
// machine without a GPU. Inputs are made as `bitfold run` makes them
// (mt19937_64(seed), normal(0, 1), never zero after rounding; eps 1e-6,
// scale sqrt(C)). sm90_golden_gen writes each case's inputs and a manifest;
// tests/gpu/approx/capture_golden.py launches them on the GPU.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_DSL_SM90GOLDEN_H
#define BITFOLD_TESTS_DSL_SM90GOLDEN_H

#include "templates/Problem.h"
#include "templates/Registry.h"
#include "templates/Templates.h"

#include <string>
#include <vector>

namespace bitfold::testing {

struct GoldenCase {
  std::string name;   ///< file stem under tests/dsl/golden-sm90.
  std::string tmpl;   ///< template name.
  std::string params; ///< C API parameters ("gate=per_batch").
  templates::TemplateArgs args;
  std::vector<int64_t> dims; ///< user shape, as `bitfold run --shape`.
  uint64_t seed = 1;
};
const std::vector<GoldenCase> &goldenCases();

struct GoldenOperand {
  std::string name;
  dsl::DType dtype;
  bool isOutput = false;
  int64_t rows = 0;
  std::vector<int64_t> shape, strides; ///< as the C API takes it (DLPack).
  std::vector<char> bytes;             ///< inputs seeded, outputs 0xFF.
};

struct GoldenProblem {
  templates::KernelDefRef def;
  int64_t cols = 0, rows = 0, rowsPerBatch = 1;
  std::vector<GoldenOperand> operands; ///< group-major, as the C API takes them.
  std::vector<float> scalars;
  /// The interpreter's view of `operands` (pointing into their bytes).
  dsl::Binding binding();
};
llvm::Expected<GoldenProblem> makeGoldenProblem(const GoldenCase &c);

/// The case's inputs (input operands' bytes, in order) and outputs.
std::vector<char> concatBytes(const GoldenProblem &p, bool outputs);
/// JSON for capture_golden.py: template, params, scalars, per operand
/// dtype, shape, strides, byte count, output flag.
std::string manifestJson(const GoldenCase &c, const GoldenProblem &p);

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_DSL_SM90GOLDEN_H
