//===- tools/Commands.h - The bitfold subcommands ----------------*- C++ -*-===//
//
// Each subcommand is a function of its already-parsed options (Cli.cpp
// fills them from argv with LLVM's command-line library), writing normal
// output to `out` and errors to `err`, and returning the exit status:
//
//   0 ok, 1 failed (a runtime or compile error, corrupt cache entries),
//   2 usage (a bad argument or an input the kernel does not accept),
//   3 results differ (GPU vs interpreter in `run`, configs in `tune`).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TOOLS_COMMANDS_H
#define BITFOLD_TOOLS_COMMANDS_H

#include "autotune/GpuRunner.h"
#include "codegen/Codegen.h"
#include "keys/Errors.h"
#include "templates/Problem.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bitfold::tools {

enum ExitCode : int { kOk = 0, kFailed = 1, kUsage = 2, kDiffer = 3 };

/// The exit code of an error kind (keys/Errors.h), the CLI's one map:
/// usage 2, bits differ 3, every other kind 1 (Cli.cpp).
int exitCodeFor(keys::ErrorKind kind);
/// Consumes `e`: the exit code of its first typed error (1 when none is
/// typed); its message goes to `message`.
int exitCodeFor(llvm::Error e, std::string &message);

/// Prints "bitfold CMD: error: MSG" (one line) to err; returns `code`.
int report(llvm::raw_ostream &err, llvm::StringRef cmd, const llvm::Twine &msg,
           int code);
int report(llvm::raw_ostream &err, llvm::StringRef cmd, llvm::Error e,
           int code);
/// As above, with the code exitCodeFor(e) gives.
int report(llvm::raw_ostream &err, llvm::StringRef cmd, llvm::Error e);

/// A kernel of the registry, its parameters and a tensor shape, as text.
struct ProblemArgs {
  std::string kernel; ///< "ln_modulate"
  std::string params; ///< "dtype=f16,residual=1" (KernelDescriptor::parseParams)
  std::string shape;  ///< "1,4096,4096" (templates::parseDims)
  std::vector<std::string> scalars; ///< --scalar NAME=VALUE, applied in order.
};

/// The problem of `a` (templates::makeProblem) with its --scalar values set;
/// errors are usage errors.
llvm::Expected<templates::Problem> makeProblem(const ProblemArgs &a);

/// Prints the CUDA driver version and each GPU's name and compute
/// capability, or the reason none can be used.
void printDriverInfo(llvm::raw_ostream &out);
int versionCommand(llvm::raw_ostream &out);
/// Every registered kernel, its parameters and seed shapes.
int templatesCommand(llvm::raw_ostream &out);

struct InterpOptions {
  ProblemArgs problem;
  uint64_t seed = 0;
  bool printText = false;
  std::string arch = "sm_90"; ///< whose approximate instructions to model.
  std::string dumpDir; ///< non-empty: write every operand there as .npy.
};
/// Runs the kernel in the CPU interpreter on seeded data, at a shape the
/// program's guard admits (as compile requires); checks that every output
/// element was written.
int interpCommand(const InterpOptions &o, llvm::raw_ostream &out,
                  llvm::raw_ostream &err);

struct CompileCommandOptions {
  ProblemArgs problem;
  std::string config; ///< empty: the heuristic's default.
  bool listConfigs = false;
  keys::CompileOptions codegen;
};
int compileCommand(const CompileCommandOptions &o, llvm::raw_ostream &out,
                   llvm::raw_ostream &err);

struct RunOptions {
  ProblemArgs problem;
  std::string config;
  std::string tuneDb; ///< empty: $BITFOLD_TUNE_DB, else none.
  uint64_t seed = 1;
  unsigned iters = 20;
  unsigned device = 0;
};
/// Launches once through the C API, compares bit for bit with the
/// interpreter on the same host data (templates::HostProblem), then times
/// `iters` launches. Exit 3 when results differ.
int runCommand(const RunOptions &o, llvm::raw_ostream &out,
               llvm::raw_ostream &err);

enum class CacheAction { Ls, Stats, Verify, Clear, Prune };
struct CacheCommandOptions {
  CacheAction action = CacheAction::Ls;
  std::string dir; ///< empty: the runtime's default cache directory.
  bool deleteBad = false;
  uint64_t maxBytes = 0; ///< prune: the byte budget left behind.
};
int cacheCommand(const CacheCommandOptions &o, llvm::raw_ostream &out,
                 llvm::raw_ostream &err);

struct TuneOptions {
  std::string shapes, out, report;
  /// --program files, registered before the shapes file is read (workers
  /// get them too).
  std::vector<std::string> programs;
  std::vector<std::string> templateFilter;
  std::string shard = "0/1";
  std::string devices = "0";
  double budgetS = 0; ///< 0: no budget.
  unsigned repetitions = 20;
  double cutRatio = 1.3;
  autotune::Timing timing = autotune::Timing::Steady;
  // Worker mode (set by the parent process).
  std::string workerDb, workerReport;
};
/// Checks the numeric options (finite, in range); an error is a usage one.
llvm::Error checkTuneOptions(const TuneOptions &o);
int tuneCommand(const TuneOptions &o, llvm::raw_ostream &out,
                llvm::raw_ostream &err);
/// Merges tune DBs into `output`.
int tuneMergeCommand(const std::vector<std::string> &inputs,
                     const std::string &output, llvm::raw_ostream &out,
                     llvm::raw_ostream &err);

struct PrebuildOptions {
  std::string shapes;   ///< the shapes file `tune` reads.
  /// --program files, registered before the shapes file is read.
  std::vector<std::string> programs;
  std::vector<std::string> templateFilter;
  /// Empty: every shape gets the default config.
  std::string tuneDb;
  /// GPU names whose tune DB entries are used (--gpu); empty: every GPU of
  /// each arch the DB holds entries for.
  std::vector<std::string> gpus;
  std::vector<std::string> archs; ///< "sm_80", "sm_90", ...
  std::string cacheDir;
  unsigned jobs = 0; ///< parallel compiles; 0: one per hardware thread.
  bool pdl = false;  ///< also the programmatic-dependent-launch variants.
  /// Every legal config of each shape (codegen::enumerateConfigs), not the
  /// one a launch looks up; excludes tuneDb.
  bool everyConfig = false;
};
/// Checks the options (archs known to the backend, counts in range); an
/// error is a usage one.
llvm::Error checkPrebuildOptions(const PrebuildOptions &o);
/// Compiles, without a GPU, every cubin a launch of the shapes on each arch
/// looks up, into the cache directory (exit 1 when any compile failed).
int prebuildCommand(const PrebuildOptions &o, llvm::raw_ostream &out,
                    llvm::raw_ostream &err);

/// Parses argv (argv[0] is the program) and runs the subcommand.
int runCli(int argc, const char *const *argv, llvm::raw_ostream &out,
           llvm::raw_ostream &err);

} // namespace bitfold::tools

#endif // BITFOLD_TOOLS_COMMANDS_H
