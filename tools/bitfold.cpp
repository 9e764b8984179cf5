//===- tools/bitfold.cpp - The bitfold command-line tool ------------------===//
//
//   bitfold version                      versions, driver and GPU
//   bitfold interp TEMPLATE --shape ...  run a template in the interpreter
//   bitfold templates                    list the templates
//   bitfold compile TEMPLATE --shape ... compile (and dump every stage)
//   bitfold run TEMPLATE --shape ...     run on the GPU, check vs interpreter
//   bitfold cache ls|stats|verify|clear  the disk cache
//   bitfold tune --shapes FILE --out DIR tune configs, build a shippable cache
//
// Each subcommand answers --help.
//
//===----------------------------------------------------------------------===//

#include "bitfold/Config.h"
#include "autotune/TuneCommand.h"
#include "codegen/CompileCommand.h"
#include "runtime/Commands.h"
#include "dsl/Interp.h"
#include "templates/Problem.h"
#include "tools/Commands.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace bitfold;

namespace {

struct Subcommand {
  const char *name;
  const char *summary;
  int (*run)(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out);
};

bool wantsHelp(llvm::ArrayRef<std::string> args) {
  for (const std::string &a : args)
    if (a == "--help" || a == "-h")
      return true;
  return false;
}

int fail(const llvm::Twine &msg) {
  llvm::errs() << "bitfold: error: " << msg << "\n";
  return 1;
}

int failWith(llvm::Error err) { return fail(llvm::toString(std::move(err))); }

int versionCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out) {
  if (wantsHelp(args)) {
    out << "usage: bitfold version\n\nPrints the bitfold, LLVM and CUDA "
           "toolkit versions it was built with, then the CUDA driver version "
           "and the GPUs it sees (or why it sees none).\n";
    return 0;
  }
  out << "bitfold " << BITFOLD_VERSION << "\n";
  out << "LLVM " << LLVM_VERSION_STRING << " (NVPTX backend, MLIR)\n";
  out << "CUDA toolkit (build) " << BITFOLD_CUDA_TOOLKIT_VERSION << "\n";
  printDriverInfo(out);
  return 0;
}

int templatesCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out) {
  if (wantsHelp(args)) {
    out << "usage: bitfold templates\n\nLists the bundled templates, their "
           "seed shapes and whether they are bit-exact with their "
           "reference.\n";
    return 0;
  }
  for (const templates::TemplateInfo &t : templates::allTemplates()) {
    out << llvm::formatv("{0,-18} {1}{2}\n", t.name, t.summary,
                         t.bitExact ? "" : " [not bit-exact]");
    for (const std::string &s : templates::seedShapes(t.name))
      out << "    --shape " << s << "\n";
  }
  return 0;
}

int interpCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out) {
  if (wantsHelp(args) || args.empty()) {
    out << "usage: bitfold interp TEMPLATE --shape DIMS [--seed N] "
           "[--print-text] [template options]\n\n"
           "Runs TEMPLATE in the CPU reference interpreter on seeded random "
           "data and checks that every output element was written.\n"
           "  --shape DIMS   e.g. 1,4096,4096 (B,S,D) or 1,96,4,480,832 "
           "(N,C,D,H,W)\n"
           "  --seed N       random seed (default 0)\n"
           "  --print-text   print the canonical text and hash\n"
        << templates::templateArgsHelp();
    return args.empty() ? 1 : 0;
  }
  std::string name = args[0];
  templates::TemplateArgs targs;
  std::vector<std::string> rest;
  if (llvm::Error e = templates::parseTemplateArgs(args.drop_front(), targs, rest))
    return failWith(std::move(e));
  std::string shapeText;
  uint64_t seed = 0;
  bool printText = false;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--shape" && i + 1 < rest.size())
      shapeText = rest[++i];
    else if (rest[i] == "--seed" && i + 1 < rest.size())
      seed = std::stoull(rest[++i]);
    else if (rest[i] == "--print-text")
      printText = true;
    else
      return fail("interp: unexpected argument '" + rest[i] + "'");
  }
  const templates::TemplateInfo *info = templates::findTemplate(name);
  if (!info)
    return fail("unknown template '" + name + "' (see bitfold templates)");
  if (shapeText.empty())
    return fail("interp: --shape is required");
  auto shape = templates::parseShape(name, shapeText);
  if (!shape)
    return failWith(shape.takeError());
  targs.cols = shape->cols;
  auto def = info->build(targs);
  if (!def)
    return failWith(def.takeError());
  if (printText)
    out << (*def)->canonicalText << "hash " << (*def)->hash << "\n";
  auto problem = templates::HostProblem::make(**def, *shape, seed);
  if (!problem)
    return failWith(problem.takeError());
  auto start = std::chrono::steady_clock::now();
  if (llvm::Error e = dsl::interpret(**def, problem->binding))
    return failWith(std::move(e));
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  // Every output element must have been written: the poison is all-ones
  // bytes, a NaN no finite input of these templates produces.
  int64_t unwritten = 0, elements = 0;
  uint64_t checksum = 1469598103934665603ull;
  for (int g = 0; g < (*def)->groups; ++g)
    for (size_t i = 0; i < (*def)->operands.size(); ++i) {
      if (!(*def)->operands[i].isOutput)
        continue;
      const std::vector<uint8_t> &buf = problem->storage[g][i];
      unsigned eb = dsl::dtypeBytes((*def)->operands[i].dtype);
      for (size_t e = 0; e < buf.size(); e += eb) {
        bool allOnes = true;
        for (unsigned k = 0; k < eb; ++k)
          allOnes &= buf[e + k] == 0xFF;
        unwritten += allOnes;
        ++elements;
      }
      for (uint8_t byte : buf)
        checksum = (checksum ^ byte) * 1099511628211ull;
    }
  bool ok = unwritten == 0;
  out << llvm::formatv("{0,-18} {1,-16} seed {2}  {3} elements  {4:f1} ms  "
                       "checksum {5:x16}  {6}\n",
                       name, shape->str(), seed, elements, ms, checksum,
                       ok ? "all written" : "UNWRITTEN ELEMENTS");
  return ok ? 0 : 1;
}

const Subcommand subcommands[] = {
    {"version", "print versions, the CUDA driver and GPUs", versionCommand},
    {"templates", "list the bundled templates and seed shapes",
     templatesCommand},
    {"interp", "run a template in the CPU reference interpreter",
     interpCommand},
    {"compile", "compile a template for a shape: DSL, MLIR, LLVM IR, PTX, cubin",
     codegen::runCompileCommand},
    {"run", "run a template on the GPU and check it against the interpreter",
     runtime::runRunCommand},
    {"cache", "inspect the disk cache: ls, stats, verify, clear",
     runtime::runCacheCommand},
    {"tune", "tune tile configs on the GPU; build a tune DB and cache",
     autotune::runTuneCommand},
};

void usage(llvm::raw_ostream &out) {
  out << "usage: bitfold <command> [options]   (bitfold <command> --help)\n\n"
         "commands:\n";
  for (const Subcommand &c : subcommands)
    out << llvm::formatv("  {0,-10} {1}\n", c.name, c.summary);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(llvm::errs());
    return 1;
  }
  llvm::StringRef cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(llvm::outs());
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Subcommand &c : subcommands)
    if (cmd == c.name)
      return c.run(args, llvm::outs());
  llvm::errs() << "bitfold: unknown command '" << cmd << "'\n";
  usage(llvm::errs());
  return 1;
}
