//===- autotune/Search.cpp - The tuning loop ------------------------------===//

#include "autotune/Search.h"

#include "keys/Errors.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>

using namespace bitfold;
using namespace bitfold::autotune;

ConfigRunner::~ConfigRunner() = default;

namespace {

/// Linear-interpolated quantile of sorted data.
double quantile(const std::vector<double> &s, double q) {
  if (s.empty())
    return 0;
  double pos = q * double(s.size() - 1);
  size_t lo = size_t(pos);
  size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (s[hi] - s[lo]) * (pos - double(lo));
}

double medianOf(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  return quantile(s, 0.5);
}

} // namespace

Measurement autotune::summarise(llvm::StringRef config,
                                std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Measurement m;
  m.config = config.str();
  m.samples = int(samples.size());
  if (samples.empty())
    return m;
  m.medianUs = quantile(samples, 0.5);
  m.spreadUs = quantile(samples, 0.75) - quantile(samples, 0.25);
  m.minUs = samples.front();
  m.maxUs = samples.back();
  return m;
}

const Measurement *SearchResult::winner() const {
  return fastestOf(measurements);
}

const Measurement *SearchResult::find(llvm::StringRef config) const {
  return findConfig(measurements, config);
}

namespace {

/// Compiles every config on a thread pool; the timing loop takes the
/// results in order while later configs are still compiling.
class Compiles {
public:
  Compiles(llvm::ArrayRef<keys::TileConfig> configs,
           const CompileConfigFn &compile, const SearchOptions &opts)
      : slots(configs.size()),
        pool(llvm::hardware_concurrency(opts.compileThreads)) {
    done.reserve(configs.size());
    for (size_t i = 0; i < configs.size(); ++i)
      done.push_back(pool.async([this, configs, &compile, &opts, i] {
        if (cancel.load() || (measured.load() && pastDeadline(opts)))
          return; // left empty: skipped
        slots[i].emplace(compile(configs[i]));
      }));
  }
  ~Compiles() {
    pool.wait();
    for (auto &s : slots) // drop errors nobody looked at (after a failure)
      if (s && !*s)
        llvm::consumeError(s->takeError());
  }
  /// Waits for config `i`; null when it was skipped.
  llvm::Expected<codegen::CompiledKernel> *take(size_t i) {
    done[i].wait();
    return slots[i] ? &*slots[i] : nullptr;
  }
  void cancelRest() { cancel.store(true); }
  /// The budget binds from now on: one config has been timed.
  void markMeasured() { measured.store(true); }

