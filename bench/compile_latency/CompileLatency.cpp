//===- bench/compile_latency/CompileLatency.cpp - Cold compile latency -----===//
//
// Measures a cold compile of ln_modulate (1, 4096, 4096), default config, in
// fresh processes: DSL -> PTX, and DSL -> cubin with nvJitLink and with
// ptxas. Each repetition is a new process (`--child MODE`), which times
// building the template, then compile(), and prints one line of numbers;
// the parent prints medians and per-stage medians as Markdown.
//
//   compile_latency [--reps N] [--out FILE.md]
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "codegen/CompileCommand.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>

using namespace bitfold;
using namespace bitfold::codegen;

namespace {

int child(llvm::StringRef mode) {
  auto t0 = std::chrono::steady_clock::now();
  TemplateRequest r;
  r.name = "ln_modulate";
  r.tensorShape = {1, 4096, 4096};
  llvm::Expected<ShapedTemplate> st = shapeTemplate(r);
  if (!st) {
    llvm::errs() << llvm::toString(st.takeError()) << "\n";
    return 1;
  }
  auto t1 = std::chrono::steady_clock::now();
  CompileOptions opts;
  opts.emitCubin = mode != "ptx";
  if (mode != "ptx")
    opts.cubinTool = mode.str();
  llvm::Expected<CompiledKernel> k = compile(
      *st->def, st->shape, defaultConfig(*st->def, st->shape), opts);
  auto t2 = std::chrono::steady_clock::now();
  if (!k) {
    llvm::errs() << llvm::toString(k.takeError()) << "\n";
    return 1;
  }
  auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  // total dsl compile stage=ms ...
  llvm::outs() << llvm::formatv("{0:f3} {1:f3} {2:f3}", ms(t0, t2),
                                ms(t0, t1), ms(t1, t2));
  for (const StageTime &s : k->times)
    llvm::outs() << llvm::formatv(" {0}={1:f3}", s.stage, s.ms);
  llvm::outs() << " config=" << k->config.str() << "\n";
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2]
                                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 3 && llvm::StringRef(argv[1]) == "--child")
    return child(argv[2]);
  int reps = 11;
  std::string outPath;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc)
      outPath = argv[++i];
    else {
      llvm::errs() << "usage: compile_latency [--reps N] [--out FILE.md]\n";
      return 2;
    }
  }
  std::string self = llvm::sys::fs::getMainExecutable(argv[0], (void *)&main);
  std::string md;
  llvm::raw_string_ostream os(md);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&now));
  os << "# Cold compile latency: ln_modulate (1, 4096, 4096), bf16\n\n"
     << "Date: " << date << ". Each number is the median of " << reps
     << " fresh processes (one compile each, nothing cached), measured from "
        "the start of `main`'s work: building the template + compile().\n"
     << "Toolchain: " << toolchainVersion() << ".\n\n";
  std::string config;
  for (const char *mode : {"ptx", "nvJitLink", "ptxas"}) {
    std::vector<double> total, dsl, comp;
    std::map<std::string, std::vector<double>> stages;
    std::vector<std::string> order;
    bool failed = false;
    for (int r = 0; r < reps; ++r) {
      llvm::SmallString<128> outFile;
      llvm::sys::fs::createTemporaryFile("bitfold-bench", "txt", outFile);
      std::optional<llvm::StringRef> redirects[] = {
          std::nullopt, llvm::StringRef(outFile), llvm::StringRef(outFile)};
      llvm::StringRef args[] = {self, "--child", mode};
      int rc = llvm::sys::ExecuteAndWait(self, args, std::nullopt, redirects);
      auto buf = llvm::MemoryBuffer::getFile(outFile);
      std::string text = buf ? (*buf)->getBuffer().trim().str() : "";
      llvm::sys::fs::remove(outFile);
      if (rc != 0) {
        os << "- " << mode << ": failed: " << text << "\n";
        failed = true;
        break;
      }
      llvm::SmallVector<llvm::StringRef, 16> f;
      llvm::StringRef(text).split(f, ' ');
      double v[3];
      for (int i = 0; i < 3; ++i)
        f[i].getAsDouble(v[i]);
      total.push_back(v[0]);
      dsl.push_back(v[1]);
      comp.push_back(v[2]);
      for (size_t i = 3; i < f.size(); ++i) {
        auto [k, val] = f[i].split('=');
        if (k == "config") {
          config = val.str();
          continue;
        }
        double d;
        val.getAsDouble(d);
        if (!stages.count(k.str()))
          order.push_back(k.str());
        stages[k.str()].push_back(d);
      }
    }
    if (failed)
      continue;
    llvm::StringRef what = llvm::StringRef(mode) == "ptx"
                               ? "DSL -> PTX"
                               : llvm::StringRef(mode) == "nvJitLink"
                                     ? "DSL -> cubin (nvJitLink)"
                                     : "DSL -> cubin (ptxas subprocess)";
    os << llvm::formatv("## {0}\n\nmedian total **{1:f1} ms** (template "
                        "{2:f2} ms, compile() {3:f1} ms); min {4:f1}, max "
                        "{5:f1}\n\n| stage | median ms |\n|---|---|\n",
                        what, median(total), median(dsl), median(comp),
                        *std::min_element(total.begin(), total.end()),
                        *std::max_element(total.begin(), total.end()));
    for (const std::string &s : order)
      os << llvm::formatv("| {0} | {1:f2} |\n", s, median(stages[s]));
    os << "\n";
  }
  os << "Config: " << config << " (defaultConfig).\n";
  llvm::outs() << md;
  if (!outPath.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream f(outPath, ec);
    if (ec) {
      llvm::errs() << "cannot write " << outPath << "\n";
      return 1;
    }
    f << md;
  }
  return 0;
}
