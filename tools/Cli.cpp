//===- tools/Cli.cpp - argv to the subcommands ----------------------------===//
//
// The only argv parser of the project: LLVM's command-line library, one
// cl::SubCommand per command, one cl::opt per option (shared by the
// commands that take it, so it has one spelling everywhere). `--opt=value`
// and `--opt value` both work; unknown options and malformed values are
// usage errors (exit 2, one line on stderr).
//
//===----------------------------------------------------------------------===//

#include "tools/Commands.h"

#include "bitfold/Config.h"
#include "templates/UserKernels.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"

#include <cmath>

using namespace bitfold;
using namespace bitfold::tools;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("bitfold options");

cl::SubCommand versionCmd(
    "version", "Print the bitfold, LLVM and CUDA toolkit versions, the CUDA "
               "driver and the GPUs it sees.\n      example: bitfold version");
cl::SubCommand templatesCmd(
    "templates", "List the registered kernels, their parameters and seed "
                 "shapes.\n      example: bitfold templates");
cl::SubCommand interpCmd(
    "interp", "Run a kernel in the CPU reference interpreter on seeded data "
              "and check every output element is written.\n      example: "
              "bitfold interp ln_modulate --shape 2,1024,2240 --print-text");
cl::SubCommand compileCmd(
    "compile", "Lower a kernel for one shape: DSL -> MLIR -> LLVM IR -> PTX "
               "-> cubin; audit the PTX; print per-stage times.\n      example: "
               "bitfold compile conv_bias --shape 1,96,4,480,832 --params "
               "residual=1 --dump-dir /tmp/d");
cl::SubCommand runCmd(
    "run", "Run a kernel on the GPU through the C API, compare it bit for "
           "bit with the interpreter on the same data, and time it.\n      "
           "example: bitfold run rmsnorm_modulate --shape 1,4096,4096");
cl::SubCommand cacheCmd(
    "cache", "Inspect the disk cache: ls, stats, verify (exit 1 if an entry "
             "is bad), clear, or prune --max-bytes N (oldest entries first)."
             "\n      example: bitfold cache verify --dir ~/.cache/bitfold");
cl::SubCommand tuneCmd(
    "tune", "Time every legal tile config of each shape on the GPU, check "
            "they give identical bits, write DIR/tune-db.json and DIR/cache/; "
            "or merge tune DBs.\n      example: bitfold tune --shapes "
            "bench/shapes/seed-shapes.json --out tuned/\n      example: bitfold "
            "tune merge a.json b.json --out ab.json");
cl::SubCommand prebuildCmd(
    "prebuild", "Without a GPU: compile every cubin a launch of the shapes "
                "on each --arch looks up (tune DB winners, else defaults) "
                "into a cache directory to ship as $BITFOLD_CACHE_DIR.\n"
                "      example: bitfold prebuild --shapes "
                "bench/shapes/seed-shapes.json --tune-db tune-db.json --arch "
                "sm_80,sm_90 --cache-dir pkg/prebuilt-cache -j 8");

// ---- Options shared by several commands -------------------------------------

cl::opt<std::string> kernelName(cl::Positional, cl::desc("<kernel>"),
                                cl::sub(interpCmd), cl::sub(compileCmd),
                                cl::sub(runCmd), cl::cat(category));
cl::list<std::string>
    programOpt("program", cl::value_desc("FILE"),
               cl::desc("a kernel text file (docs/kernel-format.md) instead "
                        "of <kernel>: registered under its program's name "
                        "(tune, prebuild: that name may be used in the "
                        "shapes file)"),
               cl::sub(interpCmd), cl::sub(compileCmd), cl::sub(runCmd),
               cl::sub(tuneCmd), cl::sub(prebuildCmd), cl::cat(category));
