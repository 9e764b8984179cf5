//===- tools/CacheCommand.cpp - `bitfold cache` ---------------------------===//

#include "tools/Commands.h"

#include "runtime/KernelCache.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>
#include <map>

using namespace bitfold;
using namespace bitfold::tools;
using runtime::decodeEntry;

namespace {

struct EntryFile {
  std::string path;
  std::string hash; ///< from the file name
  uint64_t bytes = 0;
  std::string problem; ///< empty: valid
  nlohmann::json meta;
};

/// Every entry of the cache layout under dir (runtime::listCacheDir), with
/// its metadata parsed; plus counts of temp and lock files and the problems
/// that make the listing incomplete (unreadable folders).
std::vector<EntryFile> scanCache(const std::string &dir, int *tmpFiles,
                                 int *lockFiles,
                                 std::vector<std::string> *problems) {
  runtime::CacheListing listing = runtime::listCacheDir(dir);
  *tmpFiles = listing.tmpFiles;
  *lockFiles = listing.lockFiles;
  *problems = listing.problems;
  std::vector<EntryFile> entries;
  for (runtime::CacheFileInfo &f : listing.entries)
    entries.push_back({f.path, f.hash, f.bytes, f.problem,
                       nlohmann::json::parse(f.metaJson, nullptr, false)});
  std::sort(entries.begin(), entries.end(),
            [](const EntryFile &a, const EntryFile &b) {
              std::string ka = a.meta.is_object() ? a.meta.value("kernel", "") : "";
              std::string kb = b.meta.is_object() ? b.meta.value("kernel", "") : "";
              return std::tie(ka, a.path) < std::tie(kb, b.path);
            });
  return entries;
}

std::string field(const nlohmann::json &m, const char *k) {
  if (!m.is_object())
    return "?";
  auto it = m.find(k);
  return it != m.end() && it->is_string() ? it->get<std::string>() : "?";
}

std::string humanBytes(uint64_t b) {
  if (b >= (uint64_t(1) << 20))
    return llvm::formatv("{0:f1} MiB", double(b) / (1 << 20));
  if (b >= 1024)
    return llvm::formatv("{0:f1} KiB", double(b) / 1024);
  return llvm::formatv("{0} B", b);
}

std::string age(const nlohmann::json &m) {
  if (!m.is_object() || !m.contains("createdAt"))
    return "?";
  int64_t s = int64_t(std::time(nullptr)) - m["createdAt"].get<int64_t>();
  if (s < 120)
    return llvm::formatv("{0}s", s);
  if (s < 7200)
    return llvm::formatv("{0}m", s / 60);
  if (s < 172800)
    return llvm::formatv("{0}h", s / 3600);
  return llvm::formatv("{0}d", s / 86400);
}

void listEntries(const std::vector<EntryFile> &entries, llvm::StringRef dir,
                 llvm::raw_ostream &out) {
  out << llvm::formatv("{0,-16}  {1,-22} {2,-30} {3,-16} {4,-7} {5,10} {6,5}\n",
                       "key", "kernel", "shape", "config", "arch", "size",
                       "age");
  for (const EntryFile &e : entries) {
    if (!e.problem.empty()) {
      out << llvm::formatv("{0,-16}  INVALID: {1}\n",
                           llvm::StringRef(e.hash).take_front(16), e.problem);
      continue;
    }
    out << llvm::formatv("{0,-16}  {1,-22} {2,-30} {3,-16} {4,-7} {5,10} {6,5}\n",
                         llvm::StringRef(e.hash).take_front(16),
                         field(e.meta, "kernel"), field(e.meta, "shape"),
                         field(e.meta, "config"), field(e.meta, "arch"),
                         humanBytes(e.bytes), age(e.meta));
  }
  out << entries.size() << " entries in " << dir << "\n";
}

void printStats(const std::vector<EntryFile> &entries, llvm::StringRef dir,
                int tmpFiles, int lockFiles, llvm::raw_ostream &out) {
  uint64_t total = 0;
  int bad = 0;
  std::map<std::string, std::pair<int, uint64_t>> perKernel;
  for (const EntryFile &e : entries) {
    total += e.bytes;
    if (!e.problem.empty()) {
      ++bad;
      continue;
    }
    auto &pk = perKernel[field(e.meta, "kernel")];
    ++pk.first;
    pk.second += e.bytes;
  }
  out << "directory: " << dir << "\n"
      << "entries:   " << entries.size() << " (" << humanBytes(total) << ")\n"
      << "invalid:   " << bad << "\n"
      << "temp files: " << tmpFiles << ", lock files: " << lockFiles << "\n";
  for (const auto &[kernel, cb] : perKernel)
    out << llvm::formatv("  {0,-24} {1,5} entries {2,10}\n", kernel, cb.first,
                         humanBytes(cb.second));
}

int verifyEntries(const std::vector<EntryFile> &entries,
                  llvm::ArrayRef<std::string> problems, llvm::StringRef dir,
                  bool deleteBad, llvm::raw_ostream &out) {
  int bad = 0;
  for (const std::string &p : problems)
    out << "BAD " << p << "\n";
  for (const EntryFile &e : entries) {
    if (e.problem.empty())
      continue;
    ++bad;
    out << "BAD " << e.path << ": " << e.problem << "\n";
    if (deleteBad) {
      std::error_code ec = llvm::sys::fs::remove(e.path);
      out << (ec ? "  could not delete: " + ec.message() : "  deleted")
          << "\n";
    }
  }
  out << entries.size() - bad << " of " << entries.size()
      << " entries valid in " << dir << "\n";
  return (bad && !deleteBad) || !problems.empty() ? kFailed : kOk;
}

/// Removes only the cache's own files (runtime::clearCacheDir: its layout,
/// never through a symlink). Exit 1 when a file could not be removed.
int clearCache(const std::string &dir, llvm::raw_ostream &out,
               llvm::raw_ostream &err) {
  auto cleared = runtime::clearCacheDir(dir);
  if (!cleared)
    return report(err, "cache", cleared.takeError(), kFailed);
  out << "removed " << cleared->filesRemoved << " files ("
      << humanBytes(cleared->bytesRemoved) << ") from " << dir << "\n";
  return kOk;
}

/// Removes the oldest entries until at most maxBytes remain
/// (runtime::pruneCacheDir: the same layout rules as clear).
int pruneCache(const std::string &dir, uint64_t maxBytes,
               llvm::raw_ostream &out, llvm::raw_ostream &err) {
  auto pruned = runtime::pruneCacheDir(dir, maxBytes);
  if (!pruned)
    return report(err, "cache", pruned.takeError(), kFailed);
  out << "pruned " << pruned->filesRemoved << " files ("
      << humanBytes(pruned->bytesRemoved) << ") from " << dir
      << " to at most " << humanBytes(maxBytes) << "\n";
  return kOk;
}

} // namespace

