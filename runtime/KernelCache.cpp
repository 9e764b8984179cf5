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
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;
using json = nlohmann::json;

namespace {

llvm::Error makeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

constexpr llvm::StringLiteral kMagic = "BITFOLD-KERNEL";

std::string hexOf(uint64_t v) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format_hex_no_prefix(v, 16);
  return s;
}

double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}

/// An flock()ed lock file; unlocked (and closed) on destruction.
class FileLock {
public:
  ~FileLock() {
    if (fd >= 0) {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  }
  enum Result { Locked, TimedOut, Unavailable };
  /// Unavailable: the lock file cannot be created (read-only or missing
  /// directory); `why` says so.
  Result acquire(const std::string &path, double timeoutSeconds,
                 std::string &why) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      why = std::strerror(errno);
      return Unavailable;
    }
    double deadline = nowMs() + timeoutSeconds * 1000.0;
    int sleepMs = 1;
    while (true) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
        return Locked;
      if (errno != EWOULDBLOCK && errno != EINTR) {
        why = std::strerror(errno);
        ::close(fd);
        fd = -1;
        return Unavailable;
      }
      if (nowMs() > deadline) {
        ::close(fd);
        fd = -1;
        return TimedOut;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
      sleepMs = std::min(sleepMs * 2, 50);
    }
  }

private:
  int fd = -1;
};

enum class ReadStatus { Found, Missing, Invalid };

struct ReadResult {
  ReadStatus status = ReadStatus::Missing;
  std::string problem;
  codegen::CompiledKernel kernel;
};

ReadResult readEntry(const std::string &path, const std::string &keyText) {
  ReadResult r;
  // Volatile: read(), never mmap, so a file truncated under us cannot fault.
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false,
                                         /*IsVolatile=*/true);
  if (!buf) // Missing, or an unreadable directory: the write path reports.
    return r;
  auto entry = decodeEntry((*buf)->getBuffer());
  if (!entry) {
    r.status = ReadStatus::Invalid;
    r.problem = llvm::toString(entry.takeError());
    return r;
  }
  if (entry->keyText != keyText) {
    r.status = ReadStatus::Invalid;
    r.problem = "it was written for a different key (hash collision or "
                "stale entry); stored key:\n" +
                entry->keyText;
    return r;
  }
  r.status = ReadStatus::Found;
  r.kernel = std::move(entry->kernel);
  return r;
}

} // namespace