cl::opt<std::string>
    shapeOpt("shape", cl::value_desc("DIMS"),
             cl::desc("tensor dims: B,S,D (row-major, or any ...,D), "
                      "B,S,H,D (qk_layernorm), N,C,H,W or N,C,D,H,W "
                      "(channels-last)"),
             cl::sub(interpCmd), cl::sub(compileCmd), cl::sub(runCmd),
             cl::cat(category));
cl::opt<std::string>
    paramsOpt("params", cl::value_desc("K=V,..."),
              cl::desc("kernel parameters, e.g. dtype=f16,residual=1 "
                       "(bitfold templates lists them)"),
              cl::sub(interpCmd), cl::sub(compileCmd), cl::sub(runCmd),
              cl::cat(category));
cl::opt<uint64_t> seedOpt("seed", cl::desc("random seed of the input data"),
                          cl::init(0), cl::sub(interpCmd), cl::sub(runCmd),
                          cl::cat(category));
cl::list<std::string>
    scalarOpt("scalar", cl::value_desc("NAME=VALUE"),
              cl::desc("set a scalar (repeatable); interp and run need every "
                       "scalar that declares no default, compile none "
                       "(scalars are launch arguments)"),
              cl::sub(interpCmd), cl::sub(compileCmd), cl::sub(runCmd),
              cl::cat(category));
cl::opt<std::string>
    configOpt("config", cl::value_desc("rR.tT.vV.pP[.oO][.s1][.w1]"),
              cl::desc("tile config (default: the heuristic's)"),
              cl::sub(compileCmd), cl::sub(runCmd), cl::cat(category));
cl::opt<std::string> outOpt("out", cl::value_desc("PATH"),
                            cl::desc("tune: output directory; tune merge: "
                                     "output file"),
                            cl::sub(tuneCmd), cl::cat(category));

// ---- interp ---------------------------------------------------------------------

cl::opt<bool> printText("print-text",
                        cl::desc("print the canonical text (it parses back "
                                 "unchanged) and its hash as a comment"),
                        cl::sub(interpCmd), cl::cat(category));
cl::opt<std::string>
    interpDump("dump", cl::value_desc("DIR"),
               cl::desc("write every input and output as DIR/NAME.npy "
                        "(bf16 as uint16 bits; groups: gG.NAME.npy)"),
               cl::sub(interpCmd), cl::cat(category));

// ---- compile ----------------------------------------------------------------

