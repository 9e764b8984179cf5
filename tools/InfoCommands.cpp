//===- tools/InfoCommands.cpp - version, templates, interp ----------------===//

#include "tools/Commands.h"

#include "bitfold/Config.h"
#include "codegen/Backend.h"
#include "dsl/ApproxModels.h"
#include "dsl/Interp.h"
#include "tools/NpyDump.h"
#include "templates/Problem.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FormatVariadic.h"

#include <chrono>

using namespace bitfold;
using namespace bitfold::tools;

int tools::report(llvm::raw_ostream &err, llvm::StringRef cmd,
                  const llvm::Twine &msg, int code) {
  err << "bitfold" << (cmd.empty() ? "" : " ") << cmd << ": error: " << msg
      << "\n";
  return code;
}

int tools::report(llvm::raw_ostream &err, llvm::StringRef cmd, llvm::Error e,
                  int code) {
  return report(err, cmd, llvm::toString(std::move(e)), code);
}

int tools::report(llvm::raw_ostream &err, llvm::StringRef cmd, llvm::Error e) {
  std::string message;
  int code = exitCodeFor(std::move(e), message);
  return report(err, cmd, message, code);
}

int tools::versionCommand(llvm::raw_ostream &out) {
  out << "bitfold " << BITFOLD_VERSION << "\n";
  out << "LLVM " << LLVM_VERSION_STRING << " (NVPTX backend, MLIR)\n";
  out << "CUDA toolkit (build) " << BITFOLD_CUDA_TOOLKIT_VERSION << "\n";
  // The tools found, the default first ($BITFOLD_CUBIN_TOOL picks another).
  out << "PTX -> cubin: " << codegen::assemblerVersion() << "\n";
  printDriverInfo(out);
  return kOk;
}

int tools::templatesCommand(llvm::raw_ostream &out) {
  for (const templates::DescriptorRef &t :
       templates::Registry::global().all()) {
    out << llvm::formatv("{0,-18} {1}{2}\n", t->name, t->summary,
                         t->bitExact ? "" : " [not bit-exact]");
    if (!t->params.empty())
      out << "  --params\n" << t->paramsHelp();
    for (const std::string &s : t->seedShapes)
      out << "  --shape " << s << "\n";
  }
  return kOk;
}

namespace {

/// Counts output elements still holding the poison (all-ones bytes, a NaN
/// no finite input produces) and hashes every output byte.
struct OutputScan {
  int64_t unwritten = 0, elements = 0;
  uint64_t checksum = 1469598103934665603ull;
};

OutputScan scanOutputs(const dsl::KernelDef &def,
                       const templates::HostProblem &problem) {
  OutputScan s;
  for (int g = 0; g < def.groups; ++g)
    for (size_t i = 0; i < def.operands.size(); ++i) {
      if (!def.operands[i].isOutput)
        continue;
      const std::vector<uint8_t> &buf = problem.storage[g][i];
      unsigned eb = dsl::dtypeBytes(def.operands[i].dtype);
      // int8's all-ones byte is -1, a value: such outputs are not scanned.
      bool poisonable = def.operands[i].dtype != dsl::DType::I8;
      s.elements += int64_t(buf.size() / eb);
      for (size_t e = 0; poisonable && e < buf.size(); e += eb) {
        bool allOnes = true;
        for (unsigned k = 0; k < eb; ++k)
          allOnes &= buf[e + k] == 0xFF;
        s.unwritten += allOnes;
      }
      for (uint8_t byte : buf)
        s.checksum = (s.checksum ^ byte) * 1099511628211ull;
    }
  return s;
}

} // namespace

llvm::Expected<templates::Problem> tools::makeProblem(const ProblemArgs &a) {
  if (a.kernel.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "expected a kernel name (bitfold templates lists them)");
  if (a.shape.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "expected --shape DIMS, e.g. 1,4096,4096");
  auto p = templates::makeProblem(a.kernel, a.params, a.shape);
  if (!p)
    return p.takeError();
  for (llvm::StringRef s : a.scalars) {
    auto [name, text] = s.split('=');
    double v = 0;
    if (name.empty() || text.trim().getAsDouble(v))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--scalar '" + s +
                                         "': expected NAME=VALUE");
    if (llvm::Error e = p->setScalar(name, float(v)))
      return std::move(e);
  }
  return p;
}

int tools::interpCommand(const InterpOptions &o, llvm::raw_ostream &out,
                         llvm::raw_ostream &err) {
  auto p = makeProblem(o.problem);
  if (!p)
    return report(err, "interp", p.takeError(), kUsage);
  const dsl::KernelDef &def = *p->def;
  // The hash as a comment: the printed text parses back unchanged.
  if (o.printText)
    out << def.canonicalText << "# hash " << def.hash << "\n";
  if (llvm::Error e = p->checkGuard())
    return report(err, "interp", std::move(e), kUsage);
  auto problem = templates::HostProblem::make(*p, o.seed);
  if (!problem)
    return report(err, "interp", problem.takeError(), kUsage);
  dsl::ApproxChoice model = dsl::approxForArch(o.arch);
  if (!model.exact)
    err << "note: " << model.note << "\n";
  auto start = std::chrono::steady_clock::now();
  if (llvm::Error e = dsl::interpret(def, problem->binding, *model.unit))
    return report(err, "interp", std::move(e), kFailed);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  if (!o.dumpDir.empty())
    if (llvm::Error e = dumpOperandsAsNpy(def, *problem, o.dumpDir))
      return report(err, "interp", std::move(e), kFailed);
  OutputScan s = scanOutputs(def, *problem);
  bool ok = s.unwritten == 0;
  out << llvm::formatv("{0,-18} {1,-16} seed {2}  {3} elements  {4:f1} ms  "
                       "checksum {5:x16}  {6}\n",
                       o.problem.kernel, p->shape.str(), o.seed, s.elements,
                       ms, s.checksum,
                       ok ? "all written" : "UNWRITTEN ELEMENTS");
  return ok ? kOk : kFailed;
}
