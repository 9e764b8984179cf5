//===- bench/compile_latency/CompileLatency.cpp - Compile latency ---------===//
//
// Compiles every stock kernel at every seed shape (default config, dense
// tensors' shape class) in ONE process, `--reps` passes over the list, and
// prints, as Markdown:
//   - the first compile of the process on its own (it pays the one-off
//     costs: LLVM target set-up, the nvJitLink dlopen, first-use caches);
//   - p50 / p95 of the total and of every named stage over all the other
//     compiles (a process that has compiled before: the serving case);
//   - p50 / max of the total per kernel.
// Nothing is cached between compiles: each one is codegen::compile() from
// the definition to the cubin.
//
//   - per case: its config, PTX bytes, min wall and CPU time, min nvJitLink.
//
//   compile_latency [--reps N] [--arch sm_XY] [--ptx-only] [--two-pass]
//                   [--quick] [--every-config] [--ptxas-O N]
//                   [--roll-rows 0|1] [--out FILE.md]
//
// --two-pass: each case at the default config's two-pass twin (same rows,
// threads and vector, p2) where that is legal, else the default (what
// BITFOLD_ROLLED_ROWS=1 rolls; codegen/EmitRolledRows.cpp).
// --quick: each case at its quick config (codegen::quickConfig) compiled
// as synchronous quick-first mode does (keys::launchOptions' fastCompile:
// every row that may roll rolled, ptxas -O0), what the runtime serves
// first when the chosen config is not cached.
// --ptxas-O N: assemble at -O N instead (default: 0 with --quick, else 3).
// --roll-rows 0|1: CompileOptions::rollRows (default: 1 with --quick).
// --every-config: each case at every legal config (codegen's config space),
// one row each in the per-case table.
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "tools/ShapedTemplate.h"
#include "keys/CacheKey.h"
#include "keys/ShapeSpec.h"
#include "templates/Problem.h"
#include "templates/Registry.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <time.h>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using namespace bitfold::tools;

namespace {

struct Args {
  int reps = 3;
  std::string arch = "sm_90";
  bool ptxOnly = false;
  bool twoPass = false;
  bool everyConfig = false;
  bool quick = false;
  int optLevel = -1; ///< ptxas -O; after parseArgs, set (-1: the runtime's)
  int rollRows = -1;  ///< CompileOptions::rollRows; the same
  std::string out;
};

/// One kernel at one seed shape, ready to compile.
struct Case {
  std::string label; ///< "conv_bias 1,96,4,480,832".
  std::string kernel;
  ShapedTemplate shaped;
  TileConfig config;
};

/// One compile's times.
struct Sample {
  const Case *c;
  double totalMs;
  double cpuMs; ///< the process CPU time: robust on a shared machine.
  std::vector<StageTime> stages;
  size_t ptxBytes;
};

double processCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

llvm::Expected<std::vector<Case>> stockCases(const Args &a) {
  std::vector<Case> cases;
  for (const templates::DescriptorRef &d : templates::Registry::global().all())
    for (const std::string &shape : d->seedShapes) {
      auto p = templates::makeProblem(d->name, "", shape);
      if (!p)
        return p.takeError();
      Case c{d->name + " " + shape, d->name, shapeProblem(*p), {}};
      c.config = defaultConfig(*c.shaped.def, c.shaped.shape);
      TileConfig twin = c.config;
      twin.twoPass = true;
      if (a.twoPass &&
          !llvm::errorToBool(checkConfig(*c.shaped.def, c.shaped.shape, twin)))
        c.config = twin;
      if (a.quick)
        c.config = quickConfig(*c.shaped.def, c.shaped.shape);
      if (!a.everyConfig) {
        cases.push_back(std::move(c));
        continue;
      }
      for (const TileConfig &t :
           enumerateConfigs(*c.shaped.def, c.shaped.shape)) {
        Case one = c;
        one.config = t;
        cases.push_back(std::move(one));
      }
    }
  return cases;
}

llvm::Expected<Sample> compileOnce(const Case &c, const Args &a) {
  CompileOptions opts = keys::launchOptions(a.arch, /*pdl=*/false, a.quick);
  opts.assemblerOptLevel = a.optLevel;
  opts.rollRows = a.rollRows != 0;
  opts.emitCubin = !a.ptxOnly;
  double cpu0 = processCpuMs();
  auto t0 = std::chrono::steady_clock::now();
  auto k = compile(*c.shaped.def, c.shaped.shape, c.config, opts);
  double cpu = processCpuMs() - cpu0;
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
  if (!k)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   c.label + ": " +
                                       llvm::toString(k.takeError()));
  return Sample{&c, ms, cpu, k->times, k->ptx.size()};
}