int tools::cacheCommand(const CacheCommandOptions &o, llvm::raw_ostream &out,
                        llvm::raw_ostream &err) {
  std::string dir = o.dir.empty() ? runtime::defaultCacheDir() : o.dir;
  llvm::sys::fs::file_status st;
  std::error_code ec = llvm::sys::fs::status(dir, st);
  if (ec == std::errc::no_such_file_or_directory) {
    out << "cache directory " << dir << " does not exist (empty cache)\n";
    return kOk;
  }
  if (ec)
    return report(err, "cache", "cannot read '" + dir + "': " + ec.message(),
                  kFailed);
  if (!llvm::sys::fs::is_directory(st))
    return report(err, "cache",
                  "'" + dir + "' is not a directory (--dir names the cache "
                              "directory)",
                  kUsage);
  if (o.action == CacheAction::Clear)
    return clearCache(dir, out, err);
  if (o.action == CacheAction::Prune)
    return pruneCache(dir, o.maxBytes, out, err);
  int tmpFiles = 0, lockFiles = 0;
  std::vector<std::string> problems;
  std::vector<EntryFile> entries =
      scanCache(dir, &tmpFiles, &lockFiles, &problems);
  switch (o.action) {
  case CacheAction::Ls:
    listEntries(entries, dir, out);
    return kOk;
  case CacheAction::Stats:
    printStats(entries, dir, tmpFiles, lockFiles, out);
    return kOk;
  case CacheAction::Verify:
    return verifyEntries(entries, problems, dir, o.deleteBad, out);
  case CacheAction::Clear:
  case CacheAction::Prune:
    break;
  }
  return kOk;
}
