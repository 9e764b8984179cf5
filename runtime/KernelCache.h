//===- runtime/KernelCache.h - Compiled kernels, in memory and on disk -*- C++ -*-===//
//
// A compiled kernel is identified by a CacheKey: every input that can change
// its bits or its code (kernel text hash, shape specialisation, TileConfig,
// target arch, codegen options, bitfold / LLVM / PTX->cubin tool versions,
// and the codegen-relevant environment). The key's full text is stored in
// the entry and compared on load, so a hash collision or a stale entry is
// never trusted.
//
// Guarantees:
//  - in one process, exactly one compile per key; concurrent callers of the
//    same key wait for it and share the result (failures are shared too);
//  - across processes, the one holding the key's lock file compiles and
//    publishes its entry by rename; the others, blocked on the lock, then
//    read that entry. Readers never lock: a rename is atomic, so they see
//    no entry or a whole one;
//  - an entry that is truncated, bit-flipped (xxh3 checksum over the
//    payload), from another format version or for another key is rebuilt,
//    with one warning per key and process;
//  - an entry whose metadata is inconsistent (out-of-range config or ABI,
//    a PTX entry whose parameter count disagrees with the ABI, or one the
//    caller's validator rejects: the kernel definition disagrees) is
//    rebuilt and replaced the same way;
//  - the cache trusts nothing it reads: an entry must be a regular file
//    (never a FIFO, device or symlink; opened with O_NOFOLLOW|O_NONBLOCK)
//    no larger than CacheOptions::maxEntryBytes; anything else is rebuilt
//    and the bad file replaced by rename;
//  - a cache directory that cannot be created, is read-only or is full
//    degrades to memory only (plus reading whatever valid entries it has),
//    with one warning; never a failure. A single entry path that cannot be
//    written (a directory sits there) is skipped for that key only;
//  - a lock held by another process is waited for at most
//    lockTimeoutSeconds, with a message naming the lock file (and the pid
//    written in it) once the wait passes lockNoticeSeconds.
//
// On-disk layout: <dir>/<h[0:2]>/<h>.bfk, h = hex SHA-256 of the key text;
// <h>.lock next to it (flock'ed while compiling; left behind, harmless).
// An entry file is:
//   "BITFOLD-KERNEL <format>\n"
//   "<meta bytes> <ptx bytes> <cubin bytes> <xxh3-64 hex of the payload>\n"
//   payload = metadata JSON, PTX text, cubin bytes.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_KERNELCACHE_H
#define BITFOLD_RUNTIME_KERNELCACHE_H

#include "codegen/Codegen.h"
#include "keys/CacheKey.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace bitfold::runtime {

/// Entry file format version (the first header line).
constexpr int kCacheFormat = 2;

/// The key (keys/CacheKey.h: everything that determines a cubin).
using keys::CacheKey;
using keys::codegenEnvironment;
using keys::makeCacheKey;

/// $BITFOLD_CACHE_DIR, else $XDG_CACHE_HOME/bitfold, else ~/.cache/bitfold.
std::string defaultCacheDir();

/// <dir>/<hash[0:2]>/<hash>.bfk
std::string entryPath(llvm::StringRef dir, llvm::StringRef keyHash);

/// A decoded entry file.
struct CacheEntry {
  std::string keyText;
  std::string metaJson; ///< the metadata exactly as stored.
  codegen::CompiledKernel kernel;
};

/// Entries larger than this are never read (a bogus file cannot make the
/// reader allocate without bound).
constexpr uint64_t kMaxEntryBytes = uint64_t(256) << 20;

/// Serialises an entry (see the layout above); the metadata records the
/// key, versions, config, ABI and compile times.
std::string encodeEntry(const CacheKey &key,
                        const codegen::CompiledKernel &kernel,
                        double compileMs);
