//===- templates/Problem.cpp - Shapes and host data for templates ---------===//

#include "templates/Problem.h"

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

static bool isChannelsLast(llvm::StringRef tmpl) {
  return tmpl == "conv_bias" || tmpl == "wan_rmsnorm_silu";
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

llvm::Expected<ProblemShape>
templates::shapeFromDims(llvm::StringRef tmpl, llvm::ArrayRef<int64_t> dims) {
  if (!findTemplate(tmpl))
    return shapeError(llvm::formatv("unknown template '{0}'", tmpl));
  ProblemShape s;
  s.dims.assign(dims.begin(), dims.end());
  for (int64_t d : dims)
    if (d < 1)
      return shapeError(llvm::formatv("shape {0}: dims must be positive",
                                      s.str()));
  auto product = [&](size_t from, size_t to) {
    int64_t n = 1;
    for (size_t i = from; i < to; ++i)
      n *= s.dims[i];
    return n;
  };
  if (isChannelsLast(tmpl)) {
    if (s.dims.size() != 4 && s.dims.size() != 5)
      return shapeError(llvm::formatv(
          "{0}: shape is N,C,H,W or N,C,D,H,W; found {1} dims", tmpl,
          s.dims.size()));
    s.cols = s.dims[1];
    s.groupRows = {s.dims[0] * product(2, s.dims.size())};
    return s;
  }
  if (s.dims.size() < 2)
    return shapeError(llvm::formatv(
        "{0}: shape is B,S,D (or any ...,D); found {1} dim(s)", tmpl,
        s.dims.size()));
  s.cols = s.dims.back();
  int64_t rows = product(0, s.dims.size() - 1);
  if (tmpl == "qk_layernorm") {
    s.groupRows = {rows, rows}; // q and k
    return s;
  }
  // The first dim is the batch: per-batch operands have one row per batch.
  s.rowsPerBatch = s.dims.size() >= 3 ? rows / s.dims[0] : rows;
  s.groupRows = {rows};
  return s;
}

llvm::Expected<ProblemShape> templates::parseShape(llvm::StringRef tmpl,
                                                   llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',');
  std::vector<int64_t> dims;
  for (llvm::StringRef p : parts) {
    int64_t v;
    if (p.trim().getAsInteger(10, v) || v < 1)
      return shapeError(llvm::formatv("shape '{0}': '{1}' is not a positive "
                                      "integer",
                                      text, p));
    dims.push_back(v);
  }
  return shapeFromDims(tmpl, dims);
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
  default:
    return;
  }
}