std::string bitfold::runtime::defaultCacheDir() {
  if (const char *d = std::getenv("BITFOLD_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (llvm::Twine(x) + "/bitfold").str();
  if (const char *h = std::getenv("HOME"); h && *h)
    return (llvm::Twine(h) + "/.cache/bitfold").str();
  return "/tmp/bitfold-cache";
}

std::string bitfold::runtime::entryPath(llvm::StringRef dir,
                                        llvm::StringRef keyHash) {
  llvm::SmallString<256> p(dir);
  llvm::sys::path::append(p, keyHash.take_front(2), keyHash + ".bfk");
  return std::string(p);
}

// ---- Entry files -----------------------------------------------------------

std::string bitfold::runtime::encodeEntry(const CacheKey &key,
                                          const codegen::CompiledKernel &k,
                                          double compileMs) {
  json times = json::array();
  for (const codegen::StageTime &t : k.times)
    times.push_back({{"stage", t.stage}, {"ms", t.ms}});
  json meta = {
      {"format", kCacheFormat},
      {"key", key.text()},
      {"keyHash", key.hash()},
      {"kernel", key.kernelName},
      {"kernelHash", key.kernelHash},
      {"shape", key.shape},
      {"arch", key.arch},
      {"options", key.options},
      {"versions",
       {{"bitfold", key.bitfoldVersion},
        {"llvm", key.llvmVersion},
        {"toolchain", key.toolchain}}},
      {"entryName", k.entryName},
      {"cubinTool", k.cubinTool},
      {"config", k.config.str()}, // the one copy outside the key text
      {"abi",
       {{"numGroups", k.abi.numGroups},
        {"numOperands", k.abi.numOperands},
        {"numDims", k.abi.numDims},
        {"numScalars", k.abi.numScalars}}},
      {"sharedBytes", k.sharedBytes},
      {"gridDependencyWait", k.gridDependencyWait},
      {"stageTimes", times},
      {"compileMs", compileMs},
      {"createdAt", int64_t(std::time(nullptr))},
      {"writerPid", int64_t(::getpid())},
  };
  std::string metaText = meta.dump();
  std::string payload = metaText + k.ptx;
  payload.append(k.cubin.begin(), k.cubin.end());
  uint64_t sum = llvm::xxh3_64bits(llvm::StringRef(payload));
  std::string out = llvm::formatv("{0} {1}\n{2} {3} {4} {5}\n", kMagic,
                                  kCacheFormat, metaText.size(), k.ptx.size(),
                                  k.cubin.size(), hexOf(sum))
                        .str();
  out += payload;
  return out;
}

llvm::Expected<CacheEntry> bitfold::runtime::decodeEntry(llvm::StringRef bytes) {
  auto [line1, rest1] = bytes.split('\n');
  if (line1.size() == bytes.size())
    return makeError("truncated: no header line");
  llvm::StringRef magic, ver;
  std::tie(magic, ver) = line1.split(' ');
  if (magic != kMagic)
    return makeError("not a bitfold kernel entry (bad magic)");
  int format = 0;
  if (ver.getAsInteger(10, format))
    return makeError("bad format version '" + ver + "'");
  if (format != kCacheFormat)
    return makeError(llvm::formatv("written in entry format {0}; this bitfold "
                                   "reads format {1}",
                                   format, kCacheFormat));
  auto [line2, payload] = rest1.split('\n');
  if (line2.size() == rest1.size())
    return makeError("truncated: no size line");
  llvm::SmallVector<llvm::StringRef, 4> f;
  line2.split(f, ' ');
  uint64_t metaLen = 0, ptxLen = 0, cubinLen = 0, sum = 0;
  if (f.size() != 4 || f[0].getAsInteger(10, metaLen) ||
      f[1].getAsInteger(10, ptxLen) || f[2].getAsInteger(10, cubinLen) ||
      f[3].getAsInteger(16, sum))
    return makeError("bad size line '" + line2 + "'");
  uint64_t want = metaLen + ptxLen + cubinLen;
  if (payload.size() != want)
    return makeError(llvm::formatv("truncated: payload is {0} bytes, the "
                                   "header says {1}",
                                   payload.size(), want));
  uint64_t actual = llvm::xxh3_64bits(payload);
  if (actual != sum)
    return makeError(llvm::formatv("checksum mismatch: stored {0}, computed "
                                   "{1} (the file is corrupt)",
                                   hexOf(sum), hexOf(actual)));
  CacheEntry e;
  e.metaJson = payload.take_front(metaLen).str();
  json meta = json::parse(e.metaJson, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    return makeError("metadata is not valid JSON");
  auto str = [&](const char *k) -> std::string {
    auto it = meta.find(k);
    return it != meta.end() && it->is_string() ? it->get<std::string>() : "";
  };
  auto num = [](const json &o, const char *k) -> int64_t {
    auto it = o.find(k);
    return it != o.end() && it->is_number() ? it->get<int64_t>() : 0;
  };
  e.keyText = str("key");
  if (e.keyText.empty())
    return makeError("metadata has no key");
  codegen::CompiledKernel &k = e.kernel;
  k.entryName = str("entryName");
  k.cubinTool = str("cubinTool");
  auto config = codegen::TileConfig::parse(str("config"));
  if (!config)
    return makeError("metadata config: " + llvm::toString(config.takeError()));
  k.config = *config;
  if (auto a = meta.find("abi"); a != meta.end() && a->is_object()) {
    k.abi.numGroups = int(num(*a, "numGroups"));
    k.abi.numOperands = int(num(*a, "numOperands"));
    k.abi.numDims = int(num(*a, "numDims"));
    k.abi.numScalars = int(num(*a, "numScalars"));
  }
  k.sharedBytes = unsigned(num(meta, "sharedBytes"));
  k.gridDependencyWait = meta.value("gridDependencyWait", false);
  if (auto t = meta.find("stageTimes"); t != meta.end() && t->is_array())
    for (const json &s : *t)
      if (s.is_object())
        k.times.push_back({s.value("stage", std::string()),
                           s.value("ms", 0.0)});
  if (k.entryName.empty())
    return makeError("metadata has no kernel entry name");
  k.ptx = payload.substr(metaLen, ptxLen).str();
  llvm::StringRef cubin = payload.substr(metaLen + ptxLen, cubinLen);
  k.cubin.assign(cubin.begin(), cubin.end());
  return std::move(e);
}

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
                          CacheOrigin *origin) {
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
    return makeError(slot->error);
  slot->state = Slot::Busy;
  lock.unlock();

  auto result = loadOrCompile(key, compile, how);

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
    return makeError(slot->error);
  return slot->kernel;
}

llvm::Expected<CompiledKernelRef>
KernelCache::compileNow(const CacheKey &key, const CompileFn &compile,
                        double *ms) {
  double t0 = nowMs();
  auto k = compile();
  *ms = nowMs() - t0;
  if (!k) {
    ++counters.compileFailures;
    return makeError("compiling " + key.kernelName + " (shape " + key.shape +
                     ", config " + key.config + ", " + key.arch +
                     "): " + llvm::toString(k.takeError()));
  }
  ++counters.compiles;
  return std::make_shared<const codegen::CompiledKernel>(std::move(*k));
}

llvm::Expected<CompiledKernelRef>
KernelCache::loadOrCompile(const CacheKey &key, const CompileFn &compile,
                           CacheOrigin &origin) {
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

  double t0 = nowMs();
  ReadResult r = readEntry(path, text);
  if (r.status == ReadStatus::Found) {
    ++counters.diskHits;
    auto k = std::make_shared<const codegen::CompiledKernel>(std::move(r.kernel));
    origin = CacheOrigin{CacheOrigin::Disk, nowMs() - t0};
    return k;
  }

  // Miss or bad entry: take the key's lock so one process compiles.
  std::string why;
  FileLock fileLock;
  FileLock::Result locked = FileLock::Unavailable;
  if (writable) {
    std::error_code ec = llvm::sys::fs::create_directories(
        llvm::sys::path::parent_path(path));
    if (ec)
      why = ec.message();
    else
      locked = fileLock.acquire(path.substr(0, path.size() - 4) + ".lock",
                                opts.lockTimeoutSeconds, why);
  }
  if (locked == FileLock::Unavailable && writable) {
    writable = false;
    warnOnce("unwritable", "cannot write the kernel cache in '" + dir +
                               "' (" + why +
                               "); continuing with the in-memory cache only");
  }
  if (locked == FileLock::TimedOut)
    warnOnce("timeout:" + h,
             llvm::formatv("waited {0} s for another process to compile "
                           "{1} ({2}); compiling it here too",
                           opts.lockTimeoutSeconds, key.kernelName, path));
  if (locked == FileLock::Locked) {
    // Another process may have published it while we waited.
    double t1 = nowMs();
    r = readEntry(path, text);
    if (r.status == ReadStatus::Found) {
      ++counters.diskHits;
      auto k = std::make_shared<const codegen::CompiledKernel>(
          std::move(r.kernel));
      origin = CacheOrigin{CacheOrigin::Disk, nowMs() - t1};
      return k;
    }
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
  if (writable && locked != FileLock::Unavailable)
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
    writable = false;
    warnOnce("unwritable", llvm::formatv("cannot write the kernel cache in "
                                         "'{0}' ({1}: {2}); continuing with "
                                         "the in-memory cache only",
                                         dir, what, std::strerror(err)));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail("create", errno);
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return fail("write", err);
    }
    p += n;
    left -= size_t(n);
  }
  if (::close(fd) != 0)
    return fail("close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail("rename", errno);
}
