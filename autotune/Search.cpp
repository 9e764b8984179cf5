//===- autotune/Search.cpp - The tuning loop ------------------------------===//

#include "autotune/Search.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <algorithm>
#include <atomic>
#include <memory>

using namespace bitfold;
using namespace bitfold::autotune;

ConfigRunner::~ConfigRunner() = default;

namespace {

llvm::Error searchError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

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
  const Measurement *best = nullptr;
  for (const Measurement &m : measurements)
    if (!m.cut && m.samples > 0 &&
        (!best || m.medianUs < best->medianUs ||
         (m.medianUs == best->medianUs && m.config < best->config)))
      best = &m;
  return best;
}

const Measurement *SearchResult::find(llvm::StringRef config) const {
  for (const Measurement &m : measurements)
    if (m.config == config)
      return &m;
  return nullptr;
}

llvm::Expected<SearchResult>
autotune::searchConfigs(llvm::ArrayRef<codegen::TileConfig> configs,
                        const CompileConfigFn &compile, ConfigRunner &runner,
                        const SearchOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  if (configs.empty())
    return searchError("no configs to time");
  const int reps = std::max(opts.repetitions, 20);
  const int cutAfter = std::clamp(opts.cutAfter, 1, reps);

  // Compile everything in parallel; timing consumes the results in order
  // while later configs are still compiling.
  struct Slot {
    std::optional<llvm::Expected<codegen::CompiledKernel>> kernel;
  };
  std::vector<Slot> slots(configs.size());
  std::atomic<bool> cancel{false};
  llvm::DefaultThreadPool pool(
      llvm::hardware_concurrency(opts.compileThreads));
  std::vector<std::shared_future<void>> done;
  done.reserve(configs.size());
  for (size_t i = 0; i < configs.size(); ++i)
    done.push_back(pool.async([&, i] {
      if (cancel.load() ||
          (opts.deadline && std::chrono::steady_clock::now() > *opts.deadline))
        return; // left empty: skipped
      slots[i].kernel.emplace(compile(configs[i]));
    }));

  std::vector<uint8_t> reference;
  std::string referenceConfig;
  double bestUs = 0;
  std::string best;
  std::string failure; // a bit difference: fails the search
  for (size_t i = 0; i < configs.size(); ++i) {
    done[i].wait();
    const std::string text = configs[i].str();
    auto report = [&] {
      if (opts.progress)
        opts.progress(i + 1, configs.size(), best, bestUs);
    };
    if (!slots[i].kernel ||
        (opts.deadline && std::chrono::steady_clock::now() > *opts.deadline)) {
      ++result.skipped;
      report();
      continue;
    }
    llvm::Expected<codegen::CompiledKernel> &k = *slots[i].kernel;
    if (!k) {
      result.failures.emplace_back(text, llvm::toString(k.takeError()));
      report();
      continue;
    }
    auto step = [&]() -> llvm::Error {
      if (llvm::Error e = runner.load(*k))
        return e;
      if (llvm::Error e = runner.warmUp(std::max(opts.warmUpRuns, 1)))
        return e;
      return llvm::Error::success();
    };
    if (llvm::Error e = step()) {
      result.failures.emplace_back(text, llvm::toString(std::move(e)));
      report();
      continue;
    }
    // Bit identity with the first config that ran.
    auto out = runner.outputBytes();
    if (!out) {
      result.failures.emplace_back(text, llvm::toString(out.takeError()));
      report();
      continue;
    }
    if (referenceConfig.empty()) {
      reference = std::move(*out);
      referenceConfig = text;
    } else if (*out != reference) {
      size_t n = std::min(out->size(), reference.size()), at = 0;
      while (at < n && (*out)[at] == reference[at])
        ++at;
      failure = llvm::formatv(
          "configs {0} and {1} give different output bytes (first difference "
          "at byte {2} of {3}: {4:x2} vs {5:x2}{6}); every legal config must "
          "give identical bits, so this is a codegen bug",
          referenceConfig, text, at, reference.size(),
          at < reference.size() ? reference[at] : 0,
          at < out->size() ? (*out)[at] : 0,
          out->size() != reference.size()
              ? llvm::formatv(", sizes {0} vs {1}", reference.size(),
                              out->size())
                    .str()
              : std::string());
      cancel.store(true);
      break;
    }
    // Timed runs, with the early cut.
    std::vector<double> samples;
    bool cut = false;
    std::string timing;
    for (int r = 0; r < reps; ++r) {
      auto us = runner.timeOnceUs();
      if (!us) {
        timing = llvm::toString(us.takeError());
        break;
      }
      samples.push_back(*us);
      if (!best.empty() && int(samples.size()) >= cutAfter &&
          int(samples.size()) < reps &&
          medianOf(samples) > opts.cutRatio * bestUs) {
        cut = true;
        break;
      }
    }
    if (!timing.empty()) {
      result.failures.emplace_back(text, timing);
      report();
      continue;
    }
    Measurement m = summarise(text, std::move(samples));
    m.cut = cut;
    if (!cut && (best.empty() || m.medianUs < bestUs ||
                 (m.medianUs == bestUs && text < best))) {
      best = text;
      bestUs = m.medianUs;
    }
    result.measurements.push_back(m);
    result.kernels.emplace(text, std::move(*k));
    report();
  }
  pool.wait();
  for (Slot &s : slots) // drop errors nobody looked at (after a failure)
    if (s.kernel && !*s.kernel)
      llvm::consumeError(s.kernel->takeError());
  if (!failure.empty())
    return searchError(failure);
  if (result.measurements.empty()) {
    std::string why;
    for (auto &[c, e] : result.failures)
      why += "\n  " + c + ": " + e;
    return searchError(
        llvm::formatv("no config could be timed ({0} failed, {1} skipped){2}",
                      result.failures.size(), result.skipped, why));
  }
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return result;
}
