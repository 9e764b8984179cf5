//===- templates/Problem.cpp - Shapes and host data for templates ---------===//

#include "templates/Problem.h"

#include "dsl/Limits.h"
#include "dsl/Float8.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace bitfold;
using namespace bitfold::templates;

static llvm::Error shapeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// a * b, or an error naming `what` when it leaves int64.
static llvm::Expected<int64_t> checkedMul(int64_t a, int64_t b,
                                          const llvm::Twine &what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return shapeError(what + ": the product of the dims overflows 64 bits");
  return r;
}

int64_t ProblemShape::totalRows() const {
  int64_t n = 0;
  for (int64_t r : groupRows)
    n += r;
  return n;
}

std::string ProblemShape::str() const {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

llvm::Expected<std::vector<int64_t>> templates::parseDims(llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',');
  if (parts.size() > size_t(kMaxDims))
    return shapeError(llvm::formatv("shape '{0}': at most {1} dims", text,
                                    kMaxDims));
  std::vector<int64_t> dims;
  for (llvm::StringRef p : parts) {
    int64_t v;
    if (p.trim().getAsInteger(10, v) || v < 1)
      return shapeError(llvm::formatv("shape '{0}': '{1}' is not a positive "
                                      "64-bit integer (expected e.g. "
                                      "1,4096,4096)",
                                      text, p));
    dims.push_back(v);
  }
  return dims;
}

/// N,C,[D,]H,W tensors whose rows are pixels (channels-last or -first).
static bool isChannelsLast(const dsl::KernelDef &sig) {
  return llvm::any_of(sig.operands, [](const dsl::OperandDecl &o) {
    return o.layout == dsl::Layout::ChannelsLast ||
           o.layout == dsl::Layout::ChannelsFirst;
  });
}

int templates::colsAxis(const dsl::KernelDef &sig, int ndim) {
  return isChannelsLast(sig) && ndim >= 2 ? 1 : ndim - 1;
}

llvm::Expected<ProblemShape>
templates::shapeFromDims(const dsl::KernelDef &sig,
                         llvm::ArrayRef<int64_t> dims) {
  ProblemShape s;
  s.dims.assign(dims.begin(), dims.end());
  if (dims.size() > size_t(kMaxDims))
    return shapeError(llvm::formatv("shape {0}: at most {1} dims", s.str(),
                                    kMaxDims));
  for (int64_t d : dims)
    if (d < 1)
      return shapeError(llvm::formatv("shape {0}: dims must be positive",
                                      s.str()));
  bool channelsLast = isChannelsLast(sig);
  if (channelsLast && dims.size() != 4 && dims.size() != 5)
    return shapeError(llvm::formatv(
        "{0}: shape is N,C,H,W or N,C,D,H,W; found {1} dims", sig.name,
        dims.size()));
  if (!channelsLast && dims.size() < 2)
    return shapeError(llvm::formatv(
        "{0}: shape is B,S,D (or any ...,D); found {1} dim(s)", sig.name,
        dims.size()));
  // rows = every dim but the columns'; the product of all must fit too.
  int axis = colsAxis(sig, int(dims.size()));
  int64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i)
    if (int(i) != axis) {
      auto r = checkedMul(rows, dims[i], "shape " + s.str());
      if (!r)
        return r.takeError();
      rows = *r;
    }
  auto elements = checkedMul(rows, dims[axis], "shape " + s.str());
  if (!elements)
    return elements.takeError();
  s.cols = dims[axis];
  if (sig.groups > 1) { // e.g. q and k: each group has every row
    s.groupRows.assign(sig.groups, rows);
    return s;
  }
  // The first dim is the batch: per-batch operands have one row per batch.
  if (!channelsLast)
    s.rowsPerBatch = dims.size() >= 3 ? rows / dims[0] : rows;
  s.groupRows = {rows};
  return s;
}

llvm::Error Problem::setScalar(llvm::StringRef name, float value) {
  for (size_t i = 0; i < def->scalars.size(); ++i)
    if (def->scalars[i].name == name) {
      scalars[i] = value;
      llvm::erase(unsetScalars, name.str());
      return llvm::Error::success();
    }
  std::string names;
  for (const dsl::ScalarDecl &d : def->scalars)
    names += (names.empty() ? "" : ", ") + d.name;
  return shapeError(desc->name + " has no scalar '" + name + "' (scalars: " +
                    (names.empty() ? std::string("none") : names) + ")");
}

