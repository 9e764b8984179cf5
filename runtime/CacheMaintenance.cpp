//===- runtime/CacheMaintenance.cpp - List, clear and prune a cache dir ----===//
//
// `bitfold cache verify|clear|prune`: touch only the cache's own layout
// (see KernelCache.h), never follow a symlink, keep the locks a live
// compile holds.
//
//===----------------------------------------------------------------------===//
#include "runtime/CacheFiles.h"
#include "runtime/KernelCache.h"

#include "bitfold/Config.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::runtime::cachefs;
using json = nlohmann::json;

// ---- Maintenance -------------------------------------------------------------

namespace {

bool isLowerHex(llvm::StringRef s) {
  return llvm::all_of(s, [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool isDigits(llvm::StringRef s) {
  return !s.empty() && llvm::all_of(s, llvm::isDigit);
}

/// A file of the cache's layout.
struct LayoutFile {
  enum Kind { Entry, Lock, Temp } kind;
  std::string path, hash;
  uint64_t bytes = 0;
  int64_t mtime = 0;
};

/// Which cache file `name` (in folder `sub`) is, if any.
std::optional<LayoutFile::Kind> classify(llvm::StringRef sub,
                                         llvm::StringRef name) {
  llvm::StringRef h = name.take_front(64), rest = name.drop_front(64);
  if (h.size() != 64 || !isLowerHex(h) || !h.starts_with(sub))
    return std::nullopt;
  if (rest == ".bfk")
    return LayoutFile::Entry;
  if (rest == ".lock")
    return LayoutFile::Lock;
  auto [pid, n] = rest.drop_front(std::min<size_t>(rest.size(), 9)).split('.');
  if (rest.starts_with(".bfk.tmp.") && isDigits(pid) && isDigits(n))
    return LayoutFile::Temp;
  return std::nullopt;
}

struct LayoutWalk {
  std::vector<LayoutFile> files; ///< sorted by path.
  std::vector<std::string> folders;
  uint64_t foreign = 0;
  std::vector<std::string> problems;
};

/// The names in `dir`, or a problem.
std::vector<std::string> namesIn(const std::string &dir,
                                 std::vector<std::string> &problems) {
  std::vector<std::string> names;
  std::error_code ec;
  llvm::sys::fs::directory_iterator it(dir, ec, /*FollowSymlinks=*/false), end;
  for (; it != end && !ec; it.increment(ec))
    names.push_back(llvm::sys::path::filename(it->path()).str());
  if (ec)
    problems.push_back("cannot read directory '" + dir + "': " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

/// Every file of the cache layout under `dir`, never following a symlink.
LayoutWalk walkCache(llvm::StringRef dir) {
  LayoutWalk w;
  for (const std::string &sub : namesIn(dir.str(), w.problems)) {
    std::string subPath = (dir + "/" + sub).str();
    if (sub.size() != 2 || !isLowerHex(sub) || !isRealDirectory(subPath)) {
      ++w.foreign;
      continue;
    }
    w.folders.push_back(subPath);
    for (const std::string &name : namesIn(subPath, w.problems)) {
      std::string path = subPath + "/" + name;
      struct stat st;
      std::optional<LayoutFile::Kind> kind = classify(sub, name);
      if (!kind || ::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        ++w.foreign;
        continue;
      }
      w.files.push_back({*kind, path, name.substr(0, 64), uint64_t(st.st_size),
                         int64_t(st.st_mtime)});
    }
  }
  return w;
}

/// Whether another process holds the lock file (a compile is running).
bool lockIsHeld(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return false;
  bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

/// Removes `files`; the error names the first failure and counts them all.
llvm::Error removeAll(llvm::ArrayRef<const LayoutFile *> files,
                      CacheCleanResult &result) {
  std::string first;
  int failed = 0;
  for (const LayoutFile *f : files) {
    if (::unlink(f->path.c_str()) == 0 || errno == ENOENT) {
      ++result.filesRemoved;
      result.bytesRemoved += f->bytes;
      continue;
    }
    if (failed++ == 0)
      first = "cannot remove '" + f->path + "': " + std::strerror(errno);
  }
  if (!failed)
    return llvm::Error::success();
  return cacheError(llvm::formatv("{0} ({1} file(s) could not be removed; {2} "
                                  "removed)",
                                  first, failed, result.filesRemoved));
}

} // namespace

CacheListing bitfold::runtime::listCacheDir(llvm::StringRef dir) {
  LayoutWalk w = walkCache(dir);
  CacheListing out;
  out.problems = std::move(w.problems);
  out.foreign = int(w.foreign);
  for (const LayoutFile &f : w.files) {
    out.tmpFiles += f.kind == LayoutFile::Temp;
    out.lockFiles += f.kind == LayoutFile::Lock;
    if (f.kind != LayoutFile::Entry)
      continue;
    CacheFileInfo e;
    e.path = f.path;
    e.hash = f.hash;
    e.bytes = f.bytes;
    std::string bytes;
    if (readRegularFile(f.path, kMaxEntryBytes, bytes, e.problem) !=
        ReadStatus::Found) {
      if (e.problem.empty())
        e.problem = "cannot read it";
    } else if (auto decoded = decodeEntry(bytes); !decoded) {
      e.problem = llvm::toString(decoded.takeError());
    } else {
      e.metaJson = decoded->metaJson;
      auto digest =
          llvm::SHA256::hash(llvm::arrayRefFromStringRef(decoded->keyText));
      if (llvm::toHex(digest, true) != e.hash)
        e.problem = "the file name is not the hash of the key it holds";
    }
    out.entries.push_back(std::move(e));
  }
  return out;
}

llvm::Expected<CacheCleanResult>
bitfold::runtime::clearCacheDir(llvm::StringRef dir) {
  LayoutWalk w = walkCache(dir);
  CacheCleanResult result;
  result.foreign = w.foreign;
  std::vector<const LayoutFile *> victims;
  for (const LayoutFile &f : w.files) {
    if (f.kind == LayoutFile::Lock && lockIsHeld(f.path)) {
      ++result.busyLocks; // removing it would let a second compile start
      continue;
    }
    victims.push_back(&f);
  }
  llvm::Error e = removeAll(victims, result);
  for (const std::string &folder : w.folders)
    ::rmdir(folder.c_str()); // fails, harmlessly, unless empty
  if (!w.problems.empty() && !e)
    e = cacheError(w.problems.front());
  if (e)
    return std::move(e);
  return result;
}

llvm::Expected<CacheCleanResult>
bitfold::runtime::pruneCacheDir(llvm::StringRef dir, uint64_t maxBytes) {
  LayoutWalk w = walkCache(dir);
  CacheCleanResult result;
  result.foreign = w.foreign;
  std::vector<const LayoutFile *> entries;
  uint64_t total = 0;
  for (const LayoutFile &f : w.files)
    if (f.kind == LayoutFile::Entry) {
      entries.push_back(&f);
      total += f.bytes;
    }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const LayoutFile *a, const LayoutFile *b) {
                     return a->mtime < b->mtime;
                   });
  std::vector<const LayoutFile *> victims;
  for (const LayoutFile *f : entries) {
    if (total <= maxBytes)
      break;
    victims.push_back(f);
    total -= f->bytes;
  }
  if (llvm::Error e = removeAll(victims, result))
    return std::move(e);
  if (!w.problems.empty())
    return cacheError(w.problems.front());
  return result;
}