cl::opt<bool> listConfigs("list-configs",
                          cl::desc("print the legal configs and stop"),
                          cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> archOpt(
    "arch", cl::value_desc("sm_XY"),
    cl::desc("target, default sm_90 (interp: whose approximate "
             "instructions to model; prebuild: a list, sm_80,sm_90)"),
    cl::init("sm_90"), cl::sub(compileCmd), cl::sub(interpCmd),
    cl::sub(prebuildCmd), cl::cat(category));
cl::opt<std::string>
    dumpDir("dump-dir", cl::value_desc("DIR"),
            cl::desc("write every stage's IR, the PTX and the cubin"),
            cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> ptxOnly("ptx-only", cl::desc("stop at PTX"),
                      cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> cubinTool("cubin-tool", cl::value_desc("TOOL"),
                               cl::desc("ptxcompiler, nvJitLink, ptxas or driver"),
                               cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> pdl("pdl",
                  cl::desc("for programmatic dependent launch (sm_90+: "
                           "griddepcontrol.wait before any memory access; "
                           "prebuild: these variants too)"),
                  cl::sub(compileCmd), cl::sub(prebuildCmd),
                  cl::cat(category));

// ---- run --------------------------------------------------------------------

cl::opt<std::string>
    tuneDbOpt("tune-db", cl::value_desc("FILE"),
              cl::desc("pick the config from this tune DB (run: default "
                       "$BITFOLD_TUNE_DB, --config pins one instead; "
                       "prebuild: default configs without it)"),
              cl::sub(runCmd), cl::sub(prebuildCmd), cl::cat(category));
cl::opt<unsigned> itersOpt("iters", cl::desc("timed launches"), cl::init(20),
                           cl::sub(runCmd), cl::cat(category));
cl::opt<unsigned> deviceOpt("device", cl::desc("CUDA device ordinal"),
                            cl::init(0), cl::sub(runCmd), cl::cat(category));

// ---- cache ------------------------------------------------------------------

// A string, not an enum option: cl registers an unnamed enum's values as
// flags of their own, and LLVM already has a --stats.
cl::opt<std::string> cacheAction(cl::Positional, cl::Required,
                                 cl::desc("ls|stats|verify|clear|prune"),
                                 cl::sub(cacheCmd), cl::cat(category));
cl::opt<std::string> cacheDir("dir", cl::value_desc("DIR"),
                              cl::desc("cache directory (default: "
                                       "$BITFOLD_CACHE_DIR, else "
                                       "~/.cache/bitfold)"),
                              cl::sub(cacheCmd), cl::cat(category));
cl::opt<bool> deleteBad("delete-bad", cl::desc("verify: remove bad entries"),
                        cl::sub(cacheCmd), cl::cat(category));
cl::opt<uint64_t> maxBytes("max-bytes", cl::value_desc("N"),
                           cl::desc("prune: remove the least recently "
                                    "written entries until at most N bytes "
                                    "remain"),
                           cl::sub(cacheCmd), cl::cat(category));

// ---- tune -------------------------------------------------------------------

cl::list<std::string> tuneWords(cl::Positional,
                                cl::desc("[merge A.json B.json ...]"),
                                cl::sub(tuneCmd), cl::cat(category));
cl::opt<std::string> shapesOpt("shapes", cl::value_desc("FILE.json"),
                               cl::desc("JSON list of {template, shape, "
                                        "params}"),
                               cl::sub(tuneCmd), cl::sub(prebuildCmd),
                               cl::cat(category));
cl::list<std::string> templatesOpt("templates", cl::value_desc("a,b"),
                                   cl::desc("only these kernels"),
                                   cl::CommaSeparated, cl::sub(tuneCmd),
                                   cl::sub(prebuildCmd), cl::cat(category));
cl::opt<std::string> shardOpt("shard", cl::value_desc("i/n"),
                              cl::desc("only tasks i, i+n, i+2n, ..."),
                              cl::init("0/1"), cl::sub(tuneCmd),
                              cl::cat(category));
cl::opt<std::string> devicesOpt("devices", cl::value_desc("all|0,1"),
                                cl::desc("GPUs to use, one worker process "
                                         "each"),
                                cl::init("0"), cl::sub(tuneCmd),
                                cl::cat(category));
cl::opt<double> budgetOpt("budget-s", cl::value_desc("N"),
                          cl::desc("stop starting configs after N seconds"),
                          cl::init(0), cl::sub(tuneCmd), cl::cat(category));
cl::opt<std::string> reportOpt("report", cl::value_desc("FILE.md"),
                               cl::desc("also write the table as markdown"),
                               cl::sub(tuneCmd), cl::cat(category));
cl::opt<unsigned> repetitionsOpt("repetitions",
                                 cl::desc("timed runs per config (>= 20)"),
                                 cl::init(20), cl::sub(tuneCmd),
                                 cl::cat(category));
cl::opt<double> cutRatioOpt("cut-ratio", cl::value_desc("X"),
                            cl::desc("stop timing a config whose median "
                                     "exceeds X times the best"),
                            cl::init(1.3), cl::sub(tuneCmd),
                            cl::cat(category));
cl::opt<autotune::Timing> timingOpt(
    "timing", cl::desc("how configs are timed"), cl::init(autotune::Timing::Steady),
    cl::values(clEnumValN(autotune::Timing::Steady, "steady",
                          "launches back to back over rotating buffers"),
               clEnumValN(autotune::Timing::Flushed, "flushed",
                          "L2 overwritten before each single launch")),
    cl::sub(tuneCmd), cl::cat(category));
cl::opt<std::string> workerDb("worker-db", cl::Hidden, cl::sub(tuneCmd),
                              cl::cat(category));
cl::opt<std::string> workerReport("worker-report", cl::Hidden,
                                  cl::sub(tuneCmd), cl::cat(category));

// ---- prebuild ---------------------------------------------------------------

cl::opt<std::string> prebuildCacheDir(
    "cache-dir", cl::value_desc("DIR"),
    cl::desc("the cache directory to fill (created if missing)"),
    cl::sub(prebuildCmd), cl::cat(category));
cl::list<std::string> gpuOpt("gpu", cl::value_desc("NAME"),
                             cl::desc("use the tune DB entries of this GPU "
                                      "(repeatable; default: every GPU of "
                                      "the arch in the DB)"),
                             cl::sub(prebuildCmd), cl::cat(category));
cl::opt<unsigned> jobsOpt("jobs", cl::value_desc("N"),
                          cl::desc("parallel compiles (default: one per "
                                   "hardware thread)"),
                          cl::init(0), cl::sub(prebuildCmd),
                          cl::cat(category));
cl::alias jobsShort("j", cl::desc("alias for --jobs"), cl::aliasopt(jobsOpt),
                    cl::cat(category));
cl::opt<bool> everyConfigOpt(
    "every-config",
    cl::desc("every legal tile config of each shape instead of the one a "
             "launch looks up (a GPU host's cache before an every-config "
             "test or sweep; not with --tune-db)"),
    cl::sub(prebuildCmd), cl::cat(category));

// ---- Dispatch ---------------------------------------------------------------

/// Registers each --program file; the names of their programs.
llvm::Expected<std::vector<std::string>> registerPrograms() {
  std::vector<std::string> names;
  for (const std::string &file : programOpt) {
    auto desc = templates::addUserKernelFile(file);
    if (!desc)
      return desc.takeError();
    names.push_back((*desc)->name);
  }
  return names;
}

/// The one place a command's kernel is resolved: <kernel>, or the program
/// of --program FILE, registered (templates/UserKernels.h) so that every
/// command then reaches it by name like a stock kernel. Nonzero: the exit
/// status, after reporting why (usage: both given; failed: the file).
int resolveProblem(llvm::StringRef cmd, ProblemArgs &a,
                   llvm::raw_ostream &err) {
  a = {kernelName, paramsOpt, shapeOpt,
       std::vector<std::string>(scalarOpt.begin(), scalarOpt.end())};
  if (programOpt.empty())
    return kOk;
  if (programOpt.size() > 1 || !kernelName.empty())
    return report(err, cmd,
                  "expected a kernel name or one --program FILE, not both",
                  kUsage);
  auto names = registerPrograms();
  if (!names)
    return report(err, cmd, names.takeError(), kFailed);
  a.kernel = names->front();
  return kOk;
}

int interpFromFlags(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  ProblemArgs problem;
  if (int status = resolveProblem("interp", problem, err))
    return status;
  return interpCommand({problem, seedOpt, printText, archOpt, interpDump}, out,
                       err);
}

int compileFromFlags(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  ProblemArgs problem;
  if (int status = resolveProblem("compile", problem, err))
    return status;
  CompileCommandOptions o;
  o.problem = problem;
  o.config = configOpt;
  o.listConfigs = listConfigs;
  o.codegen.arch = archOpt;
  if (dumpDir.getNumOccurrences()) // given, even empty: codegen checks it
    o.codegen.dumpDir = dumpDir;
  o.codegen.emitCubin = !ptxOnly;
  o.codegen.gridDependencyControl = pdl;
  if (cubinTool.getNumOccurrences())
    o.codegen.cubinTool = cubinTool;
  return compileCommand(o, out, err);
}

int runFromFlags(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  ProblemArgs problem;
  if (int status = resolveProblem("run", problem, err))
    return status;
  RunOptions o;
  o.problem = problem;
  o.config = configOpt;
  o.tuneDb = tuneDbOpt;
  o.seed = seedOpt;
  o.iters = itersOpt;
  o.device = deviceOpt;
  return runCommand(o, out, err);
}

int tuneFromFlags(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  if (!tuneWords.empty()) {
    if (tuneWords[0] != "merge")
      return report(err, "tune", "unexpected argument '" + tuneWords[0] +
                                     "' (expected options, or merge)",
                    kUsage);
    if (tuneWords.size() < 2 || outOpt.empty())
      return report(err, "tune", "expected: tune merge A.json B.json ... "
                                 "--out OUT.json",
                    kUsage);
    std::vector<std::string> inputs(tuneWords.begin() + 1, tuneWords.end());
    return tuneMergeCommand(inputs, outOpt, out, err);
  }
  TuneOptions o;
  o.programs.assign(programOpt.begin(), programOpt.end());
  if (auto names = registerPrograms(); !names)
    return report(err, "tune", names.takeError(), kFailed);
  o.shapes = shapesOpt;
  o.out = outOpt;
  o.report = reportOpt;
  o.templateFilter.assign(templatesOpt.begin(), templatesOpt.end());
  o.shard = shardOpt;
  o.devices = devicesOpt;
  o.budgetS = budgetOpt;
  o.repetitions = repetitionsOpt;
  o.cutRatio = cutRatioOpt;
  o.timing = timingOpt;
  o.workerDb = workerDb;
  o.workerReport = workerReport;
  if (llvm::Error e = checkTuneOptions(o))
    return report(err, "tune", std::move(e));
  return tuneCommand(o, out, err);
}

int prebuildFromFlags(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  PrebuildOptions o;
  o.programs.assign(programOpt.begin(), programOpt.end());
  if (auto names = registerPrograms(); !names)
    return report(err, "prebuild", names.takeError(), kFailed);
  o.shapes = shapesOpt;
  o.templateFilter.assign(templatesOpt.begin(), templatesOpt.end());
  o.tuneDb = tuneDbOpt;
  o.gpus.assign(gpuOpt.begin(), gpuOpt.end());
  llvm::SmallVector<llvm::StringRef, 4> archs;
  llvm::StringRef(archOpt).split(archs, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef a : archs)
    o.archs.push_back(a.trim().str());
  o.cacheDir = prebuildCacheDir;
  o.jobs = jobsOpt;
  o.pdl = pdl;
  o.everyConfig = everyConfigOpt;
  return prebuildCommand(o, out, err);
}

int cacheFromFlags(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  static const std::pair<llvm::StringRef, CacheAction> actions[] = {
      {"ls", CacheAction::Ls},
      {"stats", CacheAction::Stats},
      {"verify", CacheAction::Verify},
      {"clear", CacheAction::Clear},
      {"prune", CacheAction::Prune}};
  const bool prune = cacheAction == "prune";
  if (prune != bool(maxBytes.getNumOccurrences()))
    return report(err, "cache",
                  prune ? "prune needs --max-bytes N"
                        : "--max-bytes is an option of prune only",
                  kUsage);
  // Given but empty is a typo (`--dir=$UNSET`), not "the default".
  if (cacheDir.getNumOccurrences() && cacheDir.empty())
    return report(err, "cache", "--dir needs a directory (omit it for the "
                                "default)",
                  kUsage);
  for (const auto &[name, action] : actions)
    if (cacheAction == name)
      return cacheCommand({action, cacheDir, deleteBad, maxBytes}, out, err);
  return report(err, "cache",
                "unknown action '" + cacheAction +
                    "' (expected ls, stats, verify, clear or prune)",
                kUsage);
}

int dispatch(llvm::raw_ostream &out, llvm::raw_ostream &err) {
  if (versionCmd)
    return versionCommand(out);
  if (templatesCmd)
    return templatesCommand(out);
  if (interpCmd)
    return interpFromFlags(out, err);
  if (compileCmd)
    return compileFromFlags(out, err);
  if (runCmd)
    return runFromFlags(out, err);
  if (cacheCmd)
    return cacheFromFlags(out, err);
  if (tuneCmd)
    return tuneFromFlags(out, err);
  if (prebuildCmd)
    return prebuildFromFlags(out, err);
  return report(err, "", "expected a command (bitfold --help lists them)",
                kUsage);
}

const cl::SubCommand *const allCommands[] = {
    &versionCmd, &templatesCmd, &interpCmd, &compileCmd,
    &runCmd,     &cacheCmd,     &tuneCmd,   &prebuildCmd};

/// Once per process: --help lists only bitfold's options; --version.
void setUpParser() {
  static const bool done = [] {
    cl::HideUnrelatedOptions(category);
    for (const cl::SubCommand *c : allCommands)
      cl::HideUnrelatedOptions(category,
                               *const_cast<cl::SubCommand *>(c));
    cl::SetVersionPrinter([](llvm::raw_ostream &os) {
      os << "bitfold " << BITFOLD_VERSION << "\n";
    });
    return true;
  }();
  (void)done;
}

/// cl accepts the options LLVM's libraries register (the NVPTX backend's,
/// the pass manager's) in every command; they are not bitfold's interface.
llvm::Error checkOnlyOurOptions() {
  for (const auto &entry : cl::getRegisteredOptions()) {
    const cl::Option *o = entry.second;
    if (o->getNumOccurrences() && !llvm::is_contained(o->Categories, &category))
      return keys::usageError("unknown option '--" + entry.first +
                              "' (bitfold --help lists "
                              "the options)");
  }
  return llvm::Error::success();
}

} // namespace

int tools::exitCodeFor(keys::ErrorKind kind) {
  switch (kind) {
  case keys::ErrorKind::Usage:
    return kUsage;
  case keys::ErrorKind::BitsDiffer:
    return kDiffer;
  case keys::ErrorKind::Compile:
  case keys::ErrorKind::Driver:
  case keys::ErrorKind::Cache:
  case keys::ErrorKind::Tune:
    return kFailed;
  }
  return kFailed;
}

int tools::exitCodeFor(llvm::Error e, std::string &message) {
  std::optional<keys::ErrorKind> kind =
      keys::takeErrorKind(std::move(e), message);
  return kind ? exitCodeFor(*kind) : kFailed;
}

int tools::runCli(int argc, const char *const *argv, llvm::raw_ostream &out,
                  llvm::raw_ostream &err) {
  setUpParser();
  cl::ResetAllOptionOccurrences();
  if (argc < 2)
    return report(err, "", "expected a command (bitfold --help lists them)",
                  kUsage);
  llvm::StringRef first = argv[1];
  if (!first.starts_with("-") &&
      llvm::none_of(allCommands, [&](const cl::SubCommand *c) {
        return c->getName() == first;
      }))
    return report(err, "", "unknown command '" + first +
                               "' (bitfold --help lists them)",
                  kUsage);
  std::string parseErrors;
  llvm::raw_string_ostream parseErr(parseErrors);
  if (!cl::ParseCommandLineOptions(
          argc, argv, "bitfold: JIT kernels bit-exact with PyTorch eager\n",
          &parseErr, /*VFS=*/nullptr, /*EnvVar=*/nullptr,
          /*LongOptionsUseDoubleDash=*/true)) {
    // cl's message can span lines; keep the first, which says what failed.
    // (A malformed value is reported by cl on stderr itself.)
    llvm::StringRef msg = llvm::StringRef(parseErrors).trim();
    if (!msg.empty())
      err << msg.take_until([](char c) { return c == '\n'; }) << "\n";
    return kUsage;
  }
  if (llvm::Error e = checkOnlyOurOptions())
    return report(err, "", std::move(e));
  return dispatch(out, err);
}
