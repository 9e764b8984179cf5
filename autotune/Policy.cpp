//===- autotune/Policy.cpp - DB hit, default, or tune ---------------------===//

#include "autotune/Policy.h"

#include "keys/Errors.h"

#include "autotune/ShapeClass.h"
#include "keys/TuneKey.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace bitfold;
using namespace bitfold::autotune;

llvm::StringRef autotune::provenanceName(Provenance p) {
  switch (p) {
  case Provenance::Database: return "tune DB";
  case Provenance::Default: return "default";
  case Provenance::DefaultStale: return "default (stale DB entry)";
  case Provenance::DefaultInvalid: return "default (DB config not legal)";
  case Provenance::DefaultTuning: return "default (tuning in background)";
  case Provenance::TunedNow: return "tuned now";
  case Provenance::DefaultTuneFailed: return "default (tuning failed)";
  case Provenance::DefaultBudgetSpent: return "default (tuning budget spent)";
  }
  return "?";
}

TunePolicy::TunePolicy(PolicyOptions options, TuneDB initial)
    : opts(std::move(options)), db(std::move(initial)) {
  if (!opts.warn)
    opts.warn = [](llvm::StringRef m) {
      llvm::errs() << "bitfold: warning: " << m << "\n";
    };
}

llvm::Expected<std::unique_ptr<TunePolicy>>
TunePolicy::open(PolicyOptions options) {
  TuneDB initial;
  if (!options.dbPath.empty()) {
    auto loaded = TuneDB::loadOrEmpty(options.dbPath);
    if (!loaded)
      return loaded.takeError();
    initial = std::move(*loaded);
  }
  return std::make_unique<TunePolicy>(std::move(options), std::move(initial));
}

TunePolicy::~TunePolicy() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  if (worker.joinable())
    worker.join();
}

void TunePolicy::warnOnce(const std::string &tag, const llvm::Twine &message) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(tag).second)
      return;
  }
  opts.warn(message.str());
}

std::optional<Choice> TunePolicy::fromDatabase(const ChooseRequest &req,
                                              Choice &fallback) {
  const std::string what = req.key.kernelName + " " + req.key.shapeClass;
  std::string winnerText;
  Lookup found;
  {
    std::lock_guard<std::mutex> lock(mu);
    found = db.lookup(req.key);
    if (found.kind == Lookup::Hit)
      if (const Measurement *w = found.entry->winner())
        winnerText = w->config;
  }
  if (!winnerText.empty()) {
    auto parsed = keys::TileConfig::parse(winnerText);
    llvm::Error bad = parsed ? (req.check ? req.check(*parsed)
                                          : llvm::Error::success())
                             : parsed.takeError();
    if (!bad)
      return Choice{*parsed, Provenance::Database, ""};
    std::string why = llvm::toString(std::move(bad));
    warnOnce("invalid\n" + req.key.text(),
             "tune DB entry for " + what + " names config " + winnerText +
                 ", which is not legal here (" + why +
                 "); using the default");
    // An entry exists for this environment: tuning again would not help.
    return Choice{req.defaultConfig, Provenance::DefaultInvalid, why};
  }
  if (found.kind == Lookup::Stale) {
    warnOnce("stale\n" + req.key.text(),
             "tune DB entry for " + what + " not used: " + found.reason);
    fallback.from = Provenance::DefaultStale;
    fallback.detail = found.reason;
  }
  return std::nullopt;
}

Choice TunePolicy::choose(const ChooseRequest &req) {
  Choice fallback{req.defaultConfig, Provenance::Default, ""};
  if (std::optional<Choice> c = fromDatabase(req, fallback))
    return *c;
  if (!req.tune || opts.onMiss == OnMiss::UseDefault)
    return fallback;
  if (budgetSpent()) {
    if (fallback.from == Provenance::Default)
      fallback.from = Provenance::DefaultBudgetSpent;
    return fallback;
  }
  switch (opts.onMiss) {
  case OnMiss::UseDefault:
    return fallback;
  case OnMiss::TuneNow:
    return tuneNow(req, fallback);
  case OnMiss::TuneInBackground:
    return tuneInBackground(req, fallback);
  }
  return fallback;
}

bool TunePolicy::budgetSpent() const {
  std::lock_guard<std::mutex> lock(mu);
  return opts.budgetSeconds > 0 && secondsSpent >= opts.budgetSeconds;
}

llvm::Expected<TuneOutcome> TunePolicy::timedTune(const ChooseRequest &req) {
  const auto t0 = std::chrono::steady_clock::now();
  auto outcome = req.tune();
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  std::lock_guard<std::mutex> lock(mu);
  secondsSpent += took.count();
  return outcome;
}

