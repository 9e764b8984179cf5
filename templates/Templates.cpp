//===- templates/Templates.cpp - The stock kernels in the DSL -------------===//
//
// Each function reads like the reference's arithmetic in docs/numerics.md: every
// rounding to the tensor dtype is written as rnd(...).
//
//===----------------------------------------------------------------------===//

#include "templates/Templates.h"

#include "keys/Errors.h"

#include "templates/AtenNorms.h"
#include "templates/Problem.h"

#include "dsl/Folds.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace bitfold;
using namespace bitfold::dsl;
using namespace bitfold::templates;

namespace {

bool isHalf(DType t) { return t == DType::BF16 || t == DType::F16; }

/// aten's LayerNorm statistics: (mean, rstd) of the row in aten's order.
std::pair<Expr, Expr> atenLayerNormStats(RowProgram &p, const Expr &xf,
                                         const Expr &eps) {
  State st = p.fold(xf, folds::aten_vectorized_layer_norm(),
                    folds::welford_aten());
  Expr var = div_rn(st[2], p.cols().to_f32());
  return {st[1], rsqrt_cuda(var + eps)};
}

} // namespace

llvm::Expected<KernelDefRef> templates::lnModulate(DType dt) {
  if (!isHalf(dt) && dt != DType::F32)
    return keys::usageError("ln_modulate: dtype must be bf16, f16 or f32");
  RowProgram p("ln_modulate");
  Dim S = p.dim("S");
  Expr x = p.input("x", dt, Layout::RowMajor).row();
  Expr scale = p.input("scale", dt, Layout::RowMajor, IndexMap::PerBatch, S).row();
  Expr shift = p.input("shift", dt, Layout::RowMajor, IndexMap::PerBatch, S).row();
  Expr eps = p.scalar("eps", 1e-6f);
  // aten takes vectorized_layer_norm_kernel only for D % 4 == 0, D <= 2^24.
  p.guardCols(4, 4, int64_t(1) << 24);

  Expr xf = x.to_f32();
  auto [mean, rstd] = atenLayerNormStats(p, xf, eps);
  Expr y = round(dt, rstd * (xf - mean));
  Expr onePlus = round(dt, Expr(1.0f) + scale);
  Expr out = round(dt, round(dt, y * onePlus) + shift);
  p.output("y", dt, Layout::RowMajor, out);
  // ...and only when x and y are aligned to its 4-element vectors.
  p.guardAlign("x", 4);
  p.guardAlign("y", 4);
  return p.build();
}

llvm::Expected<KernelDefRef> templates::qkLayerNorm(DType dt) {
  if (!isHalf(dt) && dt != DType::F32)
    return keys::usageError("qk_layernorm: dtype must be bf16, f16 or f32");
  RowProgram p("qk_layernorm");
  p.groups(2); // q and k in one launch.
  Expr x = p.input("x", dt, Layout::RowMajor).row();
  Expr eps = p.scalar("eps", 1e-6f);
  // One aten block per head row: D % 4 == 0 and D <= 128 keeps every vector
  // in warp 0 (warps 1..3 enter the fold empty).
  p.guardCols(4, 4, 128);
  Expr xf = x.to_f32();
  auto [mean, rstd] = atenLayerNormStats(p, xf, eps);
  p.output("y", dt, Layout::RowMajor, round(dt, rstd * (xf - mean)));
  p.guardAlign("x", 4);
  p.guardAlign("y", 4);
  return p.build();
}

llvm::Expected<KernelDefRef> templates::convBias(DType dt, DType biasDt,
                                                 bool residual, Layout layout,
                                                 std::optional<Layout> hLayout) {
  const Layout residualLayout = hLayout.value_or(layout);
  if (biasDt != dt && biasDt != DType::F32)
    return keys::usageError(llvm::formatv(
        "conv_bias: bias must be {0} (x's dtype) or f32, found {1}",
        dtypeName(dt), dtypeName(biasDt)));
  if (residualLayout != layout && (!residual || layout != Layout::ChannelsLast))
    return keys::usageError(
        "conv_bias: residual_layout=channels_first needs residual=1 and "
        "layout=channels_last (a channels-last x, a contiguous residual)");
  RowProgram p(residual ? "conv_bias_residual" : "conv_bias");
  Expr x = p.input("x", dt, layout).row();
  Expr bias = p.input("bias", biasDt, Layout::RowMajor, IndexMap::PerColumn).row();
  // Autocast casts an f32 bias to x's dtype before the conv.
  Expr b = round(dt, bias);
  Expr y = round(dt, x + b);
  if (residual) {
    Expr h = p.input("h", dt, residualLayout).row();
    y = round(dt, y + h);
  }
  p.guardCols(1, 2, int64_t(1) << 31); // C > 1
  p.output("y", dt, layout, y);
  return p.build();
}

