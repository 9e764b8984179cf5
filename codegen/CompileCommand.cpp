//===- codegen/CompileCommand.cpp - `bitfold compile` ---------------------===//

#include "codegen/CompileCommand.h"

#include "codegen/PtxAudit.h"
#include "templates/Problem.h"
#include "templates/Templates.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <numeric>

using namespace bitfold;
using namespace bitfold::codegen;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Expected<dsl::DType> parseDType(llvm::StringRef s) {
  if (s == "bf16") return dsl::DType::BF16;
  if (s == "f16" || s == "fp16") return dsl::DType::F16;
  if (s == "f32" || s == "fp32") return dsl::DType::F32;
  return fail("unknown dtype '" + s + "' (bf16, f16, f32)");
}

} // namespace

llvm::Expected<ShapedTemplate>
codegen::shapeTemplate(const TemplateRequest &req) {
  const templates::TemplateInfo *info = templates::findTemplate(req.name);
  if (!info) {
    std::string names;
    for (const templates::TemplateInfo &t : templates::allTemplates())
      names += (names.empty() ? "" : ", ") + t.name;
    return fail("unknown template '" + req.name + "' (" + names + ")");
  }
  llvm::Expected<templates::ProblemShape> ps =
      templates::shapeFromDims(req.name, req.tensorShape);
  if (!ps)
    return ps.takeError();
  ShapedTemplate out;
  const int64_t cols = ps->cols;
  templates::TemplateArgs args;
  args.dtype = req.dtype;
  args.biasDtype = req.biasDtype;
  args.residual = req.residual;
  args.cols = cols;
  if (req.gate == "full") args.gate = templates::GateMap::Full;
  else if (req.gate == "per_batch") args.gate = templates::GateMap::PerBatch;
  else if (req.gate == "global") args.gate = templates::GateMap::Global;
  else return fail("unknown --gate '" + req.gate + "' (full, per_batch, global)");
  llvm::Expected<templates::KernelDefRef> def = info->build(args);
  if (!def)
    return def.takeError();
  out.def = *def;
  out.dims.assign(out.def->dims.size(), ps->rowsPerBatch);
  out.groupRows = ps->groupRows;
  // What a launch on dense tensors of this shape compiles.
  out.shape = spec::denseShapeClass(*out.def, cols, ps->groupRows,
                                    ps->rowsPerBatch, /*bucketRows=*/false)
                  .shapeSpec();
  return out;
}