Choice TunePolicy::tuneNow(const ChooseRequest &req, const Choice &fallback) {
  auto outcome = timedTune(req);
  if (!outcome) {
    std::string why = llvm::toString(outcome.takeError());
    warnOnce("tune\n" + req.key.text(), "tuning " + req.key.kernelName + " " +
                                            req.key.shapeClass +
                                            " failed: " + why);
    return Choice{fallback.config, Provenance::DefaultTuneFailed, why};
  }
  std::string winner;
  {
    std::lock_guard<std::mutex> lock(mu);
    db.record(req.key, *outcome);
    if (const TuneEntry *e = db.lookup(req.key).entry)
      if (const Measurement *w = e->winner())
        winner = w->config;
  }
  persist();
  auto parsed = keys::TileConfig::parse(winner);
  if (!parsed)
    return Choice{fallback.config, Provenance::DefaultTuneFailed,
                  llvm::toString(parsed.takeError())};
  if (req.check)
    if (llvm::Error e = req.check(*parsed))
      return Choice{fallback.config, Provenance::DefaultInvalid,
                    llvm::toString(std::move(e))};
  return Choice{*parsed, Provenance::TunedNow, ""};
}

Choice TunePolicy::tuneInBackground(const ChooseRequest &req, Choice fallback) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (gaveUp.count(req.key.text())) {
      if (fallback.from == Provenance::Default)
        fallback.from = Provenance::DefaultTuneFailed;
      return fallback; // failed once: not retried in this process
    }
    if (tuning.insert(req.key.text()).second) {
      queue.push_back(req);
      if (!worker.joinable())
        worker = std::thread([this] { backgroundLoop(); });
    }
  }
  cv.notify_all();
  if (fallback.from == Provenance::Default)
    fallback.from = Provenance::DefaultTuning;
  return fallback;
}

policy::ConfigAnswer
TunePolicy::configFor(const policy::ConfigRequest &r) {
  ChooseRequest req;
  req.key = keys::tuneKeyFor(*r.def, r.shapeClass.str(),
                       keys::currentEnvironment(r.gpuName, r.arch, r.toolchain));
  req.defaultConfig = r.defaultConfig;
  req.check = r.check;
  if (opts.tuner && opts.onMiss != OnMiss::UseDefault) {
    policy::ConfigRequest owned = r; // background tunes outlive `r`
    owned.check = nullptr;
    req.tune = [tuner = opts.tuner, owned] { return tuner(owned); };
  }
  Choice c = choose(req);
  return policy::ConfigAnswer{c.config, provenanceName(c.from).str(),
                               c.from == Provenance::DefaultTuning};
}

void TunePolicy::backgroundLoop() {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    cv.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty())
      return; // stopping, nothing left
    ChooseRequest req = std::move(queue.front());
    queue.erase(queue.begin());
    lock.unlock();
    std::string keyText = req.key.text();
    auto outcome = budgetSpent() ? llvm::Expected<TuneOutcome>(keys::tuneError(
                                       "the tuning budget is spent"))
                                 : timedTune(req);
    const bool failed = !outcome;
    if (failed) {
      warnOnce("tune\n" + keyText, "background tuning of " +
                                       req.key.kernelName + " " +
                                       req.key.shapeClass + " failed: " +
                                       llvm::toString(outcome.takeError()));
    } else {
      {
        std::lock_guard<std::mutex> g(mu);
        db.record(req.key, *outcome);
      }
      persist();
      recorded.fetch_add(1, std::memory_order_acq_rel);
    }
    lock.lock();
    if (failed)
      gaveUp.insert(keyText);
    tuning.erase(keyText);
    cv.notify_all();
  }
}

/// Persists the DB (merged with the file's current contents).
void TunePolicy::persist() {
  if (opts.dbPath.empty())
    return;
  // TuneDB::save's temp file is named by pid: one writer per process at a
  // time (tunes may finish on launch threads and the background thread,
  // of several runtimes).
  static std::mutex persistMu;
  std::lock_guard<std::mutex> writer(persistMu);
  TuneDB merged;
  auto onDisk = TuneDB::loadOrEmpty(opts.dbPath);
  if (!onDisk) {
    warnOnce("read\n" + opts.dbPath,
             "tune DB not merged before writing: " +
                 llvm::toString(onDisk.takeError()));
  } else {
    merged = std::move(*onDisk);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    merged.merge(db);
    db = merged; // pick up what other processes wrote
  }
  if (llvm::Error e = merged.save(opts.dbPath))
    warnOnce("write\n" + opts.dbPath,
             "cannot persist the tune DB: " + llvm::toString(std::move(e)));
}

void TunePolicy::waitIdle() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return tuning.empty(); });
}

TuneDB TunePolicy::snapshot() const {
  std::lock_guard<std::mutex> lock(mu);
  return db;
}
