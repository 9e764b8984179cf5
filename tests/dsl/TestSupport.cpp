//===- tests/dsl/TestSupport.cpp - Buffers, inputs, bit comparison --------===//

#include "tests/dsl/TestSupport.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

using namespace bitfold;
using namespace bitfold::testing;

Storage bitfold::testing::storageOf(DType t) {
  switch (t) {
  case DType::BF16:
    return Storage::BF16;
  case DType::F16:
    return Storage::F16;
  default:
    return Storage::F32;
  }
}

// ---- Buffer -----------------------------------------------------------------

Buffer::Buffer(DType dtype, int64_t rows, int64_t rowStride)
    : type(dtype), numRows(rows), stride(rowStride),
      bytes(size_t(rows * rowStride) * dsl::dtypeBytes(dtype)) {}

uint32_t Buffer::bits(int64_t row, int64_t col) const {
  size_t i = size_t(row * stride + col);
  if (type == DType::F32) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, bytes.data() + 2 * i, 2);
  return v;
}

float Buffer::value(int64_t row, int64_t col) const {
  return reference::decode(storageOf(type), bits(row, col));
}

void Buffer::set(int64_t row, int64_t col, float v) {
  size_t i = size_t(row * stride + col);
  uint32_t b = reference::encode(storageOf(type), v);
  if (type == DType::F32) {
    std::memcpy(bytes.data() + 4 * i, &b, 4);
    return;
  }
  uint16_t h = uint16_t(b);
  std::memcpy(bytes.data() + 2 * i, &h, 2);
}

void Buffer::poison() {
  // 0xA5A5 is a finite bf16/f16 value; 0xA5A5A5A5 a finite f32 one.
  std::memset(bytes.data(), 0xA5, bytes.size());
}

dsl::HostTensor Buffer::host(int64_t colOffset) {
  dsl::HostTensor t;
  t.dtype = type;
  t.data = bytes.data() + colOffset * dsl::dtypeBytes(type);
  t.rows = numRows;
  t.rowStride = stride;
  return t;
}

reference::Matrix Buffer::matrix(int64_t cols, int64_t colOffset) {
  reference::Matrix m;
  m.type = storageOf(type);
  m.data = bytes.data() + colOffset * dsl::dtypeBytes(type);
  m.rows = numRows;
  m.cols = cols;
  m.rowStride = stride;
  return m;
}

// ---- Inputs -----------------------------------------------------------------

uint64_t Rng::next() {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return double(next() >> 11) * 0x1p-53; }

const char *bitfold::testing::patternName(Pattern p) {
  switch (p) {
  case Pattern::Uniform:
    return "uniform";
  case Pattern::SignedZeros:
    return "signed_zeros";
  case Pattern::NegativeZeros:
    return "negative_zeros";
  case Pattern::Constant:
    return "constant";
  case Pattern::Subnormal:
    return "subnormal";
  case Pattern::Tiny:
    return "tiny";
  case Pattern::Huge:
    return "huge";
  case Pattern::WithInf:
    return "with_inf";
  case Pattern::WithNaN:
    return "with_nan";
  }
  return "?";
}

const std::vector<Pattern> &bitfold::testing::edgePatterns() {
  static const std::vector<Pattern> all = {
      Pattern::SignedZeros, Pattern::NegativeZeros, Pattern::Constant,
      Pattern::Subnormal,   Pattern::Tiny,          Pattern::Huge,
      Pattern::WithInf,     Pattern::WithNaN};
  return all;
}

void bitfold::testing::fillRow(Buffer &b, int64_t row, int64_t cols, Pattern p,
                               double amplitude, Rng &rng) {
  // A random offset makes the mean matter (Welford's delta is not ~x).
  static const double offsets[] = {0.0, 0.5, -3.0};
  double offset = offsets[rng.below(3)] * amplitude;
  auto ordinary = [&] { return float(offset + amplitude * rng.symmetric()); };
  const float bf16Max = std::bit_cast<float>(uint32_t(0x7F7F0000));
  const float constant = ordinary();
  for (int64_t c = 0; c < cols; ++c) {
    float v = 0.0f;
    switch (p) {
    case Pattern::Uniform:
      v = ordinary();
      break;
    case Pattern::SignedZeros:
      v = rng.below(8) == 0 ? ordinary() : (rng.below(2) ? -0.0f : 0.0f);
      break;
    case Pattern::NegativeZeros:
      v = -0.0f;
      break;
    case Pattern::Constant:
      v = constant;
      break;
    case Pattern::Subnormal: {
      // f32/bf16 subnormals, and f16 subnormals (which bf16 holds as normals).
      double unit = rng.below(2) ? double(FLT_MIN) : 0x1p-15;
      v = float(unit * rng.symmetric());
      break;
    }
    case Pattern::Tiny:
      v = float(1e-30 * (rng.symmetric() + (rng.below(2) ? 2.0 : 0.0)));
      break;
    case Pattern::Huge: {
      double sign = rng.below(2) ? -1.0 : 1.0;
      v = rng.below(4) == 0
              ? float(sign * bf16Max * (1.0 - 0.01 * rng.uniform()))
              : float(1e30 * (rng.symmetric() + sign));
      break;
    }
    case Pattern::WithInf:
    case Pattern::WithNaN:
      v = ordinary();
      break;
    }
    b.set(row, c, v);
  }
  if (p == Pattern::WithInf)
    b.set(row, rng.below(cols),
          rng.below(2) ? std::numeric_limits<float>::infinity()
                       : -std::numeric_limits<float>::infinity());
  if (p == Pattern::WithNaN)
    b.set(row, rng.below(cols), std::numeric_limits<float>::quiet_NaN());
}

