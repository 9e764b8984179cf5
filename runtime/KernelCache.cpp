//===- runtime/KernelCache.cpp - Compiled kernels, in memory and on disk --===//
//
// The disk protocol, per key (jitify2's, plus a lock so one process
// compiles): read the entry without a lock; on a miss or a bad entry take
// <hash>.lock (flock), read again (another process may have just published
// it), else compile, write <hash>.bfk.tmp.<pid>.<n> and rename it over
// <hash>.bfk, then unlock.
//
//===----------------------------------------------------------------------===//

#include "runtime/KernelCache.h"

#include "runtime/CacheFiles.h"
#include "runtime/FileLock.h"

#include "fileio/File.h"

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

// ---- The cache -------------------------------------------------------------

struct KernelCache::Slot {
  std::mutex mu;
  std::condition_variable cv;
  enum State { Empty, Busy, Ready, Failed } state = Empty;
  CompiledKernelRef kernel;
  std::string error;
};

KernelCache::KernelCache(CacheOptions options) : opts(std::move(options)) {
  if (!opts.warn)
    opts.warn = [](llvm::StringRef msg) {
      const char *quiet = std::getenv("BITFOLD_QUIET");
      if (quiet && llvm::StringRef(quiet) == "1")
        return;
      llvm::errs() << "bitfold: warning: " << msg << "\n";
    };
  if (const char *d = std::getenv("BITFOLD_DISK_CACHE");
      d && llvm::StringRef(d) == "0")
    opts.disk = false;
  if (opts.disk)
    dir = opts.dir.empty() ? defaultCacheDir() : opts.dir;
  budget = kDefaultCacheMaxBytes;
  if (opts.maxBytes >= 0) {
    budget = uint64_t(opts.maxBytes);
  } else if (const char *env = std::getenv("BITFOLD_CACHE_MAX_BYTES");
             env && *env) {
    if (llvm::StringRef(env).trim().getAsInteger(10, budget)) {
      budget = kDefaultCacheMaxBytes;
      opts.warn(llvm::formatv("BITFOLD_CACHE_MAX_BYTES='{0}' is not a byte "
                              "count; using {1}",
                              env, kDefaultCacheMaxBytes)
                    .str());
    }
  }
}

KernelCache::~KernelCache() = default;

std::string KernelCache::directory() const { return dir; }

CacheStats KernelCache::stats() const {
  CacheStats s;
  s.memoryHits = counters.memoryHits;
  s.diskHits = counters.diskHits;
  s.compiles = counters.compiles;
  s.compileFailures = counters.compileFailures;
  s.corruptRebuilt = counters.corruptRebuilt;
  s.diskWriteFailures = counters.diskWriteFailures;
  s.evicted = counters.evicted;
  return s;
}

void KernelCache::warnOnce(const std::string &tag,
                           const llvm::Twine &message) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(tag).second)
      return;
  }
  opts.warn(message.str());
}

std::string CacheOrigin::describe() const {
  switch (kind) {
  case Memory: return "memory cache hit";
  case Disk: return llvm::formatv("disk cache hit ({0:f1} ms)", ms);
  case Compiled: return llvm::formatv("compiled in {0:f0} ms", ms);
  }
  return "?";
}

llvm::Expected<CompiledKernelRef>
KernelCache::getOrCompile(const CacheKey &key, const CompileFn &compile,
                          CacheOrigin *origin, const ValidateFn &validate) {
  CacheOrigin local;
  CacheOrigin &how = origin ? *origin : local;
  how = CacheOrigin{};
  std::string h = key.hash();
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Slot> &s = slots[h];
    if (!s)
      s = std::make_shared<Slot>();
    slot = s;
  }
  std::unique_lock<std::mutex> lock(slot->mu);
  slot->cv.wait(lock, [&] { return slot->state != Slot::Busy; });
  if (slot->state == Slot::Ready) {
    ++counters.memoryHits;
    return slot->kernel;
  }
  if (slot->state == Slot::Failed)
    return keys::compileError(slot->error);
  slot->state = Slot::Busy;
  lock.unlock();

  auto result = loadOrCompile(key, compile, validate, how);

  lock.lock();
  if (result) {
    slot->kernel = *result;
    slot->state = Slot::Ready;
  } else {
    slot->error = llvm::toString(result.takeError());
    slot->state = Slot::Failed;
  }
  slot->cv.notify_all();
  if (slot->state == Slot::Failed)
    return keys::compileError(slot->error);
  return slot->kernel;
}

bool KernelCache::contains(const CacheKey &key) const {
  const std::string h = key.hash();
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = slots.find(h);
    if (it != slots.end())
      slot = it->second;
  }
  if (slot) {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->state == Slot::Ready)
      return true;
  }
  return !dir.empty() && llvm::sys::fs::exists(entryPath(dir, h));
}

llvm::Expected<CompiledKernelRef>
KernelCache::compileNow(const CacheKey &key, const CompileFn &compile,
                        double *ms) {
  double t0 = nowMs();
  auto k = compile();
  *ms = nowMs() - t0;
  if (!k) {
    ++counters.compileFailures;
    return keys::compileError("compiling " + key.kernelName + " (shape " +
                              key.shape + ", config " + key.config + ", " +
                              key.arch + "): " + llvm::toString(k.takeError()));
  }
  ++counters.compiles;
  return std::make_shared<const codegen::CompiledKernel>(std::move(*k));
}