llvm::Expected<KernelDefRef> templates::residualGate(DType dt, GateMap gate) {
  static const char *names[] = {"residual_gate", "residual_gate_per_batch",
                                "residual_gate_global"};
  RowProgram p(names[int(gate)]);
  Expr r = p.input("residual", dt, Layout::RowMajor).row();
  Expr u = p.input("update", dt, Layout::RowMajor).row();
  Expr g;
  switch (gate) {
  case GateMap::Full:
    g = p.input("gate", dt, Layout::RowMajor).row();
    break;
  case GateMap::PerBatch:
    g = p.input("gate", dt, Layout::RowMajor, IndexMap::PerBatch, p.dim("S"))
            .row();
    break;
  case GateMap::Global:
    g = p.input("gate", dt, Layout::RowMajor, IndexMap::PerColumn).row();
    break;
  }
  p.output("y", dt, Layout::RowMajor, round(dt, r + round(dt, u * g)));
  return p.build();
}

llvm::Expected<KernelDefRef> templates::rmsNormModulate(int tpr, DType dt) {
  if (tpr != 32 && tpr != 64)
    return keys::usageError(llvm::formatv(
        "rmsnorm_modulate: threads per row must be 32 or 64, found {0}", tpr));
  RowProgram p("rmsnorm_modulate");
  Dim S = p.dim("S");
  Expr x = p.input("x", dt, Layout::RowMajor).row();
  Expr w = p.input("weight", dt, Layout::RowMajor, IndexMap::PerColumn).row();
  Expr scale = p.input("scale", dt, Layout::RowMajor, IndexMap::PerBatch, S).row();
  Expr shift = p.input("shift", dt, Layout::RowMajor, IndexMap::PerBatch, S).row();
  Expr eps = p.scalar("eps", 1e-6f);
  p.guardCols(64 * tpr, 64 * tpr, 64 * tpr);

  Expr xf = x.to_f32();
  State ss = p.fold(xf, folds::flashinfer_rmsnorm(tpr), folds::sum_of_squares());
  Expr rstd = rsqrt_approx(div_rn(ss[0], p.cols().to_f32()) + eps);
  Expr y = round(dt, (xf * rstd) * (w + Expr(0.0f)));
  Expr out = round(dt, round(dt, y * round(dt, Expr(1.0f) + scale)) + shift);
  p.output("y", dt, Layout::RowMajor, out);
  return p.build();
}