/// Decodes and checks an entry: header, lengths, checksum, metadata (every
/// field its type and range; the PTX entry's parameter count against the
/// ABI). Errors say what is wrong ("truncated: ...", "checksum mismatch",
/// "inconsistent metadata: ..."). Never throws.
llvm::Expected<CacheEntry> decodeEntry(llvm::StringRef bytes);

/// Reads an entry file the way the cache does: a regular file only (no
/// symlink, FIFO or device; never blocks), at most `maxBytes`.
llvm::Expected<std::string> readEntryFile(llvm::StringRef path,
                                          uint64_t maxBytes = kMaxEntryBytes);

// ---- Maintenance (`bitfold cache ...`) ---------------------------------------
// These touch only files that match the cache's own layout: <dir>/<xx>/
// where xx is two lowercase hex digits and a real directory (not a
// symlink), and in it regular files (not symlinks) named <h>.bfk, <h>.lock
// or <h>.bfk.tmp.<pid>.<n>, with h 64 lowercase hex digits starting with
// xx. Everything else under <dir> is left alone and counted as foreign.

/// One .bfk entry found by listCacheDir().
struct CacheFileInfo {
  std::string path;
  std::string hash;    ///< from the file name.
  uint64_t bytes = 0;
  std::string problem; ///< empty: valid.
  std::string metaJson;///< the stored metadata (valid entries).
};

struct CacheListing {
  std::vector<CacheFileInfo> entries; ///< sorted by path.
  int tmpFiles = 0, lockFiles = 0, foreign = 0;
  /// Directories that could not be read, and other problems that make the
  /// listing incomplete (a verify must fail on them).
  std::vector<std::string> problems;
};

/// Every entry of the cache in `dir`, decoded and checked.
CacheListing listCacheDir(llvm::StringRef dir);

struct CacheCleanResult {
  uint64_t filesRemoved = 0;
  uint64_t bytesRemoved = 0;
  uint64_t foreign = 0; ///< files and folders left alone (not the layout).
  uint64_t busyLocks = 0; ///< lock files held by a live compile, kept.
};

/// Removes every cache file (entries, temp files, unheld lock files) and
/// the emptied <xx> folders. Never follows a symlink. An error when any
/// removal fails (naming the file; the others are still removed).
llvm::Expected<CacheCleanResult> clearCacheDir(llvm::StringRef dir);

/// Removes the least recently used entries (oldest modification time: a
/// hit refreshes it at most once per kRecencyGranularitySeconds) until the
/// entries total at most `maxBytes`. Same layout rules and errors as
/// clear. Safe while other processes read and write: a reader that opened
/// an entry keeps reading it; one that finds it gone compiles it again.
llvm::Expected<CacheCleanResult> pruneCacheDir(llvm::StringRef dir,
                                               uint64_t maxBytes);

struct CacheOptions {
  std::string dir;  ///< empty: defaultCacheDir().
  bool disk = true; ///< false: memory only.
  /// How long to wait for another process's compile of the same key before
  /// compiling anyway (the result is still published atomically).
  double lockTimeoutSeconds = 120;
  /// After this long waiting for a lock, say so (naming the lock file).
  double lockNoticeSeconds = 2;
  /// Entry files larger than this are treated as invalid.
  uint64_t maxEntryBytes = kMaxEntryBytes;
  /// Where warnings go; default: stderr, "bitfold: warning: ...".
  std::function<void(llvm::StringRef)> warn;
  /// Byte budget of the directory's entries: after each write, the least
  /// recently used entries are removed (pruneCacheDir) until the rest fit.
  /// -1: $BITFOLD_CACHE_MAX_BYTES, else kDefaultCacheMaxBytes; 0: no limit.
  int64_t maxBytes = -1;
};

/// The disk cache's default byte budget (1 GiB).
constexpr uint64_t kDefaultCacheMaxBytes = uint64_t(1) << 30;

/// A hit refreshes its entry's modification time (the recency
/// pruneCacheDir orders by) only when it is older than this, so hits cost
/// no write: recency is exact to within an hour.
constexpr int64_t kRecencyGranularitySeconds = 3600;