/// The q-quantile (nearest rank) of `v`.
double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t rank = size_t(std::ceil(q * double(v.size())));
  return v[std::min(v.size() - 1, rank ? rank - 1 : 0)];
}

void printFirst(const Sample &s, llvm::raw_ostream &os) {
  os << llvm::formatv("## First compile of the process\n\n{0}: **{1:f1} ms**"
                      " wall, {2:f1} ms CPU\n\n| stage | ms |\n|---|---|\n",
                      s.c->label, s.totalMs, s.cpuMs);
  for (const StageTime &t : s.stages)
    os << llvm::formatv("| {0} | {1:f2} |\n", t.stage, t.ms);
  os << "\n";
}

/// Per-stage and total p50 / p95 over `rest` (stages in compile order).
void printStages(llvm::ArrayRef<Sample> rest, llvm::raw_ostream &os) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> byStage;
  std::vector<double> totals, cpus, stageSums;
  for (const Sample &s : rest) {
    totals.push_back(s.totalMs);
    cpus.push_back(s.cpuMs);
    double sum = 0;
    for (const StageTime &t : s.stages) {
      if (!byStage.count(t.stage))
        order.push_back(t.stage);
      byStage[t.stage].push_back(t.ms);
      sum += t.ms;
    }
    stageSums.push_back(sum);
  }
  os << llvm::formatv("## The other {0} compiles (a process that has "
                      "compiled before)\n\ntotal wall: p50 **{1:f1} ms**, "
                      "p95 **{2:f1} ms**, max {3:f1} ms; the process CPU "
                      "time: p50 {4:f1} ms, p95 {5:f1} ms; the stages alone "
                      "(wall): p50 {6:f1}, p95 {7:f1}\n\n| stage | p50 ms "
                      "| p95 ms |\n|---|---|---|\n",
                      rest.size(), quantile(totals, 0.5),
                      quantile(totals, 0.95), quantile(totals, 1.0),
                      quantile(cpus, 0.5), quantile(cpus, 0.95),
                      quantile(stageSums, 0.5), quantile(stageSums, 0.95));
  for (const std::string &st : order)
    os << llvm::formatv("| {0} | {1:f2} | {2:f2} |\n", st,
                        quantile(byStage[st], 0.5),
                        quantile(byStage[st], 0.95));
  os << "\n";
}

void printPerKernel(llvm::ArrayRef<Sample> rest, llvm::raw_ostream &os) {
  std::map<std::string, std::vector<double>> byKernel;
  for (const Sample &s : rest)
    byKernel[s.c->kernel].push_back(s.totalMs);
  os << "## Per kernel (the other compiles, wall)\n\n| kernel | compiles | "
        "p50 ms | max ms |\n|---|---|---|---|\n";
  for (auto &[k, v] : byKernel)
    os << llvm::formatv("| {0} | {1} | {2:f1} | {3:f1} |\n", k, v.size(),
                        quantile(v, 0.5), quantile(v, 1.0));
  os << "\n";
}

/// Per case, the minimum over its compiles (the machine may be shared).
void printPerCase(llvm::ArrayRef<Sample> samples, llvm::raw_ostream &os) {
  std::vector<const Case *> order;
  std::map<const Case *, std::vector<const Sample *>> byCase;
  for (const Sample &s : samples) {
    if (!byCase.count(s.c))
      order.push_back(s.c);
    byCase[s.c].push_back(&s);
  }
  os << "## Per case (min over its compiles)\n\n| case | config | PTX bytes "
        "| wall ms | CPU ms | cubin ms |\n|---|---|--:|--:|--:|--:|\n";
  for (const Case *c : order) {
    double wall = 1e30, cpu = 1e30, cubin = 1e30;
    for (const Sample *s : byCase[c]) {
      wall = std::min(wall, s->totalMs);
      cpu = std::min(cpu, s->cpuMs);
      for (const StageTime &t : s->stages)
        if (t.stage == "cubin")
          cubin = std::min(cubin, t.ms);
    }
    os << llvm::formatv("| {0} | {1} | {2} | {3:f1} | {4:f1} | {5} |\n",
                        c->label, c->config.str(), byCase[c].front()->ptxBytes,
                        wall, cpu,
                        cubin < 1e30 ? llvm::formatv("{0:f1}", cubin).str()
                                     : std::string("-"));
  }
  os << "\n";
}