  static bool pastDeadline(const SearchOptions &opts) {
    return opts.deadline && std::chrono::steady_clock::now() > *opts.deadline;
  }

private:
  std::vector<std::optional<llvm::Expected<codegen::CompiledKernel>>> slots;
  std::atomic<bool> cancel{false};
  std::atomic<bool> measured{false};
  llvm::DefaultThreadPool pool;
  std::vector<std::shared_future<void>> done;
};

/// Loads a kernel, warms it up and returns its output bytes.
llvm::Expected<std::vector<uint8_t>>
outputsOf(ConfigRunner &runner, const codegen::CompiledKernel &k,
          int warmUpRuns) {
  if (llvm::Error e = runner.load(k))
    return std::move(e);
  if (llvm::Error e = runner.warmUp(std::max(warmUpRuns, 1)))
    return std::move(e);
  return runner.outputBytes();
}

std::string differenceText(llvm::StringRef refConfig,
                           const std::vector<uint8_t> &ref,
                           llvm::StringRef config,
                           const std::vector<uint8_t> &out) {
  size_t n = std::min(out.size(), ref.size()), at = 0;
  while (at < n && out[at] == ref[at])
    ++at;
  return llvm::formatv(
      "configs {0} and {1} give different output bytes (first difference "
      "at byte {2} of {3}: {4:x2} vs {5:x2}{6}); every legal config must "
      "give identical bits, so this is a codegen bug",
      refConfig, config, at, ref.size(), at < ref.size() ? ref[at] : 0,
      at < out.size() ? out[at] : 0,
      out.size() != ref.size()
          ? llvm::formatv(", sizes {0} vs {1}", ref.size(), out.size()).str()
          : std::string());
}

/// The best fully timed config so far.
struct Best {
  std::string config;
  double us = 0;
};

/// Timed runs of the loaded kernel, cut early once its median is clearly
/// above the best so far.
llvm::Expected<Measurement> timeLoaded(ConfigRunner &runner,
                                       llvm::StringRef config,
                                       const SearchOptions &opts,
                                       const Best &best) {
  int reps = std::max(opts.repetitions, 20);
  const int cutAfter = std::clamp(opts.cutAfter, 1, reps);
  std::vector<double> samples;
  bool cut = false;
  for (int r = 0; r < reps && !cut; ++r) {
    auto us = runner.timeOnceUs();
    if (!us)
      return us.takeError();
    samples.push_back(*us);
    if (int(samples.size()) == cutAfter && medianOf(samples) < opts.shortKernelUs)
      reps *= 5; // a short kernel: its median needs more samples
    cut = !best.config.empty() && int(samples.size()) >= cutAfter &&
          int(samples.size()) < reps &&
          medianOf(samples) > opts.cutRatio * best.us;
  }
  Measurement m = summarise(config, std::move(samples));
  m.cut = cut;
  return m;
}

llvm::Error noneTimed(const SearchResult &result) {
  std::string why;
  for (auto &[c, e] : result.failures)
    why += "\n  " + c + ": " + e;
  return keys::tuneError(
      llvm::formatv("no config could be timed ({0} failed, {1} skipped){2}",
                    result.failures.size(), result.skipped, why));
}

} // namespace

llvm::Expected<SearchResult>
autotune::searchConfigs(llvm::ArrayRef<keys::TileConfig> configs,
                        const CompileConfigFn &compile, ConfigRunner &runner,
                        const SearchOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  if (configs.empty())
    return keys::usageError("no configs to time");
  Compiles compiles(configs, compile, opts);
  std::vector<uint8_t> reference; // output bytes of the first config run
  std::string referenceConfig;
  Best best;
  for (size_t i = 0; i < configs.size(); ++i) {
    llvm::Expected<codegen::CompiledKernel> *k = compiles.take(i);
    const std::string text = configs[i].str();
    auto fail = [&](llvm::Error e) {
      result.failures.emplace_back(text, llvm::toString(std::move(e)));
    };
    // The budget is soft until one config is timed: a shape whose upload
    // or first compile outlasts it still gets its default measured.
    const bool budgetSpent =
        !result.measurements.empty() && Compiles::pastDeadline(opts);
    if (!k || budgetSpent) {
      ++result.skipped;
    } else if (!*k) {
      fail(k->takeError());
    } else if (auto out = outputsOf(runner, **k, opts.warmUpRuns); !out) {
      fail(out.takeError());
    } else if (!referenceConfig.empty() && *out != reference) {
      compiles.cancelRest();
      return keys::bitsDifferError(
          differenceText(referenceConfig, reference, text, *out));
    } else {
      if (referenceConfig.empty()) {
        reference = std::move(*out);
        referenceConfig = text;
      }
      if (auto m = timeLoaded(runner, text, opts, best); !m) {
        fail(m.takeError());
      } else {
        if (!m->cut && (best.config.empty() || m->medianUs < best.us ||
                        (m->medianUs == best.us && text < best.config)))
          best = Best{text, m->medianUs};
        result.measurements.push_back(*m);
        compiles.markMeasured();
        result.kernels.emplace(text, std::move(**k));
      }
    }
    if (opts.progress)
      opts.progress(i + 1, configs.size(), best.config, best.us);
  }
  if (result.measurements.empty())
    return noneTimed(result);
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return result;
}
