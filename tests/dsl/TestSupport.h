//===- tests/dsl/TestSupport.h - Buffers, inputs, bit comparison -*- C++
//-*-===//
//
// Shared by the DSL tests: host buffers that both the interpreter
// (dsl::HostTensor) and the reference transcriptions (reference::Matrix) can
// view, deterministic input patterns (random and edge values), a binding
// builder that finds operands by name, and a bit-for-bit comparison whose
// failure message names the case and the first differing element.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_DSL_TESTSUPPORT_H
#define BITFOLD_TESTS_DSL_TESTSUPPORT_H

#include "dsl/Interp.h"
#include "tests/reference/Reference.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bitfold::testing {

using dsl::DType;
using reference::Storage;

Storage storageOf(DType t);

/// A packed host buffer: `rows` rows of `rowStride` elements of `dtype`.
class Buffer {
public:
  Buffer(DType dtype, int64_t rows, int64_t rowStride);

  DType dtype() const { return type; }
  int64_t rows() const { return numRows; }
  int64_t rowStride() const { return stride; }

  uint32_t bits(int64_t row, int64_t col) const;
  float value(int64_t row, int64_t col) const;
  /// Stores `v` rounded to the buffer's dtype.
  void set(int64_t row, int64_t col, float v);
  /// Fills every element with a bit pattern the kernels must overwrite.
  void poison();

  /// Views of `cols` columns starting at `colOffset` (a chunk of a wider
  /// tensor when colOffset + cols < rowStride).
  dsl::HostTensor host(int64_t colOffset = 0);
  reference::Matrix matrix(int64_t cols, int64_t colOffset = 0);

private:
  DType type;
  int64_t numRows, stride;
  std::vector<unsigned char> bytes;
};

/// splitmix64: the same stream on every platform.
class Rng {
public:
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next();
  /// Uniform in [0, 1).
  double uniform();
  /// Uniform in [-1, 1).
  double symmetric() { return 2.0 * uniform() - 1.0; }
  int64_t below(int64_t n) { return int64_t(next() % uint64_t(n)); }

private:
  uint64_t state;
};

/// What a generated row holds.
enum class Pattern {
  Uniform,       ///< amplitude * U(-1, 1) around a random offset.
  SignedZeros,   ///< +0 and -0, a few ordinary values.
  NegativeZeros, ///< -0 only.
  Constant,      ///< one value repeated (zero variance).
  Subnormal,     ///< f32 and f16 subnormal magnitudes.
  Tiny,          ///< around 1e-30.
  Huge,          ///< around 1e30 and near the bf16 maximum.
  WithInf,       ///< ordinary values and one +-Inf.
  WithNaN,       ///< ordinary values and one NaN.
};
const char *patternName(Pattern p);
/// Every pattern that is not Uniform.
const std::vector<Pattern> &edgePatterns();

/// Fills row `row` (cols columns) of `b` following `p`.
void fillRow(Buffer &b, int64_t row, int64_t cols, Pattern p, double amplitude,
             Rng &rng);
/// Fills `rows` rows: Uniform with `amplitude`.
void fillUniform(Buffer &b, int64_t rows, int64_t cols, double amplitude,
                 Rng &rng);

/// Builds a dsl::Binding by operand, dim and scalar names.
class BindingBuilder {
public:
  BindingBuilder(const dsl::KernelDef &def, int64_t cols,
                 std::vector<int64_t> groupRows);
  BindingBuilder &tensor(int group, const std::string &operand,
                         dsl::HostTensor t);
  BindingBuilder &dim(const std::string &name, int64_t value);
  BindingBuilder &scalar(const std::string &name, float value);
  /// The binding; records a test failure for a name the program lacks.
  const dsl::Binding &get() const { return binding; }

private:
  const dsl::KernelDef &def;
  dsl::Binding binding;
};

/// Compares the first `cols` columns of every row of `got` and `want` bit
/// for bit (two NaNs at the same index count as equal). On failure the
/// message gives `context` (template, shape, seed), the first differing
/// (row, col) with both values, and how many elements differ.
::testing::AssertionResult bitEqual(const std::string &context,
                                    const Buffer &got, const Buffer &want,
                                    int64_t cols);

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_DSL_TESTSUPPORT_H