llvm::Expected<Args> parseArgs(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    bool hasValue = i + 1 < argc;
    if (arg == "--reps" && hasValue && (a.reps = std::atoi(argv[++i])) > 0)
      continue;
    if (arg == "--arch" && hasValue) {
      a.arch = argv[++i];
      continue;
    }
    if (arg == "--out" && hasValue) {
      a.out = argv[++i];
      continue;
    }
    if (arg == "--ptx-only") {
      a.ptxOnly = true;
      continue;
    }
    if (arg == "--two-pass") {
      a.twoPass = true;
      continue;
    }
    if (arg == "--quick") {
      a.quick = true;
      continue;
    }
    if (arg == "--ptxas-O" && hasValue) {
      a.optLevel = std::atoi(argv[++i]);
      continue;
    }
    if (arg == "--roll-rows" && hasValue) {
      a.rollRows = std::atoi(argv[++i]);
      continue;
    }
    if (arg == "--every-config") {
      a.everyConfig = true;
      continue;
    }
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "usage: compile_latency [--reps N] [--arch sm_XY] [--ptx-only] "
        "[--two-pass | --quick] [--every-config] [--ptxas-O N] "
        "[--roll-rows 0|1] [--out FILE.md]");
  }
  const CompileOptions launch = keys::launchOptions(a.arch, false, a.quick);
  if (a.optLevel < 0)
    a.optLevel = launch.assemblerOptLevel;
  if (a.rollRows < 0)
    a.rollRows = launch.rollRows;
  return a;
}

int writeReport(const Args &a, llvm::ArrayRef<Sample> samples,
                size_t numCases) {
  std::string md;
  llvm::raw_string_ostream os(md);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&now));
  os << "# Compile latency: every stock kernel x seed shape, one process\n\n"
     << "Date: " << date << ". " << numCases << " (kernel, seed shape) "
     << "cases, " << (a.quick     ? "quick config"
         : a.twoPass ? "default config's two-pass twin"
                     : "default config")
     << ", BITFOLD_ROLLED_ROWS="
     << (std::getenv("BITFOLD_ROLLED_ROWS") ? std::getenv("BITFOLD_ROLLED_ROWS")
                                            : "(unset)")
     << (a.rollRows ? " (every row that may roll rolled)" : "") << ", "
     << a.arch << ", ptxas -O" << a.optLevel << ", " << a.reps
     << " passes, "
     << (a.ptxOnly ? "DSL -> PTX" : "DSL -> cubin")
     << "; each compile is codegen::compile() from the definition (nothing "
        "cached).\nToolchain: "
     << toolchainVersion() << ".\n\n";
  printFirst(samples.front(), os);
  printStages(samples.drop_front(), os);
  printPerKernel(samples.drop_front(), os);
  printPerCase(samples, os);
  llvm::outs() << md;
  if (a.out.empty())
    return 0;
  std::error_code ec;
  llvm::raw_fd_ostream f(a.out, ec);
  if (ec) {
    llvm::errs() << "cannot write " << a.out << ": " << ec.message() << "\n";
    return 1;
  }
  f << md;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  auto args = parseArgs(argc, argv);
  if (!args) {
    llvm::errs() << llvm::toString(args.takeError()) << "\n";
    return 2;
  }
  auto cases = stockCases(*args);
  if (!cases) {
    llvm::errs() << llvm::toString(cases.takeError()) << "\n";
    return 1;
  }
  std::vector<Sample> samples;
  for (int r = 0; r < args->reps; ++r)
    for (const Case &c : *cases) {
      auto s = compileOnce(c, *args);
      if (!s) {
        llvm::errs() << llvm::toString(s.takeError()) << "\n";
        return 1;
      }
      samples.push_back(std::move(*s));
    }
  if (samples.size() < 2) {
    llvm::errs() << "compile_latency: fewer than two compiles\n";
    return 1;
  }
  return writeReport(*args, samples, cases->size());
}