struct CacheStats {
  uint64_t memoryHits = 0;
  uint64_t diskHits = 0;
  uint64_t compiles = 0;
  uint64_t compileFailures = 0;
  uint64_t corruptRebuilt = 0;
  uint64_t diskWriteFailures = 0;
  uint64_t evicted = 0; ///< entries removed to stay within the budget.
};

/// Where getOrCompile() found a kernel, and what that cost this call.
struct CacheOrigin {
  enum Kind {
    Memory,   ///< already in this process (or compiled by another thread
              ///< of it while this one waited).
    Disk,     ///< read from the disk cache (ms: read, checksum, decode).
    Compiled, ///< compiled here (ms: the compile).
  } kind = Memory;
  double ms = 0;
  /// "memory cache hit", "disk cache hit (1.2 ms)", "compiled in 812 ms".
  std::string describe() const;
};

using CompiledKernelRef = std::shared_ptr<const codegen::CompiledKernel>;
/// Produces the kernel on a miss. Injectable: tests pass a fake compiler.
using CompileFn = std::function<llvm::Expected<codegen::CompiledKernel>()>;
/// Checks a kernel read from disk against what the caller knows (its
/// definition's ABI, the config asked for); an error makes the cache treat
/// the entry as invalid: warn once, recompile, replace.
using ValidateFn =
    std::function<llvm::Error(const codegen::CompiledKernel &)>;

class FileLock;

class KernelCache {
public:
  explicit KernelCache(CacheOptions options = {});
  ~KernelCache();
  KernelCache(const KernelCache &) = delete;
  KernelCache &operator=(const KernelCache &) = delete;

  /// The kernel for `key`: from memory, else from disk, else from
  /// `compile` (see the guarantees above). Thread safe. `origin`, when
  /// given, says which of the three it was. `validate`, when given, vets
  /// kernels read from disk.
  llvm::Expected<CompiledKernelRef> getOrCompile(const CacheKey &key,
                                                 const CompileFn &compile,
                                                 CacheOrigin *origin = nullptr,
                                                 const ValidateFn &validate = {});

  /// Whether `key`'s kernel is in memory or has a disk entry (its file
  /// exists; not read or validated). Thread safe.
  bool contains(const CacheKey &key) const;

  CacheStats stats() const;
  /// The cache directory; empty when the cache is memory only.
  std::string directory() const;
  /// False once the directory proved unusable for writing.
  bool diskWritable() const { return writable.load(); }
  /// The byte budget in force (0: none).
  uint64_t maxBytes() const { return budget; }

private:
  struct Slot;
  llvm::Expected<CompiledKernelRef> loadOrCompile(const CacheKey &key,
                                                  const CompileFn &compile,
                                                  const ValidateFn &validate,
                                                  CacheOrigin &origin);
  llvm::Expected<CompiledKernelRef> compileNow(const CacheKey &key,
                                               const CompileFn &compile,
                                               double *ms);
  /// Takes the key's lock file; returns a FileLock::Result (warning as
  /// needed: unwritable cache, unusable entry path, wait, time-out).
  int lockEntry(const CacheKey &key, const std::string &path,
                FileLock &lock);
  void publish(const CacheKey &key, const std::string &path,
               const codegen::CompiledKernel &kernel, double ms);
  void warnOnce(const std::string &tag, const llvm::Twine &message);
  void evictOverBudget();

  CacheOptions opts;
  std::string dir; ///< empty: memory only.
  uint64_t budget = 0; ///< 0: unlimited.
  std::atomic<bool> writable{true};
  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<Slot>> slots;
  std::set<std::string> warned;
  struct AtomicStats {
    std::atomic<uint64_t> memoryHits{0}, diskHits{0}, compiles{0},
        compileFailures{0}, corruptRebuilt{0}, diskWriteFailures{0},
        evicted{0};
  } counters;
};

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_KERNELCACHE_H