llvm::Error Problem::checkScalarsSet() const {
  if (unsetScalars.empty())
    return llvm::Error::success();
  return shapeError(desc->name + ": scalar '" + unsetScalars.front() +
                    "' declares no default; give its value (--scalar " +
                    unsetScalars.front() + "=VALUE)");
}

llvm::Error Problem::checkGuard() const {
  const int64_t D = shape.cols;
  if (D >= def->minCols && D <= def->maxCols && D % def->colsMultipleOf == 0)
    return llvm::Error::success();
  return shapeError(llvm::formatv("'{0}' needs cols % {1} == 0 and {2} <= "
                                  "cols <= {3}; the shape has {4} columns",
                                  def->name, def->colsMultipleOf, def->minCols,
                                  def->maxCols, D));
}

llvm::Expected<Problem> templates::makeProblem(llvm::StringRef kernel,
                                               llvm::StringRef params,
                                               llvm::ArrayRef<int64_t> dims) {
  Problem p;
  auto desc = Registry::global().lookup(kernel);
  if (!desc)
    return desc.takeError();
  p.desc = *desc;
  auto values = p.desc->parseParams(params);
  if (!values)
    return values.takeError();
  p.params = *values;
  auto sig = p.desc->signature(p.params);
  if (!sig)
    return sig.takeError();
  auto shape = shapeFromDims(**sig, dims);
  if (!shape)
    return shape.takeError();
  p.shape = *shape;
  auto def = p.desc->dependsOnCols
                 ? p.desc->definition(p.params, p.shape.cols,
                                      p.shape.totalRows())
                 : std::move(sig);
  if (!def)
    return def.takeError();
  p.def = *def;
  auto scalars = defaultScalars(*p.desc, *p.def, p.shape, &p.unsetScalars);
  if (!scalars)
    return scalars.takeError();
  p.scalars = std::move(*scalars);
  return p;
}

llvm::Expected<Problem> templates::makeProblem(llvm::StringRef kernel,
                                               llvm::StringRef params,
                                               llvm::StringRef shapeText) {
  auto dims = parseDims(shapeText);
  if (!dims)
    return dims.takeError();
  return makeProblem(kernel, params, *dims);
}

llvm::Expected<ProblemShape> templates::parseShape(llvm::StringRef kernel,
                                                   llvm::StringRef text) {
  auto p = makeProblem(kernel, "", text);
  if (!p)
    return p.takeError();
  return p->shape;
}

static void storeValue(dsl::DType t, uint8_t *p, float v) {
  switch (t) {
  case dsl::DType::F32:
    std::memcpy(p, &v, 4);
    return;
  case dsl::DType::BF16: {
    uint16_t h = dsl::floatToBf16Bits(v);
    std::memcpy(p, &h, 2);
    return;
  }
  case dsl::DType::F16: {
    uint16_t h = dsl::floatToHalfBits(v);
    std::memcpy(p, &h, 2);
    return;
  }
  case dsl::DType::F8E4M3FN:
    *p = dsl::floatToF8E4M3FNBits(v);
    return;
  case dsl::DType::F8E5M2:
    *p = dsl::floatToF8E5M2Bits(v);
    return;
  case dsl::DType::I8: // normal(0, 1) * 32: most of int8's range
    *p = uint8_t(dsl::floatToI8(v * 32.0f));
    return;
  default:
    return;
  }
}

/// Rows of operand `o` in a group of `rows` rows.
static int64_t operandRows(const dsl::OperandDecl &o, int64_t rows,
                           int64_t rowsPerBatch) {
  if (o.map == dsl::IndexMap::PerColumn || o.map == dsl::IndexMap::Vector)
    return 1;
  if (o.map == dsl::IndexMap::PerBatch)
    return (rows + rowsPerBatch - 1) / rowsPerBatch;
  return rows;
}

/// An error when the problem's buffers would total over kMaxHostBytes.
static llvm::Error checkHostBytes(const dsl::KernelDef &def,
                                  const ProblemShape &shape) {
  uint64_t total = 0;
  for (int64_t groupRows : shape.groupRows)
    for (const dsl::OperandDecl &o : def.operands) {
      uint64_t n;
      uint64_t rows = uint64_t(operandRows(o, groupRows, shape.rowsPerBatch));
      if (__builtin_mul_overflow(rows, uint64_t(shape.cols), &n) ||
          __builtin_mul_overflow(n, uint64_t(dsl::dtypeBytes(o.dtype)), &n) ||
          __builtin_add_overflow(total, n, &total) || total > kMaxHostBytes)
        return shapeError(llvm::formatv(
            "{0} at shape {1}: the host buffers would exceed {2} GiB",
            def.name, shape.str(), kMaxHostBytes >> 30));
    }
  return llvm::Error::success();
}

