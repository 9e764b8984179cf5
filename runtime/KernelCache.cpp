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

} // namespace

/// An flock()ed lock file; unlocked (and closed) on destruction. The
/// holder writes its pid into it, so waiters can say who they wait for.
class bitfold::runtime::FileLock {
public:
  ~FileLock() {
    if (fd >= 0) {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  }
  enum Result { Locked, TimedOut, Unavailable, EntryUnusable };
  /// Unavailable: the lock file cannot be created (read-only or missing
  /// directory); EntryUnusable: something that is not a regular file sits
  /// at its path (only this key is affected). `why` says so. `notice` is
  /// called once when the wait passes `noticeSeconds`.
  Result acquire(const std::string &path, double timeoutSeconds,
                 double noticeSeconds,
                 llvm::function_ref<void(llvm::StringRef holder)> notice,
                 std::string &why) {
    fd = ::open(path.c_str(),
                O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
      int err = errno;
      why = std::strerror(err);
      return err == EISDIR || err == ELOOP || err == ENXIO ? EntryUnusable
                                                          : Unavailable;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      why = "not a regular file";
      return release(EntryUnusable);
    }
    double start = nowMs();
    bool noticed = false;
    int sleepMs = 1;
    while (true) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        // The pid is informational: failing to write it changes nothing.
        std::string pid = std::to_string(::getpid()) + "\n";
        (void)!::ftruncate(fd, 0);
        (void)!::pwrite(fd, pid.data(), pid.size(), 0);
        return Locked;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) {
        why = std::strerror(errno);
        return release(Unavailable);
      }
      double waited = (nowMs() - start) / 1000.0;
      if (waited > timeoutSeconds)
        return release(TimedOut);
      if (!noticed && waited > noticeSeconds) {
        noticed = true;
        notice(holder());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
      sleepMs = std::min(sleepMs * 2, 50);
    }
  }

private:
  Result release(Result r) {
    ::close(fd);
    fd = -1;
    return r;
  }
  /// "pid N" as the holder wrote it, or "" when unknown.
  std::string holder() const {
    char buf[32] = {0};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    llvm::StringRef pid = llvm::StringRef(buf, n > 0 ? size_t(n) : 0).trim();
    unsigned v = 0;
    return pid.getAsInteger(10, v) ? "" : ("pid " + pid).str();
  }
  int fd = -1;
};