int KernelCache::lockEntry(const CacheKey &key, const std::string &path,
                           FileLock &fileLock) {
  std::string why;
  FileLock::Result locked = FileLock::Unavailable;
  llvm::StringRef parent = llvm::sys::path::parent_path(path);
  std::string lockPath = path.substr(0, path.size() - 4) + ".lock";
  if (std::error_code ec = llvm::sys::fs::create_directories(parent))
    why = ec.message();
  else if (!isRealDirectory(parent))
    locked = FileLock::EntryUnusable, why = "its folder is not a directory";
  else
    locked = fileLock.acquire(
        lockPath, opts.lockTimeoutSeconds, opts.lockNoticeSeconds,
        [&](llvm::StringRef holder) {
          opts.warn(llvm::formatv(
              "waiting for the kernel cache lock '{0}' ({1}another process "
              "is compiling {2}); compiling here after {3} s",
              lockPath, holder.empty() ? "" : "held by " + holder + ": ",
              key.kernelName, opts.lockTimeoutSeconds).str());
        },
        why);
  if (locked == FileLock::Unavailable && writable.exchange(false))
    warnOnce("unwritable", "cannot write the kernel cache in '" + dir +
                               "' (" + why +
                               "); continuing with the in-memory cache only");
  if (locked == FileLock::EntryUnusable)
    warnOnce("entry:" + key.hash(),
             "cannot use the kernel cache entry '" + path + "' (" + why +
                 "); keeping " + key.kernelName + " in memory only");
  if (locked == FileLock::TimedOut)
    warnOnce("timeout:" + key.hash(),
             llvm::formatv("waited {0} s for another process to compile "
                           "{1} (lock '{2}'); compiling it here too",
                           opts.lockTimeoutSeconds, key.kernelName, lockPath));
  return locked;
}

llvm::Expected<CompiledKernelRef>
KernelCache::loadOrCompile(const CacheKey &key, const CompileFn &compile,
                           const ValidateFn &validate, CacheOrigin &origin) {
  double ms = 0;
  origin.kind = CacheOrigin::Compiled;
  if (dir.empty()) {
    auto k = compileNow(key, compile, &ms);
    origin.ms = ms;
    return k;
  }

  const std::string text = key.text();
  const std::string h = key.hash();
  const std::string path = entryPath(dir, h);

  auto hit = [&](ReadResult &r, double t0) -> CompiledKernelRef {
    ++counters.diskHits;
    origin = CacheOrigin{CacheOrigin::Disk, nowMs() - t0};
    return std::make_shared<const codegen::CompiledKernel>(std::move(r.kernel));
  };
  double t0 = nowMs();
  ReadResult r = readEntry(path, text, opts.maxEntryBytes, validate);
  if (r.status == ReadStatus::Found)
    return hit(r, t0);

  // Miss or bad entry: take the key's lock so one process compiles.
  FileLock fileLock;
  int locked = writable ? lockEntry(key, path, fileLock) : FileLock::Unavailable;
  if (locked == FileLock::Locked) {
    // Another process may have published it while we waited.
    double t1 = nowMs();
    r = readEntry(path, text, opts.maxEntryBytes, validate);
    if (r.status == ReadStatus::Found)
      return hit(r, t1);
  }

  auto k = compileNow(key, compile, &ms);
  origin.ms = ms;
  if (!k)
    return k.takeError();
  if (r.status == ReadStatus::Invalid) {
    ++counters.corruptRebuilt;
    warnOnce("corrupt:" + h, "kernel cache entry '" + path +
                                 "' is invalid (" + r.problem +
                                 "); rebuilt it");
  }
  if (writable && (locked == FileLock::Locked || locked == FileLock::TimedOut))
    publish(key, path, **k, ms);
  return k;
}

void KernelCache::publish(const CacheKey &key, const std::string &path,
                          const codegen::CompiledKernel &kernel, double ms) {
  static std::atomic<unsigned> counter{0};
  std::string bytes = encodeEntry(key, kernel, ms);
  std::string tmp = llvm::formatv("{0}.tmp.{1}.{2}", path, ::getpid(),
                                  counter++)
                        .str();
  auto fail = [&](const char *what, int err) {
    ++counters.diskWriteFailures;
    ::unlink(tmp.c_str());
    // Something in the way of this one entry (a directory at its path)
    // does not make the whole cache unwritable.
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST || err == EBUSY)
      return warnOnce("entry:" + key.hash(),
                      llvm::formatv("cannot replace the kernel cache entry "
                                    "'{0}' ({1}: {2}); keeping {3} in memory "
                                    "only",
                                    path, what, std::strerror(err),
                                    key.kernelName));
    writable = false;
    warnOnce("unwritable", llvm::formatv("cannot write the kernel cache in "
                                         "'{0}' ({1}: {2}); continuing with "
                                         "the in-memory cache only",
                                         dir, what, std::strerror(err)));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail("create", errno);
  if (int err = fileio::writeFully(fd, bytes)) {
    ::close(fd);
    return fail("write", err);
  }
  if (::close(fd) != 0)
    return fail("close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail("rename", errno);
  evictOverBudget();
}

void KernelCache::evictOverBudget() {
  if (budget == 0)
    return;
  // A walk per write: writes follow compiles (tens of ms), and walking
  // sees what other processes wrote, so together they stay in budget.
  auto pruned = pruneCacheDir(dir, budget);
  if (!pruned) {
    warnOnce("evict", "cannot keep the kernel cache '" + dir + "' within " +
                          std::to_string(budget) + " bytes: " +
                          llvm::toString(pruned.takeError()));
    return;
  }
  counters.evicted += pruned->filesRemoved;
}