llvm::Expected<HostProblem> HostProblem::make(const dsl::KernelDef &def,
                                              const ProblemShape &shape,
                                              uint64_t seed, float amplitude) {
  if (int(shape.groupRows.size()) != def.groups)
    return shapeError(llvm::formatv("'{0}' serves {1} groups; the shape has {2}",
                                    def.name, def.groups,
                                    shape.groupRows.size()));
  HostProblem hp;
  hp.shape = shape;
  dsl::Binding &b = hp.binding;
  b.cols = shape.cols;
  b.groupRows = shape.groupRows;
  for (size_t i = 0; i < def.dims.size(); ++i)
    b.dims.push_back(shape.rowsPerBatch);
  b.scalars = defaultScalars(def, shape);

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  hp.storage.resize(def.groups);
  b.tensors.resize(def.groups);
  for (int g = 0; g < def.groups; ++g) {
    for (size_t i = 0; i < def.operands.size(); ++i) {
      const dsl::OperandDecl &o = def.operands[i];
      int64_t rows = shape.groupRows[g];
      if (o.map == dsl::IndexMap::PerColumn)
        rows = 1;
      else if (o.map == dsl::IndexMap::PerBatch)
        rows = (rows + shape.rowsPerBatch - 1) / shape.rowsPerBatch;
      unsigned eb = dsl::dtypeBytes(o.dtype);
      std::vector<uint8_t> buf(size_t(rows * shape.cols) * eb);
      // Modulation and gate operands are small in real models.
      bool small = o.map != dsl::IndexMap::PerElement;
      float amp = small ? 0.1f * amplitude : amplitude;
      for (size_t e = 0; e < size_t(rows * shape.cols); ++e) {
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
      t.rowStride = shape.cols;
      hp.storage[g].push_back(std::move(buf));
      b.tensors.resize(def.groups);
      b.tensors[g].push_back(t);
    }
  }
  return hp;
}

std::vector<float> templates::defaultScalars(const dsl::KernelDef &def,
                                             const ProblemShape &shape) {
  std::vector<float> s;
  for (const dsl::ScalarDecl &d : def.scalars) {
    if (d.name == "scale")
      s.push_back(float(std::sqrt(double(shape.cols))));
    else
      s.push_back(1e-6f); // eps
  }
  return s;
}

std::vector<std::string> templates::seedShapes(llvm::StringRef tmpl) {
  if (tmpl == "ln_modulate")
    return {"1,4096,4096", "1,4359,4096", "2,1024,2240", "1,1,128"};
  if (tmpl == "qk_layernorm")
    return {"1,4360,32,128"};
  if (tmpl == "conv_bias")
    return {"1,96,4,480,832", "1,192,4,240,416", "1,384,2,120,208",
            "1,384,1,60,104", "4,96,480,832"};
  if (tmpl == "residual_gate")
    return {"1,4096,4096"};
  if (tmpl == "rmsnorm_modulate")
    return {"1,4216,4096", "1,4096,4096", "2,1140,4096", "1,128,2048"};
  if (tmpl == "wan_rmsnorm_silu")
    return {"1,96,4,480,832"};
  return {};
}

static llvm::Expected<dsl::DType> parseDType(llvm::StringRef s) {
  if (s == "bf16") return dsl::DType::BF16;
  if (s == "f16" || s == "fp16") return dsl::DType::F16;
  if (s == "f32" || s == "fp32") return dsl::DType::F32;
  return shapeError(llvm::formatv("unknown dtype '{0}' (bf16, f16, f32)", s));
}

llvm::Error templates::parseTemplateArgs(llvm::ArrayRef<std::string> args,
                                         TemplateArgs &out,
                                         std::vector<std::string> &rest) {
  bool biasGiven = false;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef a = args[i];
    auto value = [&]() -> llvm::Expected<llvm::StringRef> {
      if (i + 1 >= args.size())
        return shapeError(llvm::formatv("{0} needs a value", a));
      return llvm::StringRef(args[++i]);
    };
    if (a == "--dtype" || a == "--bias-dtype") {
      auto v = value();
      if (!v)
        return v.takeError();
      auto t = parseDType(*v);
      if (!t)
        return t.takeError();
      (a == "--dtype" ? out.dtype : out.biasDtype) = *t;
      biasGiven |= a == "--bias-dtype";
    } else if (a == "--residual") {
      out.residual = true;
    } else if (a == "--gate") {
      auto v = value();
      if (!v)
        return v.takeError();
      if (*v == "full")
        out.gate = GateMap::Full;
      else if (*v == "per_batch")
        out.gate = GateMap::PerBatch;
      else if (*v == "global")
        out.gate = GateMap::Global;
      else
        return shapeError(llvm::formatv(
            "unknown gate '{0}' (full, per_batch, global)", *v));
    } else {
      rest.push_back(args[i]);
    }
  }
  if (!biasGiven)
    out.biasDtype = out.dtype;
  return llvm::Error::success();
}

llvm::StringRef templates::templateArgsHelp() {
  return "  --dtype bf16|f16|f32       tensor dtype (default bf16)\n"
         "  --bias-dtype bf16|f16|f32  conv_bias: bias dtype (default: x's)\n"
         "  --residual                 conv_bias: add the residual h\n"
         "  --gate full|per_batch|global  residual_gate: gate broadcast\n";
}
