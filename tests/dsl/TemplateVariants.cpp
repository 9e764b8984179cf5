//===- tests/dsl/TemplateVariants.cpp - Every template, several ways ------===//

#include "tests/dsl/TemplateVariants.h"

using namespace bitfold;
using namespace bitfold::testing;
using dsl::DType;
using templates::GateMap;

const std::vector<TemplateVariant> &bitfold::testing::templateVariants() {
  static const std::vector<TemplateVariant> all = {
      {"ln_modulate/bf16", "ln_modulate", {.dtype = DType::BF16}},
      {"ln_modulate/f16", "ln_modulate", {.dtype = DType::F16}},
      {"ln_modulate/f32", "ln_modulate", {.dtype = DType::F32}},
      {"qk_layernorm/bf16", "qk_layernorm", {.dtype = DType::BF16}},
      {"qk_layernorm/f16", "qk_layernorm", {.dtype = DType::F16}},
      {"conv_bias/bf16/bf16",
       "conv_bias",
       {.dtype = DType::BF16, .biasDtype = DType::BF16}},
      {"conv_bias/bf16/f32",
       "conv_bias",
       {.dtype = DType::BF16, .biasDtype = DType::F32}},
      {"conv_bias/bf16/bf16/residual",
       "conv_bias",
       {.dtype = DType::BF16, .biasDtype = DType::BF16, .residual = true}},
      {"conv_bias/f16/f32/residual",
       "conv_bias",
       {.dtype = DType::F16, .biasDtype = DType::F32, .residual = true}},
      {"conv_bias/f32/f32",
       "conv_bias",
       {.dtype = DType::F32, .biasDtype = DType::F32}},
      {"residual_gate/bf16/full",
       "residual_gate",
       {.dtype = DType::BF16, .gate = GateMap::Full}},
      {"residual_gate/bf16/per_batch",
       "residual_gate",
       {.dtype = DType::BF16, .gate = GateMap::PerBatch}},
      {"residual_gate/bf16/global",
       "residual_gate",
       {.dtype = DType::BF16, .gate = GateMap::Global}},
      {"residual_gate/f16/full",
       "residual_gate",
       {.dtype = DType::F16, .gate = GateMap::Full}},
      {"rmsnorm_modulate/bf16/2048",
       "rmsnorm_modulate",
       {.dtype = DType::BF16, .cols = 2048}},
      {"rmsnorm_modulate/bf16/4096",
       "rmsnorm_modulate",
       {.dtype = DType::BF16, .cols = 4096}},
      {"wan_rmsnorm_silu/bf16", "wan_rmsnorm_silu", {.dtype = DType::BF16}},
      {"wan_rmsnorm_silu/f16", "wan_rmsnorm_silu", {.dtype = DType::F16}},
  };
  return all;
}

llvm::Expected<templates::KernelDefRef>
bitfold::testing::buildVariant(const TemplateVariant &v) {
  return templates::buildStock(v.templateName, v.args);
}
