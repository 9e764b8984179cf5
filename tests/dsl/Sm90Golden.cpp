//===- tests/dsl/Sm90Golden.cpp - stock templates vs H200 outputs ---------===//

#include "tests/dsl/Sm90Golden.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace bitfold;
using namespace bitfold::testing;
using dsl::DType;

const std::vector<GoldenCase> &bitfold::testing::goldenCases() {
  static const std::vector<GoldenCase> cases = [] {
    auto make = [](std::string name, std::string tmpl, std::string params,
                   std::vector<int64_t> dims, uint64_t seed) {
      GoldenCase c{std::move(name), std::move(tmpl), params, {}, dims, seed};
      c.args.cols = tmpl == "qk_layernorm" || dims.size() < 2 ? dims.back()
                    : (tmpl == "conv_bias" || tmpl == "wan_rmsnorm_silu")
                        ? dims[1]
                        : dims.back();
      c.args.residual = params.find("residual=1") != std::string::npos;
      if (params.find("per_batch") != std::string::npos)
        c.args.gate = templates::GateMap::PerBatch;
      if (params.find("global") != std::string::npos)
        c.args.gate = templates::GateMap::Global;
      if (params.find("bias_dtype=f32") != std::string::npos)
        c.args.biasDtype = DType::F32;
      return c;
    };
    return std::vector<GoldenCase>{
        make("ln_modulate_2x3x520", "ln_modulate", "", {2, 3, 520}, 11),
        make("ln_modulate_1x2x4096", "ln_modulate", "", {1, 2, 4096}, 12),
        make("qk_layernorm_1x3x4x128", "qk_layernorm", "", {1, 3, 4, 128}, 13),
        make("conv_bias_1x8x2x3x4", "conv_bias", "", {1, 8, 2, 3, 4}, 14),
        make("conv_bias_res_1x8x3x5", "conv_bias", "residual=1", {1, 8, 3, 5},
             15),
        make("conv_bias_f32bias_1x8x3x5", "conv_bias", "bias_dtype=f32",
             {1, 8, 3, 5}, 16),
        make("residual_gate_full_1x4x256", "residual_gate", "gate=full",
             {1, 4, 256}, 17),
        make("residual_gate_batch_2x3x256", "residual_gate", "gate=per_batch",
             {2, 3, 256}, 18),
        make("residual_gate_global_1x4x256", "residual_gate", "gate=global",
             {1, 4, 256}, 19),
        make("rmsnorm_modulate_1x4x2048", "rmsnorm_modulate", "", {1, 4, 2048},
             20),
        make("rmsnorm_modulate_2x2x4096", "rmsnorm_modulate", "",
             {2, 2, 4096}, 21),
    };
  }();
  return cases;
}

namespace {

/// The operand's DLPack shape and strides as `bitfold run` passes them.
void dlShape(const dsl::OperandDecl &op, const std::vector<int64_t> &dims,
             int64_t batches, int64_t cols, GoldenOperand &o) {
  if (op.map == dsl::IndexMap::PerColumn) {
    o.shape = {cols};
  } else if (op.map == dsl::IndexMap::PerBatch) {
    o.shape = {batches, cols};
  } else {
    o.shape = dims;
  }
  const int n = int(o.shape.size());
  o.strides.assign(n, 1);
  if (op.map == dsl::IndexMap::PerElement &&
      op.layout == dsl::Layout::ChannelsLast) {
    int64_t acc = cols;
    for (int d = n - 1; d >= 2; --d) {
      o.strides[d] = acc;
      acc *= o.shape[d];
    }
    o.strides[0] = acc;
    return;
  }
  for (int d = n - 2; d >= 0; --d)
    o.strides[d] = o.strides[d + 1] * o.shape[d + 1];
}

void fillInput(std::mt19937_64 &rng, GoldenOperand &o, int64_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t e = 0; e < count; ++e) {
    float v = normal(rng);
    if (dsl::roundTo(o.dtype, v) == 0.0f)
      v = 1.0f; // never zero
    if (o.dtype == DType::F32) {
      std::memcpy(&o.bytes[e * 4], &v, 4);
      continue;
    }
    uint16_t h = o.dtype == DType::BF16 ? dsl::floatToBf16Bits(v)
                                        : dsl::floatToHalfBits(v);
    std::memcpy(&o.bytes[e * 2], &h, 2);
  }
}

} // namespace

