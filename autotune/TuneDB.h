//===- autotune/TuneDB.h - Measured tile configs, per shape class -*- C++ -*-===//
//
// The tune DB: a JSON file of every config's timing per (kernel, shape
// class, dtypes) on one GPU and toolchain. It keeps all measurements, not
// only the winner, so adding configs or tuning again never discards old
// timings.
//
// Contract:
//  - An entry's identity is its TuneKey: the kernel hash, shape class and
//    dtypes (what is tuned) plus the environment (GPU name, arch, bitfold,
//    LLVM and PTX->cubin toolchain versions: where it was tuned).
//  - lookup() never returns an entry tuned elsewhere as a hit: an entry for
//    the same kernel and shape class under another environment is "stale",
//    with the reason (which field differs, both values).
//  - merge() is deterministic: the result does not depend on the order of
//    the merged DBs, and merging a DB into itself changes nothing. Per
//    (key, config) the measurement kept is the one with more samples, then
//    the lower median, then the lower spread, then the smaller JSON text.
//  - load() is strict: every field has its exact JSON type and range
//    (integers are never rounded or wrapped, timings are finite and >= 0);
//    a bad file is an error, never a DB with altered values.
//  - save() writes entries and measurements sorted, to a temp file renamed
//    into place: the same DB always gives the same bytes.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_TUNEDB_H
#define BITFOLD_AUTOTUNE_TUNEDB_H

#include "keys/TuneKey.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bitfold::autotune {

/// Format version of the DB file ("version" field).
constexpr int kTuneDBFormat = 1;

/// The DB's key (keys/TuneKey.h).
using keys::TuneEnvironment;
using keys::TuneKey;

/// One config's timing on one key.
struct Measurement {
  std::string config;    ///< TileConfig::str().
  double medianUs = 0;
  double spreadUs = 0;   ///< interquartile range (p75 - p25) of the samples.
  double minUs = 0, maxUs = 0;
  int samples = 0;       ///< timed runs behind the median.
  bool cut = false;      ///< stopped early: clearly slower than the best.

  /// Whether this should replace `other` for the same (key, config): the
  /// merge rule above. A strict total order on distinct measurements.
  bool preferredOver(const Measurement &other) const;
};

/// The fastest fully timed measurement (not cut), ties by config text;
/// null when nothing was fully timed.
const Measurement *fastestOf(llvm::ArrayRef<Measurement> measurements);
/// The measurement of `config`; null when there is none.
const Measurement *findConfig(llvm::ArrayRef<Measurement> measurements,
                              llvm::StringRef config);

/// What one tune of a key produced: every timed config, and the default's
/// text (autotune/TuneShape.h).
struct TuneOutcome {
  std::string defaultConfig;
  std::vector<Measurement> measurements;

  const Measurement *winner() const { return fastestOf(measurements); }
  const Measurement *find(llvm::StringRef config) const {
    return findConfig(measurements, config);
  }
};

struct TuneEntry {
  TuneKey key;
  std::string defaultConfig; ///< the heuristic default (for speed-up).
  std::vector<Measurement> measurements; ///< sorted by config text.

  /// The fastest fully timed config (not cut), ties by config text; null
  /// when nothing was fully timed.
  const Measurement *winner() const;
  const Measurement *find(llvm::StringRef config) const;
};

/// Result of a lookup.
struct Lookup {
  enum Kind { Miss, Hit, Stale } kind = Miss;
  const TuneEntry *entry = nullptr; ///< Hit: the entry; Stale: the entry
                                    ///< that was rejected.
  std::string reason;               ///< Stale: why (for the caller's warning).
};

class TuneDB {
public:
  /// Reads a DB file; errors name the file and what is wrong.
  static llvm::Expected<TuneDB> load(llvm::StringRef path);
  /// load(), or an empty DB when the file does not exist.
  static llvm::Expected<TuneDB> loadOrEmpty(llvm::StringRef path);
  static llvm::Expected<TuneDB> fromJsonText(llvm::StringRef text);
  /// Canonical JSON (sorted, two-space indented, trailing newline).
  std::string toJsonText() const;
  /// Writes toJsonText() to a temp file next to `path`, renamed into place.
  llvm::Error save(llvm::StringRef path) const;

  /// Adds measurements under `key` by the merge rule; `defaultConfig` is
  /// recorded when non-empty.
  void record(const TuneKey &key, llvm::StringRef defaultConfig,
              llvm::ArrayRef<Measurement> measurements);
  void record(const TuneKey &key, const TuneOutcome &outcome) {
    record(key, outcome.defaultConfig, outcome.measurements);
  }
  /// Merges `other` into this DB (deterministic, see above).
  void merge(const TuneDB &other);
  /// `bitfold tune merge`: loads every input strictly (types and ranges;
  /// any bad input is an error naming it, and nothing is written), merges
  /// them and saves the result to `output`.
  static llvm::Expected<TuneDB> mergeFiles(llvm::ArrayRef<std::string> inputs,
                                           llvm::StringRef output);

  Lookup lookup(const TuneKey &key) const;

  size_t size() const { return entries.size(); }
  /// Entries in key-text order.
  std::vector<const TuneEntry *> all() const;
  bool operator==(const TuneDB &other) const {
    return toJsonText() == other.toJsonText();
  }

private:
  std::map<std::string, TuneEntry> entries; ///< by TuneKey::text().
};

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_TUNEDB_H