namespace {

/// Whether `dir` is a directory and not a symlink (so the cache never
/// writes through a link planted inside it).
bool isRealDirectory(llvm::StringRef dir) {
  struct stat st;
  return ::lstat(dir.str().c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

enum class ReadStatus { Found, Missing, Invalid };

/// Reads a regular file of at most maxBytes without following a symlink or
/// blocking on a FIFO (fileio::readBoundedFile). Missing: it is not there
/// (or cannot be opened: the write path reports that); Invalid: `problem`
/// says why.
ReadStatus readRegularFile(const std::string &path, uint64_t maxBytes,
                           std::string &out, std::string &problem,
                           int64_t *mtime = nullptr) {
  auto bytes = fileio::readBoundedFile(path, maxBytes, "cache entry",
                                       {/*followSymlinks=*/false, mtime});
  if (bytes) {
    out = std::move(*bytes);
    return ReadStatus::Found;
  }
  ReadStatus status = ReadStatus::Invalid;
  llvm::handleAllErrors(bytes.takeError(), [&](const fileio::FileError &e) {
    if (e.kind == fileio::FileError::Missing || e.err == EACCES)
      status = ReadStatus::Missing;
    problem = e.reason;
  });
  return status;
}

struct ReadResult {
  ReadStatus status = ReadStatus::Missing;
  std::string problem;
  codegen::CompiledKernel kernel;
};

ReadResult readEntry(const std::string &path, const std::string &keyText,
                     uint64_t maxBytes, const ValidateFn &validate) {
  ReadResult r;
  std::string bytes;
  if (!isRealDirectory(llvm::sys::path::parent_path(path))) {
    struct stat st;
    if (::lstat(llvm::sys::path::parent_path(path).str().c_str(), &st) != 0)
      return r; // no folder yet: a miss.
    r.status = ReadStatus::Invalid;
    r.problem = "its folder is not a real directory (a symbolic link?)";
    return r;
  }
  int64_t mtime = 0;
  r.status = readRegularFile(path, maxBytes, bytes, r.problem, &mtime);
  if (r.status != ReadStatus::Found)
    return r;
  r.status = ReadStatus::Invalid;
  auto entry = decodeEntry(bytes);
  if (!entry) {
    r.problem = llvm::toString(entry.takeError());
    return r;
  }
  if (entry->keyText != keyText) {
    r.problem = "it was written for a different key (hash collision or "
                "stale entry); stored key:\n" +
                entry->keyText;
    return r;
  }
  if (validate)
    if (llvm::Error e = validate(entry->kernel)) {
      r.problem = "inconsistent with its kernel: " + llvm::toString(std::move(e));
      return r;
    }
  r.status = ReadStatus::Found;
  r.kernel = std::move(entry->kernel);
  // Recency for the byte budget's LRU order, written at most once per
  // granule (a failure, e.g. a read-only cache, only loses recency).
  if (int64_t(std::time(nullptr)) - mtime > kRecencyGranularitySeconds)
    (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
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

namespace {

/// Typed, range-checked reads of the metadata object: a wrong type or an
/// out-of-range value is an error, never an exception or a silent default.
class MetaReader {
public:
  explicit MetaReader(const json &o, std::string prefix = "")
      : o(o), prefix(std::move(prefix)) {}
  std::string str(const char *k) {
    const json *v = find(k);
    if (v && !v->is_string())
      fail(k, "is not a string");
    return v && v->is_string() ? v->get<std::string>() : "";
  }
  int64_t integer(const char *k, int64_t lo, int64_t hi) {
    const json *v = find(k);
    if (!v)
      return lo;
    if (!v->is_number_integer()) {
      fail(k, "is not an integer");
      return lo;
    }
    bool huge = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi);
    int64_t x = huge ? hi : v->get<int64_t>();
    if (huge || x < lo || x > hi)
      fail(k, llvm::formatv("is {0}, outside [{1}, {2}]", v->dump(), lo, hi));
    return std::clamp(x, lo, hi);
  }
  bool boolean(const char *k) {
    const json *v = find(k);
    if (v && !v->is_boolean())
      fail(k, "is not true or false");
    return v && v->is_boolean() && v->get<bool>();
  }
  double number(const char *k) {
    const json *v = find(k);
    if (v && !v->is_number())
      fail(k, "is not a number");
    return v && v->is_number() ? v->get<double>() : 0.0;
  }
  llvm::Error take() {
    return problem.empty() ? llvm::Error::success()
                           : makeError("inconsistent metadata: " + problem);
  }
  /// Problems of nested readers end up here.
  void absorb(MetaReader &inner) {
    if (problem.empty())
      problem = inner.problem;
  }
  void fail(const llvm::Twine &k, const llvm::Twine &why) {
    if (problem.empty())
      problem = ("'" + prefix + k + "' " + why).str();
  }

private:
  const json *find(const char *k) const {
    auto it = o.find(k);
    return it == o.end() ? nullptr : &*it;
  }
  const json &o;
  std::string prefix; ///< "config." for a nested object.
  std::string problem;
};

constexpr int64_t kMaxCtaThreads = 1024;
constexpr int64_t kMaxAbiCount = 64;

/// The object at `k` ("abi"), read by `body`; missing or not an
/// object is a problem.
void readObject(MetaReader &outer, const json &meta, const char *k,
                llvm::function_ref<void(MetaReader &)> body) {
  auto it = meta.find(k);
  if (it == meta.end() || !it->is_object())
    return outer.fail(k, "is missing or not an object");
  MetaReader inner(*it, std::string(k) + ".");
  body(inner);
  outer.absorb(inner);
}

/// The number of .param declarations of PTX entry `name`, or -1 when the
/// PTX declares no such entry.
int ptxParamCount(llvm::StringRef ptx, llvm::StringRef name) {
  size_t at = ptx.find((".entry " + name + "(").str());
  if (at == llvm::StringRef::npos)
    return -1;
  llvm::StringRef params = ptx.drop_front(at).split('(').second.split(')').first;
  return int(params.count(".param"));
}

/// The kernel must agree with itself: launchable config, sane ABI, and the
/// PTX entry's parameter count equal to the ABI's.
llvm::Error checkKernelConsistency(const codegen::CompiledKernel &k) {
  if (k.config.ctaThreads() > kMaxCtaThreads)
    return makeError(llvm::formatv("inconsistent metadata: {0} rows x {1} "
                                   "threads per CTA exceeds {2}",
                                   k.config.rowsPerCta, k.config.threadsPerRow,
                                   kMaxCtaThreads));
  int params = ptxParamCount(k.ptx, k.entryName);
  if (params < 0 && llvm::StringRef(k.ptx).contains(".entry "))
    return makeError("inconsistent metadata: the PTX has no entry '" +
                     k.entryName + "'");
  if (params >= 0 && size_t(params) != k.abi.paramCount())
    return makeError(llvm::formatv(
        "inconsistent metadata: the PTX entry takes {0} parameters, the ABI "
        "({1} groups, {2} operands, {3} dims, {4} scalars) says {5}",
        params, k.abi.numGroups, k.abi.numOperands, k.abi.numDims,
        k.abi.numScalars, k.abi.paramCount()));
  return llvm::Error::success();
}

/// The metadata's copies of key fields (what `bitfold cache ls` shows)
/// against the key text the lookup compares: an entry resealed with a
/// valid checksum but an edited copy is refused, not listed as valid.
/// ("config" is the compiled kernel's own, checked by decodeMeta.)
llvm::Error checkMetaMirrorsKey(const json &meta, llvm::StringRef keyText) {
  static const std::pair<const char *, const char *> mirrored[] = {
      {"kernel", "kernel"}, {"kernelHash", "kernel-hash"},
      {"shape", "shape"},   {"arch", "arch"},
      {"options", "options"}};
  llvm::SmallVector<llvm::StringRef, 16> lines;
  keyText.split(lines, '\n');
  for (auto [field, label] : mirrored) {
    auto it = meta.find(field);
    if (it == meta.end() || !it->is_string())
      return makeError(llvm::formatv("metadata field '{0}' is missing", field));
    std::string line = std::string(label) + ": " + it->get<std::string>();
    if (!llvm::is_contained(lines, line))
      return makeError(llvm::formatv("metadata field '{0}' disagrees with the "
                                     "key it is stored under",
                                     field));
  }
  auto hash = meta.find("keyHash");
  if (hash == meta.end() || !hash->is_string() ||
      *hash != llvm::toHex(llvm::SHA256::hash(
                               llvm::arrayRefFromStringRef(keyText)),
                           /*LowerCase=*/true))
    return makeError("metadata field 'keyHash' is not the hash of its key");
  return llvm::Error::success();
}

/// Fills e.keyText and e.kernel (all but PTX and cubin) from e.metaJson.
llvm::Error decodeMeta(CacheEntry &e) {
  json meta = json::parse(e.metaJson, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    return makeError("metadata is not valid JSON");
  MetaReader m(meta);
  codegen::CompiledKernel &k = e.kernel;
  e.keyText = m.str("key");
  k.entryName = m.str("entryName");
  k.cubinTool = m.str("cubinTool");
  // The config is stored once, as TileConfig text (its parser checks it).
  std::string configText = m.str("config");
  if (auto config = codegen::TileConfig::parse(configText))
    k.config = *config;
  else
    m.fail("config", llvm::toString(config.takeError()));
  readObject(m, meta, "abi", [&](MetaReader &a) {
    k.abi.numGroups = int(a.integer("numGroups", 1, kMaxAbiCount));
    k.abi.numOperands = int(a.integer("numOperands", 0, kMaxAbiCount));
    k.abi.numDims = int(a.integer("numDims", 0, kMaxAbiCount));
    k.abi.numScalars = int(a.integer("numScalars", 0, kMaxAbiCount));
  });
  k.sharedBytes = unsigned(m.integer("sharedBytes", 0, 1 << 20));
  k.gridDependencyWait = m.boolean("gridDependencyWait");
  m.integer("createdAt", INT64_MIN, INT64_MAX);
  m.number("compileMs");
  if (auto t = meta.find("stageTimes"); t != meta.end() && t->is_array())
    for (const json &st : *t) {
      if (!st.is_object())
        return makeError("inconsistent metadata: a stage time is not an object");
      MetaReader sr(st, "stageTimes.");
      k.times.push_back({sr.str("stage"), sr.number("ms")});
      m.absorb(sr);
    }
  if (llvm::Error err = m.take())
    return err;
  if (e.keyText.empty())
    return makeError("metadata has no key");
  if (llvm::Error err = checkMetaMirrorsKey(meta, e.keyText))
    return err;
  if (k.entryName.empty())
    return makeError("metadata has no kernel entry name");
  return checkKernelConsistency(k);
}

} // namespace


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
  e.kernel.ptx = payload.substr(metaLen, ptxLen).str();
  llvm::StringRef cubin = payload.substr(metaLen + ptxLen, cubinLen);
  e.kernel.cubin.assign(cubin.begin(), cubin.end());
  if (llvm::Error err = decodeMeta(e))
    return std::move(err);
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
    return makeError(slot->error);
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
  return makeError(llvm::formatv("{0} ({1} file(s) could not be removed; {2} "
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
    e = makeError(w.problems.front());
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
    return makeError(w.problems.front());
  return result;
}

llvm::Expected<std::string>
bitfold::runtime::readEntryFile(llvm::StringRef path, uint64_t maxBytes) {
  std::string bytes, problem;
  ReadStatus s = readRegularFile(path.str(), maxBytes, bytes, problem);
  if (s == ReadStatus::Found)
    return bytes;
  return makeError("cannot read '" + path + "': " +
                   (problem.empty() ? "it does not exist or cannot be opened"
                                    : problem));
}