llvm::Expected<GoldenProblem>
bitfold::testing::makeGoldenProblem(const GoldenCase &c) {
  llvm::Expected<templates::KernelDefRef> def =
      templates::buildStock(c.tmpl, c.args);
  if (!def)
    return def.takeError();
  llvm::Expected<templates::ProblemShape> shape =
      templates::shapeFromDims(**def, c.dims);
  if (!shape)
    return shape.takeError();
  GoldenProblem p;
  p.def = *def;
  p.cols = shape->cols;
  p.rows = shape->groupRows.front();
  p.rowsPerBatch = shape->rowsPerBatch;
  const int64_t batches = p.rows / p.rowsPerBatch;
  std::mt19937_64 rng(c.seed);
  for (int g = 0; g < p.def->groups; ++g)
    for (const dsl::OperandDecl &op : p.def->operands) {
      GoldenOperand o;
      o.name = op.name;
      o.dtype = op.dtype;
      o.isOutput = op.isOutput;
      o.rows = op.map == dsl::IndexMap::PerColumn  ? 1
               : op.map == dsl::IndexMap::PerBatch ? batches
                                                   : p.rows;
      dlShape(op, c.dims, batches, p.cols, o);
      const int64_t count = o.rows * p.cols;
      o.bytes.assign(size_t(count) * dsl::dtypeBytes(op.dtype), char(0xFF));
      if (!op.isOutput)
        fillInput(rng, o, count);
      p.operands.push_back(std::move(o));
    }
  for (const dsl::ScalarDecl &s : p.def->scalars)
    p.scalars.push_back(s.name == "eps"     ? 1e-6f
                        : s.name == "scale" ? float(std::sqrt(double(p.cols)))
                                            : 1.0f);
  return p;
}

dsl::Binding GoldenProblem::binding() {
  dsl::Binding b;
  b.cols = cols;
  b.dims.assign(def->dims.size(), rowsPerBatch);
  b.scalars = scalars;
  b.tensors.resize(def->groups);
  const size_t nOps = def->operands.size();
  for (int g = 0; g < def->groups; ++g) {
    b.groupRows.push_back(rows);
    for (size_t i = 0; i < nOps; ++i) {
      GoldenOperand &o = operands[g * nOps + i];
      dsl::HostTensor h;
      h.dtype = o.dtype;
      h.data = o.bytes.data();
      h.rows = o.rows;
      h.rowStride = cols;
      b.tensors[g].push_back(h);
    }
  }
  return b;
}

std::vector<char> bitfold::testing::concatBytes(const GoldenProblem &p,
                                                bool outputs) {
  std::vector<char> all;
  for (const GoldenOperand &o : p.operands)
    if (o.isOutput == outputs)
      all.insert(all.end(), o.bytes.begin(), o.bytes.end());
  return all;
}

std::string bitfold::testing::manifestJson(const GoldenCase &c,
                                           const GoldenProblem &p) {
  llvm::json::Array ops;
  for (const GoldenOperand &o : p.operands)
    ops.push_back(llvm::json::Object{
        {"name", o.name},
        {"dtype", dsl::dtypeName(o.dtype)},
        {"output", o.isOutput},
        {"shape", llvm::json::Array(o.shape)},
        {"strides", llvm::json::Array(o.strides)},
        {"bytes", int64_t(o.bytes.size())}});
  llvm::json::Array scalars;
  for (float s : p.scalars)
    scalars.push_back(double(s));
  llvm::json::Object m{{"case", c.name},       {"template", c.tmpl},
                       {"params", c.params},   {"seed", int64_t(c.seed)},
                       {"scalars", std::move(scalars)},
                       {"operands", std::move(ops)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(m))) << "\n";
  return text;
}
