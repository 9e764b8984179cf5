//===- runtime/CacheEntry.cpp - The cache's entry files ---------------------===//
//
// One entry file per key: a header (magic, format, section sizes and an
// xxh3 checksum), the metadata JSON, the PTX and the cubin. Reading one
// checks everything and throws nothing (MetaReader); see KernelCache.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/CacheFiles.h"
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
using namespace bitfold::runtime::cachefs;
using json = nlohmann::json;

namespace {

constexpr llvm::StringLiteral kMagic = "BITFOLD-KERNEL";

std::string hexOf(uint64_t v) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format_hex_no_prefix(v, 16);
  return s;
}

} // namespace

double cachefs::nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}

bool cachefs::isRealDirectory(llvm::StringRef dir) {
  struct stat st;
  return ::lstat(dir.str().c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

ReadStatus cachefs::readRegularFile(const std::string &path, uint64_t maxBytes,
                                    std::string &out, std::string &problem,
                                    int64_t *mtime) {
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

ReadResult cachefs::readEntry(const std::string &path, const std::string &keyText,
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
                           : cacheError("inconsistent metadata: " + problem);
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
    return cacheError(llvm::formatv("inconsistent metadata: {0} rows x {1} "
                                    "threads per CTA exceeds {2}",
                                    k.config.rowsPerCta, k.config.threadsPerRow,
                                    kMaxCtaThreads));
  int params = ptxParamCount(k.ptx, k.entryName);
  if (params < 0 && llvm::StringRef(k.ptx).contains(".entry "))
    return cacheError("inconsistent metadata: the PTX has no entry '" +
                      k.entryName + "'");
  if (params >= 0 && size_t(params) != k.abi.paramCount())
    return cacheError(llvm::formatv(
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
      return cacheError(
          llvm::formatv("metadata field '{0}' is missing", field));
    std::string line = std::string(label) + ": " + it->get<std::string>();
    if (!llvm::is_contained(lines, line))
      return cacheError(llvm::formatv("metadata field '{0}' disagrees with the "
                                      "key it is stored under",
                                      field));
  }
  auto hash = meta.find("keyHash");
  if (hash == meta.end() || !hash->is_string() ||
      *hash != llvm::toHex(llvm::SHA256::hash(
                               llvm::arrayRefFromStringRef(keyText)),
                           /*LowerCase=*/true))
    return cacheError("metadata field 'keyHash' is not the hash of its key");
  return llvm::Error::success();
}

/// Fills e.keyText and e.kernel (all but PTX and cubin) from e.metaJson.
llvm::Error decodeMeta(CacheEntry &e) {
  json meta = json::parse(e.metaJson, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    return cacheError("metadata is not valid JSON");
  MetaReader m(meta);
  codegen::CompiledKernel &k = e.kernel;
  e.keyText = m.str("key");
  k.entryName = m.str("entryName");
  k.cubinTool = m.str("cubinTool");
  // The config is stored once, as TileConfig text (its parser checks it).
  std::string configText = m.str("config");
  if (auto config = keys::TileConfig::parse(configText))
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
        return cacheError(
            "inconsistent metadata: a stage time is not an object");
      MetaReader sr(st, "stageTimes.");
      k.times.push_back({sr.str("stage"), sr.number("ms")});
      m.absorb(sr);
    }
  if (llvm::Error err = m.take())
    return err;
  if (e.keyText.empty())
    return cacheError("metadata has no key");
  if (llvm::Error err = checkMetaMirrorsKey(meta, e.keyText))
    return err;
  if (k.entryName.empty())
    return cacheError("metadata has no kernel entry name");
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
        {"codegen", key.codegenRevision},
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
    return cacheError("truncated: no header line");
  llvm::StringRef magic, ver;
  std::tie(magic, ver) = line1.split(' ');
  if (magic != kMagic)
    return cacheError("not a bitfold kernel entry (bad magic)");
  int format = 0;
  if (ver.getAsInteger(10, format))
    return cacheError("bad format version '" + ver + "'");
  if (format != kCacheFormat)
    return cacheError(llvm::formatv("written in entry format {0}; this bitfold "
                                    "reads format {1}",
                                    format, kCacheFormat));
  auto [line2, payload] = rest1.split('\n');
  if (line2.size() == rest1.size())
    return cacheError("truncated: no size line");
  llvm::SmallVector<llvm::StringRef, 4> f;
  line2.split(f, ' ');
  uint64_t metaLen = 0, ptxLen = 0, cubinLen = 0, sum = 0;
  if (f.size() != 4 || f[0].getAsInteger(10, metaLen) ||
      f[1].getAsInteger(10, ptxLen) || f[2].getAsInteger(10, cubinLen) ||
      f[3].getAsInteger(16, sum))
    return cacheError("bad size line '" + line2 + "'");
  uint64_t want = metaLen + ptxLen + cubinLen;
  if (payload.size() != want)
    return cacheError(llvm::formatv("truncated: payload is {0} bytes, the "
                                    "header says {1}",
                                    payload.size(), want));
  uint64_t actual = llvm::xxh3_64bits(payload);
  if (actual != sum)
    return cacheError(llvm::formatv("checksum mismatch: stored {0}, computed "
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

llvm::Expected<std::string>
bitfold::runtime::readEntryFile(llvm::StringRef path, uint64_t maxBytes) {
  std::string bytes, problem;
  ReadStatus s = readRegularFile(path.str(), maxBytes, bytes, problem);
  if (s == ReadStatus::Found)
    return bytes;
  return cacheError(
      "cannot read '" + path + "': " +
      (problem.empty() ? "it does not exist or cannot be opened" : problem));
}

