//===- autotune/TuneDB.cpp - The tune DB: JSON, merge, lookup -------------===//

#include "autotune/TuneDB.h"

#include "keys/Errors.h"

#include "fileio/File.h"
#include "keys/TileConfig.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <tuple>

using namespace bitfold;
using namespace bitfold::autotune;
using nlohmann::json;

namespace {

json toJson(const Measurement &m) {
  return json{{"config", m.config},   {"medianUs", m.medianUs},
              {"spreadUs", m.spreadUs}, {"minUs", m.minUs},
              {"maxUs", m.maxUs},     {"samples", m.samples},
              {"cut", m.cut}};
}

json toJson(const TuneKey &k) {
  return json{{"kernel", k.kernelName},
              {"kernelHash", k.kernelHash},
              {"shapeClass", k.shapeClass},
              {"dtypes", k.dtypes},
              {"gpu", k.env.gpuName},
              {"arch", k.env.arch},
              {"bitfold", k.env.bitfoldVersion},
              {"llvm", k.env.llvmVersion},
              {"toolchain", k.env.toolchain}};
}

/// The value of a required field, or an error naming it.
llvm::Expected<const json &> member(const json &j, const char *name,
                                    const llvm::Twine &where) {
  auto it = j.find(name);
  if (it == j.end())
    return keys::cacheError(where + ": missing field '" + name + "'");
  return *it;
}

/// Reads a required field with its exact JSON type and range: a string, a
/// boolean, an integer in [0, INT_MAX] (never a fraction or a rounded huge
/// number) or a finite non-negative number. Nothing is converted silently.
llvm::Error field(const json &j, const char *name, std::string &out,
                  const llvm::Twine &where) {
  auto v = member(j, name, where);
  if (!v)
    return v.takeError();
  if (!v->is_string())
    return keys::cacheError(where + ": field '" + name + "' must be a string");
  out = v->get<std::string>();
  return llvm::Error::success();
}

llvm::Error field(const json &j, const char *name, bool &out,
                  const llvm::Twine &where) {
  auto v = member(j, name, where);
  if (!v)
    return v.takeError();
  if (!v->is_boolean())
    return keys::cacheError(where + ": field '" + name +
                            "' must be true or false");
  out = v->get<bool>();
  return llvm::Error::success();
}

llvm::Error field(const json &j, const char *name, int &out,
                  const llvm::Twine &where) {
  auto v = member(j, name, where);
  if (!v)
    return v.takeError();
  if (!v->is_number_integer() ||
      (v->is_number_unsigned()
           ? v->get<uint64_t>() > uint64_t(std::numeric_limits<int>::max())
           : v->get<int64_t>() < 0 ||
                 v->get<int64_t>() > std::numeric_limits<int>::max()))
    return keys::cacheError(
        where + ": field '" + name + "' must be an integer in [0, " +
        llvm::Twine(std::numeric_limits<int>::max()) + "], not " + v->dump());
  out = int(v->get<int64_t>());
  return llvm::Error::success();
}

llvm::Error field(const json &j, const char *name, double &out,
                  const llvm::Twine &where) {
  auto v = member(j, name, where);
  if (!v)
    return v.takeError();
  if (!v->is_number() || !std::isfinite(v->get<double>()) ||
      v->get<double>() < 0)
    return keys::cacheError(where + ": field '" + name +
                            "' must be a finite number >= 0, not " + v->dump());
  out = v->get<double>();
  return llvm::Error::success();
}

/// A parser callback that records the first key repeated within one JSON
/// object into `duplicate` (keys of each open object on a stack).
json::parser_callback_t duplicateKeyFinder(std::string &duplicate) {
  auto open = std::make_shared<std::vector<std::set<std::string>>>();
  return [open, &duplicate](int, json::parse_event_t event, json &parsed) {
    if (event == json::parse_event_t::object_start)
      open->emplace_back();
    else if (event == json::parse_event_t::object_end && !open->empty())
      open->pop_back();
    else if (event == json::parse_event_t::key && !open->empty() &&
             !open->back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
}

/// One measurement: every field typed and in range, the config a tile
/// config this build reads, and min <= median <= max.
llvm::Expected<Measurement> readMeasurement(const json &jm,
                                            std::string where) {
  Measurement m;
  if (llvm::Error e = field(jm, "config", m.config, where))
    return std::move(e);
  where += " '" + m.config + "'";
  if (auto c = keys::TileConfig::parse(m.config); !c)
    return keys::cacheError(
        where + ": not a tile config: " + llvm::toString(c.takeError()));
  for (auto [name, out] : {std::pair{"medianUs", &m.medianUs},
                           {"spreadUs", &m.spreadUs},
                           {"minUs", &m.minUs},
                           {"maxUs", &m.maxUs}})
    if (llvm::Error e = field(jm, name, *out, where))
      return std::move(e);
  if (llvm::Error e = field(jm, "samples", m.samples, where))
    return std::move(e);
  if (llvm::Error e = field(jm, "cut", m.cut, where))
    return std::move(e);
  if (m.samples > 0 && !(m.minUs <= m.medianUs && m.medianUs <= m.maxUs))
    return keys::cacheError(
        llvm::formatv("{0}: needs minUs <= medianUs <= maxUs, "
                      "found {1} <= {2} <= {3}",
                      where, json(m.minUs).dump(), json(m.medianUs).dump(),
                      json(m.maxUs).dump()));
  return m;
}

} // namespace

// ---- Measurements and entries ----------------------------------------------

bool Measurement::preferredOver(const Measurement &o) const {
  if (samples != o.samples)
    return samples > o.samples;
  if (medianUs != o.medianUs)
    return medianUs < o.medianUs;
  if (spreadUs != o.spreadUs)
    return spreadUs < o.spreadUs;
  return toJson(*this).dump() < toJson(o).dump();
}

const Measurement *autotune::fastestOf(llvm::ArrayRef<Measurement> ms) {
  const Measurement *best = nullptr;
  for (const Measurement &m : ms) {
    if (m.cut || m.samples <= 0)
      continue;
    if (!best || m.medianUs < best->medianUs ||
        (m.medianUs == best->medianUs && m.config < best->config))
      best = &m;
  }
  return best;
}

const Measurement *autotune::findConfig(llvm::ArrayRef<Measurement> ms,
                                        llvm::StringRef config) {
  for (const Measurement &m : ms)
    if (m.config == config)
      return &m;
  return nullptr;
}

const Measurement *TuneEntry::winner() const { return fastestOf(measurements); }

const Measurement *TuneEntry::find(llvm::StringRef config) const {
  return findConfig(measurements, config);
}

// ---- The DB ------------------------------------------------------------------

void TuneDB::record(const TuneKey &key, llvm::StringRef defaultConfig,
                    llvm::ArrayRef<Measurement> ms) {
  std::string text = key.text();
  auto [it, inserted] = entries.try_emplace(text);
  TuneEntry &e = it->second;
  if (inserted) {
    e.key = key;
  } else if (key.kernelName < e.key.kernelName) {
    e.key.kernelName = key.kernelName; // names are informational
  }
  if (!defaultConfig.empty() &&
      (e.defaultConfig.empty() || defaultConfig < e.defaultConfig))
    e.defaultConfig = defaultConfig.str();
  for (const Measurement &m : ms) {
    auto pos = std::lower_bound(
        e.measurements.begin(), e.measurements.end(), m.config,
        [](const Measurement &a, const std::string &c) { return a.config < c; });
    if (pos != e.measurements.end() && pos->config == m.config) {
      if (m.preferredOver(*pos))
        *pos = m;
    } else {
      e.measurements.insert(pos, m);
    }
  }
}

void TuneDB::merge(const TuneDB &other) {
  for (const auto &[text, e] : other.entries)
    record(e.key, e.defaultConfig, e.measurements);
}

llvm::Expected<TuneDB> TuneDB::mergeFiles(llvm::ArrayRef<std::string> inputs,
                                          llvm::StringRef output) {
  TuneDB merged;
  for (const std::string &in : inputs) {
    auto db = load(in);
    if (!db)
      return keys::cacheError(llvm::toString(db.takeError()) +
                              "; nothing written to '" + output + "'");
    merged.merge(*db);
  }
  if (llvm::Error e = merged.save(output))
    return std::move(e);
  return merged;
}

Lookup TuneDB::lookup(const TuneKey &key) const {
  Lookup l;
  auto it = entries.find(key.text());
  if (it != entries.end()) {
    l.kind = Lookup::Hit;
    l.entry = &it->second;
    return l;
  }
  // Same problem tuned elsewhere: stale, never used silently.
  std::string problem = key.problemText();
  for (const auto &[text, e] : entries) {
    if (e.key.problemText() != problem)
      continue;
    l.kind = Lookup::Stale;
    l.entry = &e;
    l.reason = e.key.env.mismatch(key.env);
    return l;
  }
  return l;
}

std::vector<const TuneEntry *> TuneDB::all() const {
  std::vector<const TuneEntry *> out;
  for (const auto &[text, e] : entries)
    out.push_back(&e);
  return out;
}

std::string TuneDB::toJsonText() const {
  json list = json::array();
  for (const auto &[text, e] : entries) {
    json ms = json::array();
    for (const Measurement &m : e.measurements)
      ms.push_back(toJson(m));
    json je{{"key", toJson(e.key)},
            {"defaultConfig", e.defaultConfig},
            {"measurements", std::move(ms)}};
    if (const Measurement *w = e.winner())
      je["winner"] = w->config; // derived; for readers, ignored on load
    list.push_back(std::move(je));
  }
  json root{{"format", "bitfold-tune-db"},
            {"version", kTuneDBFormat},
            {"entries", std::move(list)}};
  return root.dump(2) + "\n";
}

llvm::Expected<TuneDB> TuneDB::fromJsonText(llvm::StringRef text) {
  std::string duplicate;
  json root = json::parse(text.begin(), text.end(), duplicateKeyFinder(duplicate),
                          /*allow_exceptions=*/false);
  if (root.is_discarded())
    return keys::cacheError("not valid JSON");
  // JSON leaves a repeated key's meaning open (nlohmann keeps the last);
  // a DB that says two things about one field is refused, not guessed at.
  if (!duplicate.empty())
    return keys::cacheError("the key \"" + duplicate +
                            "\" appears twice in one object");
  auto format = root.is_object() ? root.find("format") : root.end();
  if (!root.is_object() || format == root.end() || !format->is_string() ||
      *format != "bitfold-tune-db")
    return keys::cacheError("not a bitfold tune DB (\"format\" is not "
                            "\"bitfold-tune-db\")");
  int version = 0;
  if (llvm::Error e = field(root, "version", version, "tune DB"))
    return std::move(e);
  if (version != kTuneDBFormat)
    return keys::cacheError(
        llvm::formatv("tune DB format version {0}, this bitfold "
                      "reads version {1}",
                      version, kTuneDBFormat));
  auto entriesIt = root.find("entries");
  if (entriesIt == root.end() || !entriesIt->is_array())
    return keys::cacheError("tune DB: 'entries' must be a list");
  TuneDB db;
  size_t index = 0;
  for (const json &je : *entriesIt) {
    std::string where = llvm::formatv("entry {0}", index++);
    if (!je.is_object() || !je.contains("key") || !je["key"].is_object())
      return keys::cacheError(where + ": needs an object 'key'");
    const json &jk = je["key"];
    TuneKey k;
    std::string defaultConfig;
    for (auto [name, out] :
         {std::pair{"kernel", &k.kernelName},
          {"kernelHash", &k.kernelHash},
          {"shapeClass", &k.shapeClass},
          {"dtypes", &k.dtypes},
          {"gpu", &k.env.gpuName},
          {"arch", &k.env.arch},
          {"bitfold", &k.env.bitfoldVersion},
          {"llvm", &k.env.llvmVersion},
          {"toolchain", &k.env.toolchain}})
      if (llvm::Error e = field(jk, name, *out, where + " key"))
        return std::move(e);
    if (je.contains("defaultConfig")) {
      if (llvm::Error e = field(je, "defaultConfig", defaultConfig, where))
        return std::move(e);
      if (!defaultConfig.empty())
        if (auto c = keys::TileConfig::parse(defaultConfig); !c)
          return keys::cacheError(
              where + ": defaultConfig '" + defaultConfig +
              "' is not a tile config: " + llvm::toString(c.takeError()));
    }
    std::vector<Measurement> ms;
    if (!je.contains("measurements") || !je["measurements"].is_array())
      return keys::cacheError(where + ": 'measurements' must be a list");
    for (const json &jm : je["measurements"]) {
      auto m = readMeasurement(jm, where + " measurement");
      if (!m)
        return m.takeError();
      ms.push_back(std::move(*m));
    }
    db.record(k, defaultConfig, ms);
  }
  return db;
}

llvm::Expected<TuneDB> TuneDB::load(llvm::StringRef path) {
  auto text = fileio::readBoundedFile(path, fileio::kMaxTuneDbBytes, "tune DB");
  if (!text)
    return keys::cacheError(llvm::toString(text.takeError()));
  auto db = fromJsonText(*text);
  if (!db)
    return keys::cacheError("tune DB '" + path +
                            "': " + llvm::toString(db.takeError()));
  return db;
}

llvm::Expected<TuneDB> TuneDB::loadOrEmpty(llvm::StringRef path) {
  if (!llvm::sys::fs::exists(path))
    return TuneDB();
  return load(path);
}

llvm::Error TuneDB::save(llvm::StringRef path) const {
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return keys::cacheError("cannot create '" + dir + "': " + ec.message());
  // A temp name of its own per save: threads of one process (two policies,
  // or a policy's worker and a synchronous tune) may save one file at once.
  if (llvm::Error e = fileio::writeFileAtomically(path, toJsonText(), "tune DB"))
    return keys::cacheError(llvm::toString(std::move(e)));
  return llvm::Error::success();
}