namespace {

ParamSpec dtypeParam() {
  return {"dtype", ParamSpec::Kind::DType, {}, "bf16", "", "tensor dtype"};
}

/// Pixel-row kernels: x (and y, h) channels-last or channels-first NC[D]HW.
ParamSpec layoutParam() {
  return {"layout",
          ParamSpec::Kind::Choice,
          {"channels_last", "channels_first"},
          "channels_last",
          "",
          "memory layout of the N,C,[D,]H,W tensors"};
}

Layout layoutOf(const ParamValues &v) {
  return v.choice("layout") == "channels_first" ? Layout::ChannelsFirst
                                                : Layout::ChannelsLast;
}

KernelDescriptor describe(std::string name, std::string summary,
                          std::vector<ParamSpec> params,
                          std::vector<std::string> seeds) {
  KernelDescriptor d;
  d.name = std::move(name);
  d.summary = std::move(summary);
  d.params = std::move(params);
  d.seedShapes = std::move(seeds);
  return d;
}

KernelDescriptor lnModulateKernel() {
  KernelDescriptor d = describe(
      "ln_modulate", "LayerNorm (aten order) + adaLN modulate", {dtypeParam()},
      {"1,4096,4096", "1,4359,4096", "2,1024,2240", "1,1,128"});
  d.build = [](const ParamValues &v, int64_t) {
    return lnModulate(v.dtype("dtype"));
  };
  return d;
}

KernelDescriptor qkLayerNormKernel() {
  KernelDescriptor d = describe(
      "qk_layernorm", "per-head q/k LayerNorm, one launch (aten order)",
      {dtypeParam()}, {"1,4360,32,128"});
  d.build = [](const ParamValues &v, int64_t) {
    return qkLayerNorm(v.dtype("dtype"));
  };
  return d;
}

KernelDescriptor convBiasKernel() {
  KernelDescriptor d = describe(
      "conv_bias", "conv bias epilogue, optional residual (channels-last)",
      {dtypeParam(),
       {"bias_dtype", ParamSpec::Kind::DType, {}, "", "dtype", "bias dtype"},
       {"residual", ParamSpec::Kind::Flag, {}, "0", "", "add the residual h"},
       layoutParam(),
       {"residual_layout", ParamSpec::Kind::Choice, {"same", "channels_first"},
        "same", "",
        "channels_first: h contiguous NC[D]HW (or frames-major) under a "
        "channels-last x and y (read S apart)"}},
      {"1,96,4,480,832", "1,192,4,240,416", "1,384,2,120,208",
       "1,384,1,60,104", "4,96,480,832"});
  d.build = [](const ParamValues &v, int64_t) {
    const Layout layout = layoutOf(v);
    return convBias(v.dtype("dtype"), v.dtype("bias_dtype"),
                    v.flag("residual"), layout,
                    v.choice("residual_layout") == "channels_first"
                        ? std::optional(Layout::ChannelsFirst)
                        : std::nullopt);
  };
  return d;
}

KernelDescriptor residualGateKernel() {
  KernelDescriptor d = describe(
      "residual_gate", "residual + update * gate",
      {dtypeParam(),
       {"gate", ParamSpec::Kind::Choice, {"full", "per_batch", "global"},
        "full", "", "gate broadcast"}},
      {"1,4096,4096"});
  d.build = [](const ParamValues &v, int64_t) {
    llvm::StringRef g = v.choice("gate");
    GateMap map = g == "per_batch" ? GateMap::PerBatch
                  : g == "global"  ? GateMap::Global
                                   : GateMap::Full;
    return residualGate(v.dtype("dtype"), map);
  };
  return d;
}

KernelDescriptor rmsNormModulateKernel() {
  KernelDescriptor d = describe(
      "rmsnorm_modulate", "RMSNorm (flashinfer order) + scale/shift",
      {dtypeParam()},
      {"1,4216,4096", "1,4096,4096", "2,1140,4096", "1,128,2048"});
  d.dependsOnCols = true;
  d.build = [](const ParamValues &v,
               int64_t cols) -> llvm::Expected<KernelDefRef> {
    if (cols == 0) // the signature: any D the order is defined for
      cols = 2048;
    if (cols != 2048 && cols != 4096)
      return keys::usageError(llvm::formatv(
          "rmsnorm_modulate: flashinfer's order is defined here for D = "
          "64 * threads per row (2048 or 4096), found D = {0}",
          cols));
    return rmsNormModulate(int(cols / 64), v.dtype("dtype"));
  };
  return d;
}

/// aten's generic reduction order depends on C and, below 16 rows, on the
/// row class: one definition per (column count, row class).
KernelDescriptor wanRmsNormSiluKernel() {
  KernelDescriptor d = describe(
      "wan_rmsnorm_silu",
      "Wan VAE RMSNorm + SiLU (aten's reduction order; form x: SGLang, f32: "
      "diffusers)",
      {dtypeParam(),
       {"form", ParamSpec::Kind::Choice, {"x", "f32"}, "x", "",
        "norm in x's dtype (SGLang) or in f32 (diffusers WanRMS_norm)"},
       {"gamma", ParamSpec::Kind::DType, {}, "", "dtype",
        "gamma and bias dtype (f32: the output is f32)"},
       {"bias", ParamSpec::Kind::Flag, {}, "1", "",
        "bias tensor (0: the python float 0.)"},
       {"conv_bias", ParamSpec::Kind::Flag, {}, "0", "",
        "add the conv bias to x first (x.add_(conv_bias))"},
       layoutParam(),
       {"outvec", ParamSpec::Kind::Choice, {"4", "2", "1"}, "4", "",
        "channels_first: aten's output_vec_size, 4 if D*H*W % 4 == 0, 2 if "
        "% 2 == 0, else 1 (docs/aten-reduce.md section 9)"}},
      {"1,96,4,480,832", "1,192,4,240,416", "1,384,2,120,208"});
  d.dependsOnCols = true;
  d.buildForRows = [](const ParamValues &v, int64_t cols, int64_t rows) {
    WanRmsNormSiluOptions o;
    o.dtype = v.dtype("dtype");
    o.form = v.choice("form") == "f32" ? WanNormForm::NormInF32
                                       : WanNormForm::NormInXDtype;
    o.gammaDtype = v.dtype("gamma");
    o.biasTensor = v.flag("bias");
    o.convBias = v.flag("conv_bias");
    o.cols = cols ? cols : 96; // the signature: any C's
    o.layout = layoutOf(v);
    o.outputVec = int(v.choice("outvec")[0] - '0');
    // `rows` is a class (classifyRows). Channels-first from 32 * outvec
    // pixels on: the order aten takes for every count from its row range
    // on (built for a large count; the range says where it starts).
    o.rows = rows;
    if (o.layout == Layout::ChannelsFirst && rows >= 32 * o.outputVec)
      o.rows = int64_t(1) << 30;
    return atenWanRmsNormSilu(o);
  };
  d.classifyRows = [](const ParamValues &v, int64_t rows) {
    if (layoutOf(v) != Layout::ChannelsFirst)
      return dsl::folds::aten_reduce_row_class(rows);
    return dsl::folds::aten_reduce_outer_row_class(
        rows, int(v.choice("outvec")[0] - '0'));
  };
  d.build = [f = d.buildForRows](const ParamValues &v, int64_t cols) {
    return f(v, cols, int64_t(1) << 30); // every large row count's
  };
  // C ** 0.5, as the float opmath sees it.
  d.shapeScalars["scale"] = [](const ProblemShape &s) {
    return float(std::sqrt(double(s.cols)));
  };
  return d;
}

KernelDescriptor hfRmsNormKernel() {
  KernelDescriptor d = describe(
      "hf_rmsnorm",
      "HF-style RMSNorm (aten's mean order), optional residual and modulate",
      {dtypeParam(),
       {"weight", ParamSpec::Kind::DType, {}, "", "dtype",
        "weight dtype (f32: the output is f32)"},
       {"residual", ParamSpec::Kind::Flag, {}, "0", "",
        "x = x + residual first, also written (sum)"},
       {"modulate", ParamSpec::Kind::Flag, {}, "0", "",
        "then y * (1 + scale) + shift, per batch"}},
      {"1,4096,4096", "8,1024,5120", "1,1024,2048", "1,256,8192"});
  d.dependsOnCols = true;
  d.buildForRows = [](const ParamValues &v, int64_t cols, int64_t rows) {
    HfRmsNormOptions o;
    o.dtype = v.dtype("dtype");
    o.weightDtype = v.dtype("weight");
    o.residual = v.flag("residual");
    o.modulate = v.flag("modulate");
    o.cols = cols ? cols : 4096; // the signature: any D's
    o.rows = rows;
    return hfRmsNorm(o);
  };
  d.build = [f = d.buildForRows](const ParamValues &v, int64_t cols) {
    return f(v, cols, 16);
  };
  return d;
}

} // namespace

std::vector<KernelDescriptor> templates::stockKernels() {
  return {lnModulateKernel(),      qkLayerNormKernel(),
          convBiasKernel(),        residualGateKernel(),
          rmsNormModulateKernel(), wanRmsNormSiluKernel(),
          hfRmsNormKernel()};
}

llvm::Expected<KernelDefRef> templates::buildStock(llvm::StringRef name,
                                                  const TemplateArgs &args) {
  auto desc = Registry::global().lookup(name);
  if (!desc)
    return desc.takeError();
  static const char *gates[] = {"full", "per_batch", "global"};
  std::string text = "dtype=" + dtypeName(args.dtype).str();
  for (const ParamSpec &p : (*desc)->params) {
    if (p.name == "bias_dtype")
      text += ",bias_dtype=" + dtypeName(args.biasDtype.value_or(args.dtype)).str();
    else if (p.name == "residual")
      text += args.residual ? ",residual=1" : ",residual=0";
    else if (p.name == "gate")
      text += std::string(",gate=") + gates[int(args.gate)];
  }
  auto values = (*desc)->parseParams(text);
  if (!values)
    return values.takeError();
  return (*desc)->build(*values, args.cols);
}