void bitfold::testing::fillUniform(Buffer &b, int64_t rows, int64_t cols,
                                   double amplitude, Rng &rng) {
  for (int64_t r = 0; r < rows; ++r)
    fillRow(b, r, cols, Pattern::Uniform, amplitude, rng);
}

// ---- Binding ----------------------------------------------------------------

BindingBuilder::BindingBuilder(const dsl::KernelDef &def, int64_t cols,
                               std::vector<int64_t> groupRows)
    : def(def) {
  binding.cols = cols;
  binding.groupRows = std::move(groupRows);
  binding.tensors.assign(binding.groupRows.size(),
                         std::vector<dsl::HostTensor>(def.operands.size()));
  binding.dims.assign(def.dims.size(), 0);
  binding.scalars.assign(def.scalars.size(), 0.0f);
}

BindingBuilder &BindingBuilder::tensor(int group, const std::string &operand,
                                       dsl::HostTensor t) {
  for (size_t i = 0; i < def.operands.size(); ++i)
    if (def.operands[i].name == operand) {
      binding.tensors.at(group)[i] = t;
      return *this;
    }
  ADD_FAILURE() << "'" << def.name << "' has no operand '" << operand << "'";
  return *this;
}

BindingBuilder &BindingBuilder::dim(const std::string &name, int64_t value) {
  for (size_t i = 0; i < def.dims.size(); ++i)
    if (def.dims[i] == name) {
      binding.dims[i] = value;
      return *this;
    }
  ADD_FAILURE() << "'" << def.name << "' has no dim '" << name << "'";
  return *this;
}

BindingBuilder &BindingBuilder::scalar(const std::string &name, float value) {
  for (size_t i = 0; i < def.scalars.size(); ++i)
    if (def.scalars[i].name == name) {
      binding.scalars[i] = value;
      return *this;
    }
  ADD_FAILURE() << "'" << def.name << "' has no scalar '" << name << "'";
  return *this;
}

// ---- Comparison -------------------------------------------------------------

::testing::AssertionResult
bitfold::testing::bitEqual(const std::string &context, const Buffer &got,
                           const Buffer &want, int64_t cols) {
  if (got.dtype() != want.dtype() || got.rows() != want.rows())
    return ::testing::AssertionFailure()
           << context << ": buffers differ in dtype or rows";
  int64_t differing = 0, firstRow = -1, firstCol = -1;
  for (int64_t r = 0; r < got.rows(); ++r)
    for (int64_t c = 0; c < cols; ++c) {
      if (got.bits(r, c) == want.bits(r, c))
        continue;
      if (std::isnan(got.value(r, c)) && std::isnan(want.value(r, c)))
        continue;
      if (differing++ == 0) {
        firstRow = r;
        firstCol = c;
      }
    }
  if (differing == 0)
    return ::testing::AssertionSuccess();
  const int hexDigits = got.dtype() == DType::F32 ? 8 : 4;
  auto show = [&](const Buffer &b) {
    char text[64];
    std::snprintf(text, sizeof(text), "0x%0*X (%.9g)", hexDigits,
                  unsigned(b.bits(firstRow, firstCol)),
                  double(b.value(firstRow, firstCol)));
    return std::string(text);
  };
  return ::testing::AssertionFailure()
         << context << ": " << differing << " of " << got.rows() * cols
         << " elements differ; first at row " << firstRow << ", col "
         << firstCol << " (flat " << firstRow * cols + firstCol
         << "): interpreter " << show(got) << ", transcription " << show(want);
}