llvm::Expected<HostProblem> HostProblem::make(const dsl::KernelDef &def,
                                              const ProblemShape &shape,
                                              uint64_t seed,
                                              std::vector<float> scalars,
                                              float amplitude) {
  // The interpreter runs only shapes the program admits, as a launch does.
  if (llvm::Error e = dsl::checkColumnGuard(def, shape.cols))
    return shapeError(llvm::toString(std::move(e)));
  if (int(shape.groupRows.size()) != def.groups)
    return shapeError(llvm::formatv("'{0}' serves {1} groups; the shape has {2}",
                                    def.name, def.groups,
                                    shape.groupRows.size()));
  if (scalars.size() != def.scalars.size())
    return shapeError(llvm::formatv("'{0}' takes {1} scalars; {2} given",
                                    def.name, def.scalars.size(),
                                    scalars.size()));
  if (llvm::Error e = checkHostBytes(def, shape))
    return std::move(e);
  HostProblem hp;
  hp.shape = shape;
  dsl::Binding &b = hp.binding;
  b.cols = shape.cols;
  b.groupRows = shape.groupRows;
  b.dims.assign(def.dims.size(), shape.rowsPerBatch);
  b.scalars = std::move(scalars);

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  hp.storage.resize(def.groups);
  b.tensors.resize(def.groups);
  for (int g = 0; g < def.groups; ++g) {
    for (const dsl::OperandDecl &o : def.operands) {
      int64_t rows = operandRows(o, shape.groupRows[g], shape.rowsPerBatch);
      unsigned eb = dsl::dtypeBytes(o.dtype);
      const int64_t cols = dsl::storedCols(o, shape.cols, b.dims);
      std::vector<uint8_t> buf(size_t(rows * cols) * eb);
      // Per-batch modulation and gates are small in real models; weights
      // (per column or channel) are O(1). Timing depends on it where the
      // exact SiLU's fallback rate does (docs/exact-silu.md).
      bool small = o.map == dsl::IndexMap::PerBatch;
      float amp = small ? 0.1f * amplitude : amplitude;
      for (size_t e = 0; e < size_t(rows * cols); ++e) {
        if (o.dtype == dsl::DType::I32) { // per-row indices: a column each
          int32_t c = int32_t(rng() % uint64_t(shape.cols));
          std::memcpy(buf.data() + e * eb, &c, 4);
          continue;
        }
        float v = o.isOutput ? NAN : amp * normal(rng);
        if (!o.isOutput && v == 0.0f)
          v = amp * 0.5f; // never all zeros
        storeValue(o.dtype, buf.data() + e * eb, v);
      }
      if (o.isOutput) // poison: all-ones bytes are NaN in every float dtype
        std::fill(buf.begin(), buf.end(), 0xFF);
      dsl::HostTensor t;
      t.dtype = o.dtype;
      t.data = buf.data();
      t.rows = rows;
      t.rowStride = cols;
      if (o.layout == dsl::Layout::ChannelsFirst) { // N C S, S = D*H*W
        t.spatial = rows / shape.dims[0];
        t.rowStride = shape.cols * t.spatial;
      }
      hp.storage[g].push_back(std::move(buf));
      b.tensors[g].push_back(t);
    }
  }
  return hp;
}

HostProblem HostProblem::clone() const {
  HostProblem c = *this;
  for (size_t g = 0; g < c.storage.size(); ++g)
    for (size_t i = 0; i < c.storage[g].size(); ++i)
      c.binding.tensors[g][i].data = c.storage[g][i].data();
  return c;
}

llvm::Expected<std::vector<float>>
templates::defaultScalars(const KernelDescriptor &desc,
                          const dsl::KernelDef &def,
                          const ProblemShape &shape,
                          std::vector<std::string> *unset) {
  std::vector<float> s;
  for (const dsl::ScalarDecl &d : def.scalars) {
    if (auto it = desc.shapeScalars.find(d.name); it != desc.shapeScalars.end())
      s.push_back(it->second(shape));
    else if (d.defaultValue)
      s.push_back(*d.defaultValue);
    else if (unset) {
      s.push_back(NAN);
      unset->push_back(d.name);
    } else
      return shapeError(desc.name + ": scalar '" + d.name +
                        "' declares no default; give its value");
  }
  return s;
}
