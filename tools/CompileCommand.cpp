//===- tools/CompileCommand.cpp - `bitfold compile` -----------------------===//

#include "tools/Commands.h"

#include "tools/ShapedTemplate.h"
#include "codegen/PtxAudit.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::tools;

namespace {

void printCompiled(const codegen::CompiledKernel &k, const dsl::KernelDef &def,
                   const keys::ShapeSpec &shape,
                   const keys::TileConfig &tc, llvm::StringRef arch,
                   llvm::raw_ostream &out) {
  out << llvm::formatv("kernel   {0}\nprogram  {1} ({2})\nshape    {3}\n"
                       "config   {4}\narch     {5}\n",
                       k.entryName, def.name, def.hash.substr(0, 16),
                       shape.str(), tc.str(), arch);
  out << llvm::formatv("ptx      {0} bytes\n", k.ptx.size());
  if (!k.cubin.empty()) {
    codegen::PtxasUsage u = codegen::parsePtxasLog(k.assemblerLog);
    out << llvm::formatv("cubin    {0} bytes via {1}; {2} registers, {3} "
                         "spill bytes, {4} bytes shared\n",
                         k.cubin.size(), k.cubinTool, u.registers,
                         u.spillBytes, k.sharedBytes);
  }
  double total = 0;
  for (const codegen::StageTime &t : k.times) {
    out << llvm::formatv("  {0,-16} {1,8:f3} ms\n", t.stage, t.ms);
    total += t.ms;
  }
  out << llvm::formatv("  {0,-16} {1,8:f3} ms\n", "total", total);
}

} // namespace

int tools::compileCommand(const CompileCommandOptions &o,
                          llvm::raw_ostream &out, llvm::raw_ostream &err) {
  auto p = makeProblem(o.problem);
  if (!p)
    return report(err, "compile", p.takeError(), kUsage);
  tools::ShapedTemplate st = tools::shapeProblem(*p);
  const dsl::KernelDef &def = *st.def;
  if (o.listConfigs) {
    for (const keys::TileConfig &c : codegen::enumerateConfigs(def, st.shape))
      out << c.str() << "\n";
    return kOk;
  }
  keys::TileConfig tc = codegen::defaultConfig(def, st.shape);
  if (!o.config.empty()) {
    auto c = keys::TileConfig::parse(o.config);
    if (!c)
      return report(err, "compile", c.takeError(), kUsage);
    tc = *c;
  }
  auto k = codegen::compile(def, st.shape, tc, o.codegen);
  if (!k)
    return report(err, "compile", k.takeError(), kFailed);
  printCompiled(*k, def, st.shape, tc, o.codegen.arch, out);
  if (llvm::Error e = codegen::auditPtx(*k, codegen::allowancesOf(def)))
    return report(err, "compile", std::move(e), kFailed);
  out << "audit    ok\n";
  return kOk;
}
