//===- tests/codegen/gpu_check/GpuCheckGen.cpp - GPU bit checks: inputs ---===//
//
// Writes, for every template instance and every config of its space, a cubin
// plus one launch description; inputs and the interpreter's outputs once per
// instance. gpu_launch (no LLVM; dlopen libcuda) runs them on a GPU host
// and reports, per config, mismatches against the interpreter and an output
// hash (all configs of an instance must agree: same DAG, same bits).
//
//   gpu_check_gen OUTDIR
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "tools/ShapedTemplate.h"
#include "dsl/ApproxModels.h"
#include "dsl/Interp.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <mutex>
#include <random>
#include <thread>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::tools;

namespace {

void writeFile(const std::string &path, const void *data, size_t n) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  os.write(static_cast<const char *>(data), n);
}

struct Instance {
  std::string label;
  TemplateRequest req;
};

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: gpu_check_gen OUTDIR\n";
    return 2;
  }
  std::string out = argv[1];
  llvm::sys::fs::create_directories(out);
  auto mk = [](std::string n, std::vector<int64_t> s,
               dsl::DType bias = dsl::DType::BF16, bool res = false,
               std::string gate = "full") {
    TemplateRequest r;
    r.name = n;
    r.tensorShape = s;
    r.biasDtype = bias;
    r.residual = res;
    r.gate = gate;
    return r;
  };
  std::vector<Instance> instances = {
      {"ln_4096", mk("ln_modulate", {2, 19, 4096})},
      {"ln_2240", mk("ln_modulate", {2, 19, 2240})},
      {"ln_128", mk("ln_modulate", {3, 7, 128})},
      {"qk", mk("qk_layernorm", {1, 5, 32, 128})},
      {"conv", mk("conv_bias", {1, 96, 2, 5, 7})},
      {"conv_res_f32", mk("conv_bias", {1, 96, 2, 5, 7}, dsl::DType::F32, true)},
      {"conv_c3", mk("conv_bias", {1, 3, 4, 8, 8})},
      {"conv_1152", mk("conv_bias", {2, 1152, 3, 7})},
      {"rg_full", mk("residual_gate", {1, 37, 4096})},
      {"rg_batch", mk("residual_gate", {3, 13, 4096}, dsl::DType::BF16, false,
                      "per_batch")},
      {"rg_global", mk("residual_gate", {1, 37, 4096}, dsl::DType::BF16, false,
                       "global")},
      {"rms_4096", mk("rmsnorm_modulate", {2, 19, 4096})},
      {"rms_2048", mk("rmsnorm_modulate", {1, 37, 2048})},
      {"wan", mk("wan_rmsnorm_silu", {1, 96, 2, 5, 7})},
  };
  // f32 rows with a residual where only two passes fit (D ~3600..8160 at
  // 16 rows and more), and beyond.
  for (int64_t d : {4096, 8192}) {
    TemplateRequest r = mk("hf_rmsnorm", {1, 19, d}, dsl::DType::F32, true);
    r.dtype = dsl::DType::F32;
    instances.push_back({"hf_res_f32_" + std::to_string(d), r});
  }
  std::error_code ec;
  llvm::raw_fd_ostream index(out + "/index.txt", ec);
  std::mt19937 rng(1234);
  for (const Instance &inst : instances) {
    llvm::Expected<ShapedTemplate> st = shapeTemplate(inst.req);
    if (!st) {
      llvm::errs() << llvm::toString(st.takeError()) << "\n";
      return 1;
    }
    const dsl::KernelDef &def = *st->def;
    const int64_t cols = st->shape.cols;
    std::string dir = out + "/" + inst.label;
    llvm::sys::fs::create_directories(dir);
    // Buffers: [group][operand].
    dsl::Binding bind;
    bind.cols = cols;
    bind.groupRows = st->groupRows;
    bind.dims = st->dims;
    for (const dsl::ScalarDecl &s : def.scalars)
      bind.scalars.push_back(s.name == "eps" ? 1e-5f : 9.797959f);
    std::vector<std::vector<std::vector<char>>> bufs(def.groups);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int g = 0; g < def.groups; ++g) {
      std::vector<dsl::HostTensor> ts;
      for (size_t i = 0; i < def.operands.size(); ++i) {
        const dsl::OperandDecl &o = def.operands[i];
        int64_t rows = st->groupRows[g];
        if (o.map == dsl::IndexMap::PerColumn)
          rows = 1;
        else if (o.map == dsl::IndexMap::PerBatch)
          rows = (rows + bind.dims[o.batchDim] - 1) / bind.dims[o.batchDim];
        int bytes = int(dsl::dtypeBytes(o.dtype));
        std::vector<char> b(size_t(rows * cols * bytes));
        float amp = std::pow(10.0f, float(int(rng() % 7)) - 4.0f);
        for (int64_t e = 0; e < rows * cols && !o.isOutput; ++e) {
          float v = normal(rng) * (e % 97 == 0 ? 100.0f : amp) + (i == 0 ? 0.3f : 0.0f);
          if (e % 211 == 5)
            v = -0.0f;
          if (o.dtype == dsl::DType::F32)
            memcpy(&b[e * 4], &v, 4);
          else {
            uint16_t h = o.dtype == dsl::DType::BF16 ? dsl::floatToBf16Bits(v)
                                                     : dsl::floatToHalfBits(v);
            memcpy(&b[e * 2], &h, 2);
          }
        }
        bufs[g].push_back(std::move(b));
        ts.push_back({o.dtype, bufs[g].back().data(), rows, cols});
      }
      bind.tensors.push_back(ts);
    }
    for (int g = 0; g < def.groups; ++g)
      for (size_t i = 0; i < def.operands.size(); ++i)
        if (!def.operands[i].isOutput)
          writeFile(llvm::formatv("{0}/in_{1}_{2}.bin", dir, g, i),
                    bufs[g][i].data(), bufs[g][i].size());
    // The expected outputs of the sm_90 kernels: sm_90's exact model of the
    // approximate instructions.
    if (llvm::Error e =
            dsl::interpret(def, bind, *dsl::approxForArch("sm_90").unit)) {
      llvm::errs() << llvm::toString(std::move(e)) << "\n";
      return 1;
    }
    for (int g = 0; g < def.groups; ++g)
      for (size_t i = 0; i < def.operands.size(); ++i)
        if (def.operands[i].isOutput)
          writeFile(llvm::formatv("{0}/expect_{1}_{2}.bin", dir, g, i),
                    bufs[g][i].data(), bufs[g][i].size());
    std::vector<TileConfig> configs = enumerateConfigs(def, st->shape);
    std::vector<std::string> metas(configs.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int w = 0; w < 2; ++w)
      pool.emplace_back([&] {
        for (size_t c; (c = next++) < configs.size();) {
          CompileOptions opts;
          llvm::Expected<CompiledKernel> k =
              compile(def, st->shape, configs[c], opts);
          if (!k) {
            llvm::errs() << inst.label << " " << configs[c].str() << ": "
                         << llvm::toString(k.takeError()) << "\n";
            continue;
          }
          std::string name = configs[c].str();
          writeFile(dir + "/" + name + ".cubin", k->cubin.data(),
                    k->cubin.size());
          int64_t total = 0;
          for (int64_t r : st->groupRows)
            total += r;
          std::string m;
          llvm::raw_string_ostream ms(m);
          ms << "case " << inst.label << " " << name << "\n"
             << "cubin " << dir << "/" << name << ".cubin\n"
             << "entry " << k->entryName << "\n"
             << "grid " << (total + configs[c].rowsPerCta - 1) / configs[c].rowsPerCta
             << "\nblock " << configs[c].ctaThreads() << "\n";
          for (int g = 0; g < def.groups; ++g)
            for (size_t i = 0; i < def.operands.size(); ++i) {
              const dsl::OperandDecl &o = def.operands[i];
              std::string buf = llvm::formatv("{0}/{1}_{2}_{3}.bin", dir,
                                              o.isOutput ? "expect" : "in", g, i);
              ms << "buffer " << bufs[g][i].size() << " "
                 << (o.isOutput ? "out " : "in ") << dsl::dtypeBytes(o.dtype)
                 << " " << buf << "\n";
              ms << "param stride " << cols << "\n";
            }
          for (int64_t r : st->groupRows)
            ms << "param i64 " << r << "\n";
          for (int64_t d : st->dims)
            ms << "param i64 " << d << "\n";
          for (float s : bind.scalars)
            ms << "param f32 " << llvm::formatv("{0}", std::bit_cast<uint32_t>(s)).str() << "\n";
          ms << "end\n";
          metas[c] = m;
        }
      });
    for (auto &t : pool)
      t.join();
    for (const std::string &m : metas)
      index << m;
    llvm::errs() << inst.label << ": " << configs.size() << " configs\n";
  }
  return 0;
}