int codegen::runCompileCommand(llvm::ArrayRef<std::string> args,
                               llvm::raw_ostream &out) {
  TemplateRequest req;
  std::string config, shapeText;
  CompileOptions opts;
  bool listConfigs = false;
  auto usage = [&](const llvm::Twine &why) {
    out << "bitfold compile: " << why << "\n"
        << "usage: bitfold compile TEMPLATE --shape B,S,D [--config rR.tT.vV.pP]"
           " [--arch sm_90] [--dump-dir DIR] [--dtype bf16|f16|f32]"
           " [--bias-dtype ...] [--residual] [--gate full|per_batch|global]"
           " [--cubin-tool nvJitLink|ptxas|driver] [--ptx-only] [--pdl]"
           " [--list-configs]\n";
    return 2;
  };
  for (const std::string &a : args)
    if (a == "--help" || a == "-h") {
      out << "usage: bitfold compile TEMPLATE --shape DIMS [options]\n\n"
             "Lowers TEMPLATE for one shape DSL -> MLIR -> LLVM IR -> PTX -> "
             "cubin, audits the PTX and prints per-stage times.\n"
             "  --shape DIMS         B,S,D (row-major), B,S,H,D (qk_layernorm),\n"
             "                       N,C,H,W or N,C,D,H,W (channels-last)\n"
             "  --config rR.tT.vV.pP tile config (default: the heuristic's)\n"
             "  --list-configs       print the legal configs and stop\n"
             "  --arch sm_XY         target (default sm_90)\n"
             "  --dump-dir DIR       write every stage's IR, the PTX and cubin\n"
             "  --ptx-only           stop at PTX\n"
             "  --cubin-tool T       nvJitLink, ptxas or driver\n"
             "  --pdl                for programmatic dependent launch (sm_90+:\n"
             "                       griddepcontrol.wait before any memory access)\n"
             "  --dtype, --bias-dtype, --residual, --gate  template options\n";
      return 0;
    }
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef a = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size())
        return std::nullopt;
      return args[++i];
    };
    if (a == "--shape" || a == "--config" || a == "--arch" ||
        a == "--dump-dir" || a == "--dtype" || a == "--bias-dtype" ||
        a == "--gate" || a == "--cubin-tool") {
      std::optional<std::string> v = value();
      if (!v)
        return usage(a + " needs a value");
      if (a == "--shape") shapeText = *v;
      else if (a == "--config") config = *v;
      else if (a == "--arch") opts.arch = *v;
      else if (a == "--dump-dir") opts.dumpDir = *v;
      else if (a == "--gate") req.gate = *v;
      else if (a == "--cubin-tool") opts.cubinTool = *v;
      else {
        llvm::Expected<dsl::DType> t = parseDType(*v);
        if (!t)
          return usage(llvm::toString(t.takeError()));
        (a == "--dtype" ? req.dtype : req.biasDtype) = *t;
      }
    } else if (a == "--residual") {
      req.residual = true;
    } else if (a == "--ptx-only") {
      opts.emitCubin = false;
    } else if (a == "--pdl") {
      opts.gridDependencyControl = true;
    } else if (a == "--list-configs") {
      listConfigs = true;
    } else if (a.starts_with("-")) {
      return usage("unknown option " + a);
    } else if (req.name.empty()) {
      req.name = a.str();
    } else {
      return usage("unexpected argument " + a);
    }
  }
  if (req.name.empty())
    return usage("no template named");
  if (shapeText.empty())
    return usage("--shape is required");
  llvm::SmallVector<llvm::StringRef, 6> dims;
  llvm::StringRef(shapeText).split(dims, ',');
  for (llvm::StringRef d : dims) {
    int64_t v;
    if (d.trim().getAsInteger(10, v))
      return usage("--shape '" + shapeText + "' is not a list of integers");
    req.tensorShape.push_back(v);
  }
  llvm::Expected<ShapedTemplate> st = shapeTemplate(req);
  if (!st) {
    out << "bitfold compile: " << llvm::toString(st.takeError()) << "\n";
    return 1;
  }
  const dsl::KernelDef &def = *st->def;
  if (listConfigs) {
    for (const TileConfig &c : enumerateConfigs(def, st->shape))
      out << c.str() << "\n";
    return 0;
  }
  TileConfig tc = defaultConfig(def, st->shape);
  if (!config.empty()) {
    llvm::Expected<TileConfig> c = TileConfig::parse(config);
    if (!c) {
      out << "bitfold compile: " << llvm::toString(c.takeError()) << "\n";
      return 2;
    }
    tc = *c;
  }
  llvm::Expected<CompiledKernel> k = compile(def, st->shape, tc, opts);
  if (!k) {
    out << "bitfold compile: " << llvm::toString(k.takeError()) << "\n";
    return 1;
  }
  out << llvm::formatv("kernel   {0}\nprogram  {1} ({2})\nshape    {3}\n"
                       "config   {4}\narch     {5}\n",
                       k->entryName, def.name, def.hash.substr(0, 16),
                       st->shape.str(), tc.str(), opts.arch);
  out << llvm::formatv("ptx      {0} bytes\n", k->ptx.size());
  if (!k->cubin.empty()) {
    PtxasUsage u = parsePtxasLog(k->assemblerLog);
    out << llvm::formatv("cubin    {0} bytes via {1}; {2} registers, {3} "
                         "spill bytes, {4} bytes shared\n",
                         k->cubin.size(), k->cubinTool, u.registers,
                         u.spillBytes, k->sharedBytes);
  }
  double total = 0;
  for (const StageTime &t : k->times) {
    out << llvm::formatv("  {0,-16} {1,8:f3} ms\n", t.stage, t.ms);
    total += t.ms;
  }
  out << llvm::formatv("  {0,-16} {1,8:f3} ms\n", "total", total);
  if (llvm::Error e = auditPtx(*k, allowancesOf(def))) {
    out << llvm::toString(std::move(e)) << "\n";
    return 1;
  }
  out << "audit    ok\n";
  return 0;
}
