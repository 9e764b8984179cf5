//===- autotune/Search.h - Time the configs of one shape ---------*- C++ -*-===//
//
// The tuning loop for one kernel and shape, independent of the GPU: configs
// are compiled in parallel (an LLVM thread pool) and timed one after the
// other through a ConfigRunner (runtime/GPU: GpuRunner.h; tests: a fake).
//
// Per config, in order (the default config first):
//   load -> warm-up runs -> one run on poisoned outputs whose bytes must
//   equal the first config's (else the search fails, naming both configs
//   and the first differing byte: that is a compiler bug) -> timed runs.
// Timed runs stop early ("cut") once `cutAfter` samples put the config's
// median above `cutRatio` x the best full median so far; otherwise
// `repetitions` (>= 20) samples are taken, five times as many for a kernel
// whose median after `cutAfter` samples is below `shortKernelUs` (a launch
// of a few microseconds varies by tens of percent, so 20 samples left the
// winner 4-5% off the best at such shapes). Each Measurement records the
// median, the interquartile spread, min, max and the sample count.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_SEARCH_H
#define BITFOLD_AUTOTUNE_SEARCH_H

#include "autotune/TuneDB.h"

#include "codegen/Codegen.h"

#include <chrono>
#include <functional>
#include <optional>

namespace bitfold::autotune {

/// Runs compiled kernels of one shape on one device.
class ConfigRunner {
public:
  virtual ~ConfigRunner();
  /// Makes `kernel` the current one (load the module, find the function).
  virtual llvm::Error load(const codegen::CompiledKernel &kernel) = 0;
  /// `runs` untimed launches of the current kernel.
  virtual llvm::Error warmUp(int runs) = 0;
  /// Poisons the outputs, launches once, returns all output bytes
  /// (groups x outputs, concatenated in KernelDef order).
  virtual llvm::Expected<std::vector<uint8_t>> outputBytes() = 0;
  /// One timed launch in microseconds: L2 flushed before it, the next
  /// rotating set of input/output buffers.
  virtual llvm::Expected<double> timeOnceUs() = 0;
};

struct SearchOptions {
  int warmUpRuns = 3;
  int repetitions = 20;    ///< timed runs per config; raised to 20 if lower.
  double shortKernelUs = 8; ///< below it, 5 x repetitions timed runs.
  int cutAfter = 5;        ///< samples before a config may be cut.
  double cutRatio = 1.3;   ///< cut when median > cutRatio x best median.
  unsigned compileThreads = 0; ///< 0: all hardware threads.
  /// Stop starting new configs after this point once one config has been
  /// timed (configs already timed are kept; the rest are reported as
  /// skipped). Soft for the first measurement: until one config is timed,
  /// configs are tried past it, so a search never ends with none timed
  /// because the budget ran out.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Progress, after each config: done, total, best config so far (may be
  /// empty) and its median.
  std::function<void(size_t done, size_t total, llvm::StringRef best,
                     double bestUs)>
      progress;
};

/// Compiles one config (called from pool threads, concurrently).
using CompileConfigFn =
    std::function<llvm::Expected<codegen::CompiledKernel>(
        const keys::TileConfig &)>;

struct SearchResult {
  std::vector<Measurement> measurements; ///< in timing order.
  /// Compiled kernels by config text (for writing winners to the cache).
  std::map<std::string, codegen::CompiledKernel> kernels;
  /// Configs that failed to compile or load, with the error text.
  std::vector<std::pair<std::string, std::string>> failures;
  size_t skipped = 0; ///< not timed: the deadline passed.
  double seconds = 0; ///< wall time of the search.

  /// Fastest fully timed config (ties by text); null if none.
  const Measurement *winner() const;
  const Measurement *find(llvm::StringRef config) const;
};

/// Median, interquartile spread, min and max of `samples` (sorted inside).
Measurement summarise(llvm::StringRef config, std::vector<double> samples);

/// Times `configs` (the first is the reference for bit identity; put the
/// default config first). Fails on a bit difference (both configs named)
/// (keys::BitsDifferError) or when no config could be timed at all
/// (keys::TuneError: every config failed).
llvm::Expected<SearchResult> searchConfigs(llvm::ArrayRef<keys::TileConfig> configs,
                                           const CompileConfigFn &compile,
                                           ConfigRunner &runner,
                                           const SearchOptions &options);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_SEARCH_H
