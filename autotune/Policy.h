//===- autotune/Policy.h - Which config the runtime launches -----*- C++ -*-===//
//
// Which config a shape class gets: given a key (kernel hash, shape class,
// dtypes, environment) and the heuristic default config, choose() answers
// with a TileConfig and where it came from. TunePolicy is the runtime's
// config source (policy/ConfigSource.h: configFor() builds the key and
// calls choose()). It never blocks on a GPU unless the caller chose
// synchronous tuning:
//
//   DB hit (same environment, legal config)     -> the DB's winner
//   otherwise, by PolicyOptions::onMiss:
//     UseDefault        -> the default, at once
//     TuneNow           -> tune here (calls the request's tune function),
//                          record, persist, use the winner
//     TuneInBackground  -> the default at once; a background thread tunes
//                          (once per key), records and persists; later
//                          calls hit the DB
//
// A stale entry (other GPU or versions) or an illegal config in the DB is
// never used: the caller is warned once per key (PolicyOptions::warn) and
// the miss rule applies. Persisting merges with whatever the DB file holds
// now (TuneDB::merge), so processes sharing a file do not drop each other's
// results (the read-merge-rename window is not locked: a concurrent writer
// may lose its last write, never corrupt the file).
//
// CPU only: tuning itself is injected (ChooseRequest::tune).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_POLICY_H
#define BITFOLD_AUTOTUNE_POLICY_H

#include "autotune/TuneDB.h"

#include "policy/ConfigSource.h"

#include "codegen/Codegen.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace bitfold::autotune {

enum class OnMiss { UseDefault, TuneNow, TuneInBackground };

struct PolicyOptions {
  OnMiss onMiss = OnMiss::UseDefault;
  /// Tune DB file: read by open(), and where tuned results are persisted.
  /// Empty: memory only.
  std::string dbPath;
  /// Warnings (stale entries, failed tunes, failed writes); default:
  /// stderr, "bitfold: warning: ...".
  std::function<void(llvm::StringRef)> warn;
  /// How configFor() tunes a missed class under TuneNow / TuneInBackground
  /// (e.g. searchConfigs on the request's GPU); without one it never tunes.
  /// Background tunes run it on the policy's thread with a request whose
  /// `check` is empty.
  std::function<llvm::Expected<TuneOutcome>(
      const policy::ConfigRequest &)>
      tuner;
  /// Wall time all tunes may take together; once spent, misses get the
  /// default (Provenance::DefaultBudgetSpent). <= 0: unlimited.
  double budgetSeconds = 0;
};

enum class Provenance {
  Database,       ///< the DB's winner for this environment.
  Default,        ///< no entry; heuristic default.
  DefaultStale,   ///< only a stale entry (detail: why); default used.
  DefaultInvalid, ///< the DB's winner is not legal here (detail); default.
  DefaultTuning,  ///< default while a background tune runs.
  TunedNow,       ///< tuned synchronously by this call.
  DefaultTuneFailed, ///< tuning failed (detail); default used.
  DefaultBudgetSpent, ///< the tuning budget is spent; default used.
};
llvm::StringRef provenanceName(Provenance p);

struct Choice {
  keys::TileConfig config;
  Provenance from = Provenance::Default;
  std::string detail;
};

struct ChooseRequest {
  TuneKey key;
  keys::TileConfig defaultConfig;
  /// Legality of a config from the DB (e.g. codegen::checkConfig bound to
  /// the KernelDef and ShapeSpec). Optional.
  std::function<llvm::Error(const keys::TileConfig &)> check;
  /// Tunes `key` (e.g. autotune::searchConfigs on the current GPU).
  /// Needed unless onMiss is UseDefault. Background tunes run it on the
  /// policy's thread: it must own what it captures.
  std::function<llvm::Expected<TuneOutcome>()> tune;
};

class TunePolicy final : public policy::ConfigSource {
public:
  explicit TunePolicy(PolicyOptions options, TuneDB db = {});
  /// Loads options.dbPath when it exists (an unreadable DB is an error).
  static llvm::Expected<std::unique_ptr<TunePolicy>> open(PolicyOptions options);
  /// Waits for background tunes.
  ~TunePolicy();
  TunePolicy(const TunePolicy &) = delete;
  TunePolicy &operator=(const TunePolicy &) = delete;

  /// Thread safe.
  Choice choose(const ChooseRequest &request);
  /// The runtime's question: choose() for the request's tune key. An
  /// answer given while its class tunes in the background is provisional.
  policy::ConfigAnswer configFor(const policy::ConfigRequest &request) override;
  /// Moves each time a background tune records its result.
  uint64_t generation() const override {
    return recorded.load(std::memory_order_acquire);
  }

  /// Blocks until no background tune is queued or running.
  void waitIdle();
  /// A copy of the DB as it is now.
  TuneDB snapshot() const;

private:
  /// The DB's answer for `req`: its winner, or the default when the winner
  /// is not legal (final), or nullopt on a miss (`fallback` then says
  /// whether a stale entry was seen).
  std::optional<Choice> fromDatabase(const ChooseRequest &req, Choice &fallback);
  Choice tuneNow(const ChooseRequest &req, const Choice &fallback);
  Choice tuneInBackground(const ChooseRequest &req, Choice fallback);
  void persist();
  void warnOnce(const std::string &tag, const llvm::Twine &message);
  void backgroundLoop();
  /// Runs req.tune, charging its wall time to the budget.
  llvm::Expected<TuneOutcome> timedTune(const ChooseRequest &req);
  bool budgetSpent() const;

  PolicyOptions opts;
  mutable std::mutex mu;
  std::condition_variable cv;
  TuneDB db;
  std::set<std::string> warned;
  std::set<std::string> tuning; ///< key texts queued or running.
  std::set<std::string> gaveUp; ///< background tunes that failed.
  std::vector<ChooseRequest> queue;
  bool stopping = false;
  std::thread worker; ///< started on the first background tune.
  double secondsSpent = 0; ///< tuning wall time so far (under mu).
  std::atomic<uint64_t> recorded{0};
};

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_POLICY_H
