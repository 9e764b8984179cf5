//===- tests/runtime/KernelCacheTest.cpp - Memory + disk kernel cache -----===//
//
// The cache with an injected fake compiler (fixed bytes), so nothing here
// depends on codegen or a GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/KernelCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

using namespace bitfold;
using namespace bitfold::runtime;

namespace {

/// A scratch directory, removed afterwards.
class TempDir {
public:
  TempDir() {
    llvm::SmallString<128> p;
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("bitfold-cache-test", p));
    path = std::string(p);
  }
  ~TempDir() {
    ::chmod(path.c_str(), 0755);
    llvm::sys::fs::remove_directories(path);
  }
  std::string path;
};

CacheKey makeKey(std::string config = "r1.t128.v8.p1") {
  CacheKey k;
  k.kernelName = "ln_modulate";
  k.kernelHash = std::string(64, 'a');
  k.shape = "c4096.a8,8,8,8.o32";
  k.config = std::move(config);
  k.arch = "sm_90";
  k.options = "cubin";
  k.bitfoldVersion = "0.1.0";
  k.llvmVersion = "22.1.8";
  k.toolchain = "fake-toolchain 1";
  return k;
}

codegen::CompiledKernel fakeKernel(size_t cubinBytes = 512) {
  codegen::CompiledKernel k;
  k.entryName = "bitfold_ln_modulate";
  k.ptx = ".version 8.0\n.target sm_90\n// fake\n";
  for (size_t i = 0; i < cubinBytes; ++i)
    k.cubin.push_back(char(i * 7 + 3));
  k.cubinTool = "fake";
  k.config.rowsPerCta = 2;
  k.config.threadsPerRow = 64;
  k.config.vectorElems = 4;
  k.config.twoPass = true;
  k.abi.numGroups = 1;
  k.abi.numOperands = 4;
  k.abi.numDims = 1;
  k.abi.numScalars = 1;
  k.sharedBytes = 64;
  k.times = {{"lower", 1.5}, {"ptx", 2.25}};
  return k;
}

/// A fake compiler that counts its calls.
struct FakeCompiler {
  std::atomic<int> calls{0};
  int delayMs = 0;
  CompileFn fn() {
    return [this]() -> llvm::Expected<codegen::CompiledKernel> {
      ++calls;
      if (delayMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
      return fakeKernel();
    };
  }
};

struct Warnings {
  std::vector<std::string> messages;
  CacheOptions options(const std::string &dir) {
    CacheOptions o;
    o.dir = dir;
    o.warn = [this](llvm::StringRef m) { messages.push_back(m.str()); };
    return o;
  }
};

void expectSameKernel(const codegen::CompiledKernel &a,
                      const codegen::CompiledKernel &b) {
  EXPECT_EQ(a.entryName, b.entryName);
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.cubinTool, b.cubinTool);
  EXPECT_TRUE(a.config == b.config);
  EXPECT_EQ(a.abi.numGroups, b.abi.numGroups);
  EXPECT_EQ(a.abi.numOperands, b.abi.numOperands);
  EXPECT_EQ(a.abi.numDims, b.abi.numDims);
  EXPECT_EQ(a.abi.numScalars, b.abi.numScalars);
  EXPECT_EQ(a.sharedBytes, b.sharedBytes);
  ASSERT_EQ(a.times.size(), b.times.size());
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// Fills the cache directory with a valid entry for `key`.
void populate(const std::string &dir, const CacheKey &key) {
  Warnings w;
  KernelCache cache(w.options(dir));
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(key, fc.fn())));
  ASSERT_EQ(fc.calls, 1);
  ASSERT_TRUE(w.messages.empty());
}

} // namespace

TEST(CacheKey, TextNamesEveryFieldAndHashFollowsIt) {
  CacheKey k = makeKey();
  k.environment = "BITFOLD_FOO=1\n";
  std::string t = k.text();
  for (const char *field :
       {"kernel: ln_modulate", "kernel-hash: aaaa", "shape: c4096",
        "config: r1.t128.v8.p1", "arch: sm_90", "options: cubin",
        "bitfold: 0.1.0", "llvm: 22.1.8", "toolchain: fake-toolchain 1",
        "env: BITFOLD_FOO=1"})
    EXPECT_NE(t.find(field), std::string::npos) << field << " in\n" << t;
  EXPECT_EQ(k.hash().size(), 64u);
  // Every field changes the hash.
  std::string h = k.hash();
  auto changed = [&](auto mutate) {
    CacheKey c = k;
    mutate(c);
    return c.hash() != h;
  };
  EXPECT_TRUE(changed([](CacheKey &c) { c.kernelHash[0] = 'b'; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.shape += "x"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.config = "r2.t128.v8.p1"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.arch = "sm_100"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.options = "ptx"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.bitfoldVersion = "0.2.0"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.codegenRevision = "0123456789abcdef"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.llvmVersion = "23"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.toolchain = "other"; }));
  EXPECT_TRUE(changed([](CacheKey &c) { c.environment = ""; }));
}

// The environment allow-list of keys: tests/keys/KeysTest.cpp.

TEST(CacheEntry, EncodeDecodeRoundTrips) {
  CacheKey key = makeKey();
  codegen::CompiledKernel k = fakeKernel();
  std::string bytes = encodeEntry(key, k, 12.5);
  auto e = decodeEntry(bytes);
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  EXPECT_EQ(e->keyText, key.text());
  expectSameKernel(e->kernel, k);
  EXPECT_NE(e->metaJson.find("\"compileMs\":12.5"), std::string::npos)
      << e->metaJson;
  EXPECT_EQ(entryPath("/c", key.hash()),
            "/c/" + key.hash().substr(0, 2) + "/" + key.hash() + ".bfk");
}

TEST(KernelCache, MissCompilesOnceThenHitsMemory) {
  TempDir tmp;
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  FakeCompiler fc;
  auto a = cache.getOrCompile(makeKey(), fc.fn());
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  auto b = cache.getOrCompile(makeKey(), fc.fn());
  ASSERT_TRUE(bool(b));
  EXPECT_EQ(fc.calls, 1);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.stats().memoryHits, 1u);
  expectSameKernel(**a, fakeKernel());
  EXPECT_TRUE(llvm::sys::fs::exists(entryPath(tmp.path, makeKey().hash())));
  EXPECT_TRUE(w.messages.empty());
}

TEST(KernelCache, AnotherInstanceReadsTheEntryFromDisk) {
  TempDir tmp;
  populate(tmp.path, makeKey());
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  FakeCompiler fc;
  auto k = cache.getOrCompile(makeKey(), fc.fn());
  ASSERT_TRUE(bool(k));
  EXPECT_EQ(fc.calls, 0);
  EXPECT_EQ(cache.stats().diskHits, 1u);
  expectSameKernel(**k, fakeKernel());
  EXPECT_TRUE(w.messages.empty());
}

TEST(KernelCache, ReportsWhereEachKernelCameFrom) {
  TempDir tmp;
  Warnings w;
  FakeCompiler fc;
  {
    KernelCache cache(w.options(tmp.path));
    CacheOrigin origin;
    ASSERT_TRUE(bool(cache.getOrCompile(makeKey(), fc.fn(), &origin)));
    EXPECT_EQ(origin.kind, CacheOrigin::Compiled);
    EXPECT_EQ(origin.describe().rfind("compiled in ", 0), 0u)
        << origin.describe();
    ASSERT_TRUE(bool(cache.getOrCompile(makeKey(), fc.fn(), &origin)));
    EXPECT_EQ(origin.kind, CacheOrigin::Memory);
    EXPECT_EQ(origin.describe(), "memory cache hit");
  }
  KernelCache another(w.options(tmp.path));
  CacheOrigin origin;
  ASSERT_TRUE(bool(another.getOrCompile(makeKey(), fc.fn(), &origin)));
  EXPECT_EQ(origin.kind, CacheOrigin::Disk);
  EXPECT_GT(origin.ms, 0.0);
  EXPECT_EQ(origin.describe().rfind("disk cache hit (", 0), 0u)
      << origin.describe();
  EXPECT_EQ(fc.calls, 1);
}

TEST(KernelCache, DifferentKeysAreDifferentEntries) {
  TempDir tmp;
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(makeKey("r1.t128.v8.p1"), fc.fn())));
  ASSERT_TRUE(bool(cache.getOrCompile(makeKey("r2.t64.v8.p1"), fc.fn())));
  EXPECT_EQ(fc.calls, 2);
}

TEST(KernelCache, CompileFailureIsReportedAndNotRetried) {
  TempDir tmp;
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  int calls = 0;
  CompileFn failing = [&]() -> llvm::Expected<codegen::CompiledKernel> {
    ++calls;
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "ptx stage: boom");
  };
  auto a = cache.getOrCompile(makeKey(), failing);
  ASSERT_FALSE(bool(a));
  std::string msg = llvm::toString(a.takeError());
  EXPECT_NE(msg.find("ln_modulate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ptx stage: boom"), std::string::npos) << msg;
  auto b = cache.getOrCompile(makeKey(), failing);
  ASSERT_FALSE(bool(b));
  EXPECT_EQ(llvm::toString(b.takeError()), msg);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(llvm::sys::fs::exists(entryPath(tmp.path, makeKey().hash())));
}

TEST(KernelCache, ManyThreadsOneCompile) {
  TempDir tmp;
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  FakeCompiler fc;
  fc.delayMs = 50;
  std::vector<std::thread> threads;
  std::vector<const codegen::CompiledKernel *> got(16, nullptr);
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      auto k = cache.getOrCompile(makeKey(), fc.fn());
      if (k)
        got[i] = k->get();
      else
        llvm::consumeError(k.takeError());
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(fc.calls, 1);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(got[i], got[0]) << "thread " << i;
  EXPECT_NE(got[0], nullptr);
}

// ---- Corrupt entries: rebuilt, warned once, never trusted -----------------

namespace {

void expectRebuiltAndWarnedOnce(const std::string &dir, const CacheKey &key,
                                const char *expectedProblem) {
  Warnings w;
  {
    KernelCache cache(w.options(dir));
    FakeCompiler fc;
    auto k = cache.getOrCompile(key, fc.fn());
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    expectSameKernel(**k, fakeKernel());
    EXPECT_EQ(fc.calls, 1) << "a bad entry must be rebuilt, not trusted";
    EXPECT_EQ(cache.stats().corruptRebuilt, 1u);
    ASSERT_TRUE(bool(cache.getOrCompile(key, fc.fn())));
    EXPECT_EQ(fc.calls, 1);
  }
  ASSERT_EQ(w.messages.size(), 1u) << "exactly one warning";
  EXPECT_NE(w.messages[0].find("is invalid"), std::string::npos)
      << w.messages[0];
  EXPECT_NE(w.messages[0].find(expectedProblem), std::string::npos)
      << w.messages[0];
  EXPECT_NE(w.messages[0].find("rebuilt it"), std::string::npos)
      << w.messages[0];
  // The rebuilt entry is valid: a fresh instance reads it silently.
  Warnings w2;
  KernelCache again(w2.options(dir));
  FakeCompiler fc2;
  ASSERT_TRUE(bool(again.getOrCompile(key, fc2.fn())));
  EXPECT_EQ(fc2.calls, 0);
  EXPECT_TRUE(w2.messages.empty());
}

} // namespace

TEST(KernelCacheCorruption, TruncatedEntryIsRebuilt) {
  TempDir tmp;
  CacheKey key = makeKey();
  populate(tmp.path, key);
  std::string path = entryPath(tmp.path, key.hash());
  std::string bytes = readFile(path);
  ASSERT_EQ(::truncate(path.c_str(), off_t(bytes.size() - 100)), 0);
  expectRebuiltAndWarnedOnce(tmp.path, key, "truncated");
}

TEST(KernelCacheCorruption, TruncatedToNothingIsRebuilt) {
  TempDir tmp;
  CacheKey key = makeKey();
  populate(tmp.path, key);
  std::string path = entryPath(tmp.path, key.hash());
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  expectRebuiltAndWarnedOnce(tmp.path, key, "truncated");
}

TEST(KernelCacheCorruption, FlippedByteIsRebuilt) {
  CacheKey key = makeKey();
  // A byte in the metadata, in the PTX and the last byte of the cubin.
  for (double where : {0.15, 0.6, 1.0}) {
    TempDir tmp;
    populate(tmp.path, key);
    std::string path = entryPath(tmp.path, key.hash());
    std::string bytes = readFile(path);
    size_t header = bytes.find('\n', bytes.find('\n') + 1) + 1;
    size_t pos = header + size_t(where * double(bytes.size() - header - 1));
    bytes[pos] ^= 0x20;
    writeFile(path, bytes);
    SCOPED_TRACE("flipped byte " + std::to_string(pos));
    expectRebuiltAndWarnedOnce(tmp.path, key, "checksum mismatch");
  }
}

TEST(KernelCacheCorruption, OtherFormatVersionIsRebuilt) {
  TempDir tmp;
  CacheKey key = makeKey();
  populate(tmp.path, key);
  std::string path = entryPath(tmp.path, key.hash());
  std::string bytes = readFile(path);
  std::string header = "BITFOLD-KERNEL " + std::to_string(kCacheFormat);
  ASSERT_EQ(bytes.rfind(header, 0), 0u);
  bytes.replace(0, header.size(), "BITFOLD-KERNEL 999");
  writeFile(path, bytes);
  expectRebuiltAndWarnedOnce(tmp.path, key, "entry format 999");
}

TEST(KernelCacheCorruption, EntryOfAnotherKeyIsNotTrusted) {
  // Simulates a hash collision: the file at this key's path holds another
  // key's (valid, checksummed) entry.
  TempDir tmp;
  CacheKey key = makeKey();
  CacheKey other = makeKey();
  other.bitfoldVersion = "0.0.9";
  std::string path = entryPath(tmp.path, key.hash());
  ASSERT_FALSE(llvm::sys::fs::create_directories(
      llvm::sys::path::parent_path(path)));
  writeFile(path, encodeEntry(other, fakeKernel(), 1.0));
  expectRebuiltAndWarnedOnce(tmp.path, key, "different key");
}

TEST(KernelCacheCorruption, GarbageIsRebuilt) {
  TempDir tmp;
  CacheKey key = makeKey();
  std::string path = entryPath(tmp.path, key.hash());
  ASSERT_FALSE(llvm::sys::fs::create_directories(
      llvm::sys::path::parent_path(path)));
  writeFile(path, std::string("\x7f" "ELF garbage\n\n\n", 15));
  expectRebuiltAndWarnedOnce(tmp.path, key, "bad magic");
}

// ---- Many processes -------------------------------------------------------

TEST(KernelCache, EightProcessesRacingOnOneKeyCompileOnce) {
  TempDir tmp;
  const std::string marker = tmp.path + "/compiles.txt";
  const std::string cacheDir = tmp.path + "/cache";
  CacheKey key = makeKey();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      if (::read(go[0], &c, 1) != 1) // wait for the start signal
        ::_exit(10);
      CacheOptions o;
      o.dir = cacheDir;
      o.warn = [](llvm::StringRef) { ::_exit(11); }; // no warning expected
      KernelCache cache(o);
      CompileFn compile = [&]() -> llvm::Expected<codegen::CompiledKernel> {
        int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        std::string line = std::to_string(::getpid()) + "\n";
        if (fd < 0 || ::write(fd, line.data(), line.size()) < 0)
          ::_exit(12);
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return fakeKernel();
      };
      auto k = cache.getOrCompile(key, compile);
      if (!k) {
        llvm::consumeError(k.takeError());
        ::_exit(13);
      }
      codegen::CompiledKernel want = fakeKernel();
      bool same = (*k)->cubin == want.cubin && (*k)->ptx == want.ptx &&
                  (*k)->entryName == want.entryName;
      ::_exit(same ? 0 : 14);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ASSERT_EQ(::write(go[1], "GGGGGGGG", 8), 8);
  ::close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child " << pid << " died";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
  }
  std::string compiles = readFile(marker);
  EXPECT_EQ(std::count(compiles.begin(), compiles.end(), '\n'), 1)
      << "compiles by pid:\n" << compiles;
  auto bytes = readFile(entryPath(cacheDir, key.hash()));
  EXPECT_TRUE(bool(decodeEntry(bytes)));
  // No temp files left behind.
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(cacheDir, ec), end;
       it != end && !ec; it.increment(ec))
    EXPECT_EQ(it->path().find(".tmp."), std::string::npos) << it->path();
}

// ---- Unusable directories degrade to memory only --------------------------

TEST(KernelCacheDegraded, DirectoryUnderAFileWorksFromMemoryWithOneWarning) {
  TempDir tmp;
  std::string file = tmp.path + "/not-a-dir";
  writeFile(file, "x");
  Warnings w;
  KernelCache cache(w.options(file + "/cache"));
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(makeKey("r1.t128.v8.p1"), fc.fn())));
  ASSERT_TRUE(bool(cache.getOrCompile(makeKey("r2.t128.v8.p1"), fc.fn())));
  ASSERT_TRUE(bool(cache.getOrCompile(makeKey("r1.t128.v8.p1"), fc.fn())));
  EXPECT_EQ(fc.calls, 2);
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_NE(w.messages[0].find("in-memory cache only"), std::string::npos)
      << w.messages[0];
  EXPECT_FALSE(cache.diskWritable());
}

namespace {

/// Runs `body` in a forked child (so rlimits and uid changes stay there) and
/// returns its exit status and the text it reported. The child exits 0 after
/// `body`, 2 if the report cannot be written; `body` may _exit itself.
struct ChildRun {
  int status = 0;
  std::string report;
  bool exitedWith(int code) const {
    return WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
};
ChildRun runInChild(llvm::function_ref<std::string()> body) {
  ChildRun r;
  int fds[2];
  if (::pipe(fds) != 0) {
    r.report = "pipe failed";
    r.status = -1;
    return r;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    r.report = "fork failed";
    r.status = -1;
    return r;
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string report = body();
    if (::write(fds[1], report.data(), report.size()) < 0)
      ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0)
    r.report.append(buf, size_t(n));
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

} // namespace

TEST(KernelCacheDegraded, ReadOnlyDirectoryStillServesItsEntries) {
  // chmod 0555 does not stop root, and CI runs as root: there the check
  // runs in a child that drops to uid/gid 65534 (nobody) first.
  TempDir tmp;
  CacheKey key = makeKey();
  populate(tmp.path, key);
  std::string sub =
      llvm::sys::path::parent_path(entryPath(tmp.path, key.hash())).str();
  ASSERT_EQ(::chmod(sub.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(tmp.path.c_str(), 0555), 0);
  ChildRun child = runInChild([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(77);
    std::string report;
    int warnings = 0;
    CacheOptions o;
    o.dir = tmp.path;
    o.warn = [&](llvm::StringRef m) {
      ++warnings;
      report += m.str() + "\n";
    };
    KernelCache cache(o);
    FakeCompiler fc;
    bool ok = bool(cache.getOrCompile(key, fc.fn()));
    int afterFirst = fc.calls;
    ok = ok && bool(cache.getOrCompile(makeKey("r4.t32.v8.p1"), fc.fn()));
    return (ok ? "ok " : "failed ") + std::to_string(afterFirst) + " " +
           std::to_string(fc.calls) + " " + std::to_string(warnings) + "\n" +
           report;
  });
  ::chmod(sub.c_str(), 0755);
  if (child.exitedWith(77))
    GTEST_SKIP() << "running as root and cannot drop to uid 65534, so a "
                    "read-only directory cannot be made here; "
                    "DirectoryUnderAFile... and FullDisk... cover the "
                    "write-failure paths";
  const std::string &report = child.report;
  ASSERT_TRUE(child.exitedWith(0)) << report;
  // The valid entry is read (0 compiles), the new key compiled (1), one
  // warning.
  EXPECT_EQ(report.rfind("ok 0 1 1\n", 0), 0u) << report;
  EXPECT_NE(report.find("in-memory cache only"), std::string::npos) << report;
}

TEST(KernelCacheDegraded, FullDiskWorksFromMemoryWithOneWarning) {
  // A file size limit makes writes fail (EFBIG) like a full disk, even for
  // root. Done in a child so the limit does not leak into other tests.
  TempDir tmp;
  ChildRun child = runInChild([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {64, 64};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    std::string report;
    CacheOptions o;
    o.dir = tmp.path;
    int warnings = 0;
    o.warn = [&](llvm::StringRef m) {
      ++warnings;
      report += m.str() + "\n";
    };
    KernelCache cache(o);
    FakeCompiler fc;
    bool ok = bool(cache.getOrCompile(makeKey(), fc.fn())) &&
              bool(cache.getOrCompile(makeKey("r2.t128.v8.p1"), fc.fn()));
    return (ok ? "ok " : "failed ") + std::to_string(warnings) + " " +
           std::to_string(fc.calls) + "\n" + report;
  });
  const std::string &report = child.report;
  ASSERT_TRUE(child.exitedWith(0)) << report;
  EXPECT_EQ(report.rfind("ok 1 2\n", 0), 0u) << report;
  EXPECT_NE(report.find("in-memory cache only"), std::string::npos) << report;
  EXPECT_NE(report.find("File too large"), std::string::npos) << report;
  // Nothing partial was published.
  EXPECT_FALSE(llvm::sys::fs::exists(entryPath(tmp.path, makeKey().hash())));
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(tmp.path, ec), end;
       it != end && !ec; it.increment(ec))
    EXPECT_EQ(it->path().find(".tmp."), std::string::npos) << it->path();
}

TEST(KernelCacheDegraded, DiskCacheOffByEnvironment) {
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  TempDir tmp;
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  ::unsetenv("BITFOLD_DISK_CACHE");
  EXPECT_EQ(cache.directory(), "");
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(makeKey(), fc.fn())));
  EXPECT_FALSE(llvm::sys::fs::exists(entryPath(tmp.path, makeKey().hash())));
  EXPECT_TRUE(w.messages.empty());
}

// ---- The cache trusts nothing it reads ---------------------------------------

namespace {

/// `entry` with its metadata JSON changed by `edit` and a correct
/// checksum: consistent to the checksum, inconsistent inside.
std::string withMeta(const std::string &entry,
                     llvm::function_ref<void(nlohmann::json &)> edit,
                     const std::string &ptx = "") {
  llvm::StringRef rest = llvm::StringRef(entry).split('\n').second;
  auto [sizes, payload] = rest.split('\n');
  llvm::SmallVector<llvm::StringRef, 4> f;
  sizes.split(f, ' ');
  size_t metaLen = 0, ptxLen = 0, cubinLen = 0;
  EXPECT_FALSE(f[0].getAsInteger(10, metaLen) || f[1].getAsInteger(10, ptxLen) ||
               f[2].getAsInteger(10, cubinLen));
  nlohmann::json meta = nlohmann::json::parse(payload.take_front(metaLen).str());
  edit(meta);
  std::string metaText = meta.dump();
  std::string ptxText =
      ptx.empty() ? payload.substr(metaLen, ptxLen).str() : ptx;
  std::string body = metaText + ptxText +
                     payload.substr(metaLen + ptxLen, cubinLen).str();
  std::string sum;
  llvm::raw_string_ostream(sum)
      << llvm::format_hex_no_prefix(llvm::xxh3_64bits(llvm::StringRef(body)), 16);
  return "BITFOLD-KERNEL " + std::to_string(kCacheFormat) + "\n" +
         std::to_string(metaText.size()) + " " +
         std::to_string(ptxText.size()) + " " + std::to_string(cubinLen) + " " +
         sum + "\n" + body;
}

/// Writes an inconsistent entry for `key` and checks the cache rebuilds
/// and replaces it with one warning naming `problem`.
void expectRebuilt(const std::string &dir, const CacheKey &key,
                   const std::string &bytes, const std::string &problem,
                   const ValidateFn &validate = {}) {
  std::string path = entryPath(dir, key.hash());
  ASSERT_FALSE(llvm::sys::fs::create_directories(
      llvm::sys::path::parent_path(path)));
  writeFile(path, bytes);
  Warnings w;
  KernelCache cache(w.options(dir));
  FakeCompiler fc;
  auto k = cache.getOrCompile(key, fc.fn(), nullptr, validate);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(fc.calls, 1) << "the inconsistent entry was used";
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_NE(w.messages[0].find(problem), std::string::npos) << w.messages[0];
  EXPECT_TRUE(bool(decodeEntry(readFile(path)))) << "not replaced";
  EXPECT_EQ(cache.stats().corruptRebuilt, 1u);
}

} // namespace

TEST(KernelCacheMetadata, WrongTypeIsAnErrorNotAnException) {
  std::string good = encodeEntry(makeKey(), fakeKernel(), 1.0);
  std::string bad = withMeta(good, [](nlohmann::json &m) {
    m["abi"]["numGroups"] = "one";
  });
  auto e = decodeEntry(bad); // threw a json type_error on main
  ASSERT_FALSE(bool(e));
  std::string why = llvm::toString(e.takeError());
  EXPECT_NE(why.find("'abi.numGroups'"), std::string::npos) << why;
  auto cfg = decodeEntry(withMeta(good, [](nlohmann::json &m) {
    m["config"] = 0; // the config is stored as TileConfig text
  }));
  ASSERT_FALSE(bool(cfg));
  why = llvm::toString(cfg.takeError());
  EXPECT_NE(why.find("'config' is not a string"), std::string::npos) << why;
  auto c = decodeEntry(withMeta(good, [](nlohmann::json &m) {
    m["createdAt"] = "yesterday";
  }));
  ASSERT_FALSE(bool(c));
  llvm::consumeError(c.takeError());
}

TEST(KernelCacheMetadata, BadPassCountIsRebuilt) {
  TempDir tmp;
  CacheKey key = makeKey();
  expectRebuilt(tmp.path, key,
                withMeta(encodeEntry(key, fakeKernel(), 1.0),
                         [](nlohmann::json &m) { m["config"] = "r1.t128.v8.p3"; }),
                "passes must be 1 or 2");
}

TEST(KernelCacheMetadata, ZeroRowsPerCtaIsRebuilt) {
  TempDir tmp;
  CacheKey key = makeKey();
  expectRebuilt(tmp.path, key,
                withMeta(encodeEntry(key, fakeKernel(), 1.0),
                         [](nlohmann::json &m) { m["config"] = "r0.t128.v8.p1"; }),
                "field 1 must be 'r' and a positive number");
}

TEST(KernelCacheMetadata, AbiThePtxContradictsIsInvalid) {
  // ln_modulate's ABI: 1 group x 4 operands x 2 + 1 rows + 1 dim + 1 scalar
  // = 11 parameters; the metadata claims 5 operands (13).
  std::string ptx = ".visible .entry bitfold_ln_modulate(\n";
  for (int i = 0; i < 11; ++i)
    ptx += "\t.param .u64 p" + std::to_string(i) + (i < 10 ? ",\n" : "\n");
  ptx += ")\n{\n}\n";
  std::string bytes = withMeta(
      encodeEntry(makeKey(), fakeKernel(), 1.0),
      [](nlohmann::json &m) { m["abi"]["numOperands"] = 5; }, ptx);
  auto e = decodeEntry(bytes);
  ASSERT_FALSE(bool(e));
  std::string why = llvm::toString(e.takeError());
  EXPECT_NE(why
                .find("the PTX entry takes 11 parameters, the ABI (1 groups, "
                      "5 operands, 1 dims, 1 scalars) says 13"),
            std::string::npos)
      << why;
  // With the matching count it decodes.
  EXPECT_TRUE(bool(decodeEntry(withMeta(
      encodeEntry(makeKey(), fakeKernel(), 1.0), [](nlohmann::json &) {}, ptx))));
}

TEST(KernelCacheMetadata, EntryTheValidatorRejectsIsRebuiltAndReplaced) {
  TempDir tmp;
  CacheKey key = makeKey();
  ValidateFn fourOperands = [](const codegen::CompiledKernel &k) -> llvm::Error {
    if (k.abi.numOperands == 4)
      return llvm::Error::success();
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%d operands, the definition has 4",
                                   k.abi.numOperands);
  };
  expectRebuilt(tmp.path, key,
                withMeta(encodeEntry(key, fakeKernel(), 1.0),
                         [](nlohmann::json &m) { m["abi"]["numOperands"] = 5; }),
                "5 operands, the definition has 4", fourOperands);
  // The replacement passes: a second cache hits the disk.
  Warnings w;
  KernelCache again(w.options(tmp.path));
  FakeCompiler fc;
  ASSERT_TRUE(bool(again.getOrCompile(key, fc.fn(), nullptr, fourOperands)));
  EXPECT_EQ(fc.calls, 0);
  EXPECT_TRUE(w.messages.empty());
}

namespace {

/// getOrCompile of `key` in a child with an alarm: a hang fails the test
/// instead of hanging it. Reports "ok <compiles> <warnings>\n<warnings>".
ChildRun getInChild(const std::string &dir, const CacheKey &key,
                    uint64_t maxEntryBytes = kMaxEntryBytes) {
  return runInChild([&] {
    ::alarm(20);
    Warnings w;
    CacheOptions o = w.options(dir);
    o.maxEntryBytes = maxEntryBytes;
    KernelCache cache(o);
    FakeCompiler fc;
    bool ok = bool(cache.getOrCompile(key, fc.fn()));
    std::string r = (ok ? "ok " : "failed ") + std::to_string(fc.calls) + " " +
                    std::to_string(w.messages.size()) + "\n";
    for (const std::string &m : w.messages)
      r += m + "\n";
    return r;
  });
}

} // namespace

TEST(KernelCacheHostile, FifoEntryIsReplacedWithoutHanging) {
  TempDir tmp;
  CacheKey key = makeKey();
  std::string path = entryPath(tmp.path, key.hash());
  ASSERT_FALSE(llvm::sys::fs::create_directories(
      llvm::sys::path::parent_path(path)));
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  ChildRun child = getInChild(tmp.path, key);
  ASSERT_TRUE(child.exitedWith(0)) << "status " << child.status << " (14: the "
                                   << "alarm: it hung)\n" << child.report;
  EXPECT_EQ(child.report.rfind("ok 1 1\n", 0), 0u) << child.report;
  EXPECT_NE(child.report.find("FIFO"), std::string::npos) << child.report;
  EXPECT_TRUE(bool(decodeEntry(readFile(path)))) << "the FIFO was not replaced";
}

TEST(KernelCacheHostile, SymlinkToDevZeroIsNeverFollowed) {
  TempDir tmp;
  CacheKey key = makeKey();
  std::string path = entryPath(tmp.path, key.hash());
  ASSERT_FALSE(llvm::sys::fs::create_directories(
      llvm::sys::path::parent_path(path)));
  ASSERT_EQ(::symlink("/dev/zero", path.c_str()), 0);
  ChildRun child = getInChild(tmp.path, key);
  ASSERT_TRUE(child.exitedWith(0)) << "status " << child.status << "\n"
                                   << child.report;
  EXPECT_EQ(child.report.rfind("ok 1 1\n", 0), 0u) << child.report;
  EXPECT_NE(child.report.find("symbolic link"), std::string::npos)
      << child.report;
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link was not replaced by an entry";
}

TEST(KernelCacheHostile, OversizedEntryIsNotRead) {
  TempDir tmp;
  CacheKey key = makeKey();
  populate(tmp.path, key);
  std::string path = entryPath(tmp.path, key.hash());
  writeFile(path, readFile(path) + std::string(4096, 'x'));
  ChildRun child = getInChild(tmp.path, key, /*maxEntryBytes=*/2048);
  ASSERT_TRUE(child.exitedWith(0)) << child.report;
  EXPECT_EQ(child.report.rfind("ok 1 1\n", 0), 0u) << child.report;
  EXPECT_NE(child.report.find("over the 2048-byte limit"), std::string::npos)
      << child.report;
}

TEST(KernelCacheHostile, DirectoryAtOneEntryPathDisablesOnlyThatEntry) {
  TempDir tmp;
  CacheKey key = makeKey(), other = makeKey("r4.t32.v8.p1");
  std::string path = entryPath(tmp.path, key.hash());
  ASSERT_FALSE(llvm::sys::fs::create_directories(path));
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(key, fc.fn())));
  ASSERT_TRUE(bool(cache.getOrCompile(other, fc.fn())));
  EXPECT_TRUE(cache.diskWritable());
  EXPECT_TRUE(bool(decodeEntry(readFile(entryPath(tmp.path, other.hash())))))
      << "the other key was not written: one bad path turned off the disk";
  ASSERT_FALSE(w.messages.empty());
  EXPECT_NE(w.messages.back().find(path), std::string::npos) << w.messages.back();
}

TEST(KernelCacheHostile, HeldLockIsWaitedForBoundedlyWithItsName) {
  TempDir tmp;
  CacheKey key = makeKey();
  std::string entry = entryPath(tmp.path, key.hash());
  std::string lock = entry.substr(0, entry.size() - 4) + ".lock";
  ASSERT_FALSE(llvm::sys::fs::create_directories(
      llvm::sys::path::parent_path(entry)));
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0); // another holder (own open file)
  ASSERT_GT(::write(fd, "4242\n", 5), 0);
  Warnings w;
  CacheOptions o = w.options(tmp.path);
  o.lockTimeoutSeconds = 0.5;
  o.lockNoticeSeconds = 0.1;
  KernelCache cache(o);
  FakeCompiler fc;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(bool(cache.getOrCompile(key, fc.fn())));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                 .count();
  ::close(fd);
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(fc.calls, 1);
  ASSERT_EQ(w.messages.size(), 2u);
  EXPECT_NE(w.messages[0].find("waiting for the kernel cache lock '" + lock +
                               "' (held by pid 4242"),
            std::string::npos)
      << w.messages[0];
  EXPECT_NE(w.messages[1].find(lock), std::string::npos) << w.messages[1];
}

// ---- clear and prune touch only the cache's own files ------------------------

namespace {

bool exists(const std::string &p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

} // namespace

TEST(KernelCacheClear, ProjectFolderKeepsEverythingButCacheFiles) {
  TempDir project, outside;
  writeFile(project.path + "/Cargo.lock", "cargo");
  writeFile(project.path + "/yarn.lock", "yarn");
  ASSERT_FALSE(llvm::sys::fs::create_directories(project.path + "/.git"));
  writeFile(project.path + "/.git/index.lock", "git");
  writeFile(outside.path + "/real.lock", "outside");
  writeFile(outside.path + "/x.bfk", "outside");
  ASSERT_EQ(::symlink((outside.path + "/real.lock").c_str(),
                      (project.path + "/linked.lock").c_str()), 0);
  ASSERT_EQ(::symlink(outside.path.c_str(), (project.path + "/vendor").c_str()),
            0);
  // A two-hex-digit folder that is a symlink, holding cache-like names.
  std::string h(64, 'c');
  writeFile(outside.path + "/" + h + ".lock", "outside");
  ASSERT_EQ(::symlink(outside.path.c_str(), (project.path + "/cc").c_str()), 0);
  // A real cache entry among them, and a foreign file in its folder.
  CacheKey key = makeKey();
  populate(project.path, key);
  std::string entry = entryPath(project.path, key.hash());
  std::string sub = llvm::sys::path::parent_path(entry).str();
  writeFile(sub + "/notes.lock", "mine");

  auto r = clearCacheDir(project.path);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->filesRemoved, 2u); // the entry and its lock file
  EXPECT_FALSE(exists(entry));
  for (std::string p :
       {project.path + "/Cargo.lock", project.path + "/yarn.lock",
        project.path + "/.git/index.lock", project.path + "/linked.lock",
        outside.path + "/real.lock", outside.path + "/x.bfk",
        outside.path + "/" + h + ".lock", sub + "/notes.lock"})
    EXPECT_TRUE(exists(p)) << p << " was removed";
}

TEST(KernelCacheClear, FailedRemovalIsAnError) {
  TempDir tmp;
  populate(tmp.path, makeKey());
  std::string sub =
      llvm::sys::path::parent_path(entryPath(tmp.path, makeKey().hash())).str();
  ASSERT_EQ(::chmod(tmp.path.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(sub.c_str(), 0755), 0); // readable, not writable
  ChildRun child = runInChild([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(77);
    auto r = clearCacheDir(tmp.path);
    return r ? std::string("ok") : "error: " + llvm::toString(r.takeError());
  });
  if (child.exitedWith(77))
    GTEST_SKIP() << "cannot drop to uid 65534";
  ASSERT_TRUE(child.exitedWith(0)) << child.report;
  EXPECT_EQ(child.report.rfind("error: cannot remove '", 0), 0u) << child.report;
  EXPECT_NE(child.report.find("Permission denied"), std::string::npos)
      << child.report;
}

TEST(KernelCacheClear, PruneRemovesTheOldestEntriesFirst) {
  TempDir tmp;
  std::vector<CacheKey> keys = {makeKey("r1.t128.v8.p1"),
                                makeKey("r2.t128.v8.p1"),
                                makeKey("r4.t128.v8.p1")};
  uint64_t one = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    populate(tmp.path, keys[i]);
    std::string p = entryPath(tmp.path, keys[i].hash());
    struct timespec times[2] = {{0, 0}, {time_t(1000000 * (i + 1)), 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
    one = std::max<uint64_t>(one, readFile(p).size());
  }
  auto r = pruneCacheDir(tmp.path, one + 10);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->filesRemoved, 2u);
  EXPECT_FALSE(exists(entryPath(tmp.path, keys[0].hash())));
  EXPECT_FALSE(exists(entryPath(tmp.path, keys[1].hash())));
  EXPECT_TRUE(exists(entryPath(tmp.path, keys[2].hash())));
}

TEST(KernelCacheList, UnreadableFolderIsAProblemNotSkipped) {
  TempDir tmp;
  CacheKey key = makeKey();
  populate(tmp.path, key);
  std::string sub =
      llvm::sys::path::parent_path(entryPath(tmp.path, key.hash())).str();
  ASSERT_EQ(::chmod(tmp.path.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(sub.c_str(), 0700), 0);
  ChildRun child = runInChild([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(77);
    CacheListing l = listCacheDir(tmp.path);
    std::string r = std::to_string(l.problems.size()) + "\n";
    for (const std::string &p : l.problems)
      r += p + "\n";
    return r;
  });
  ::chmod(sub.c_str(), 0755);
  if (child.exitedWith(77))
    GTEST_SKIP() << "cannot drop to uid 65534";
  ASSERT_TRUE(child.exitedWith(0)) << child.report;
  EXPECT_EQ(child.report.rfind("1\ncannot read directory '" + sub + "'", 0), 0u)
      << child.report;
}

TEST(KernelCacheList, ListsEntriesWithTheirProblems) {
  TempDir tmp;
  CacheKey key = makeKey(), bad = makeKey("r4.t32.v8.p1");
  populate(tmp.path, key);
  populate(tmp.path, bad);
  std::string badPath = entryPath(tmp.path, bad.hash());
  writeFile(badPath, withMeta(readFile(badPath), [](nlohmann::json &m) {
              m["config"] = "r1.t128.v8.p3";
            }));
  CacheListing l = listCacheDir(tmp.path);
  ASSERT_EQ(l.entries.size(), 2u);
  EXPECT_EQ(l.lockFiles, 2);
  EXPECT_TRUE(l.problems.empty());
  int invalid = 0;
  for (const CacheFileInfo &e : l.entries)
    if (!e.problem.empty()) {
      ++invalid;
      EXPECT_EQ(e.path, badPath);
      EXPECT_NE(e.problem.find("passes must be 1 or 2"), std::string::npos) << e.problem;
    }
  EXPECT_EQ(invalid, 1);
}

// ---- Byte budget: least recently used entries go first ----------------------

namespace {

/// Sum of the .bfk entries under `dir`, and their count.
std::pair<uint64_t, int> entryBytes(const std::string &dir) {
  uint64_t total = 0;
  int n = 0;
  for (const CacheFileInfo &e : listCacheDir(dir).entries) {
    total += e.bytes;
    ++n;
  }
  return {total, n};
}

void setMtime(const std::string &path, time_t t) {
  struct timespec times[2] = {{0, UTIME_OMIT}, {t, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

} // namespace

TEST(KernelCacheBudget, AWriteOverTheBudgetEvictsTheLeastRecentlyUsed) {
  TempDir tmp;
  CacheKey a = makeKey("r1.t128.v8.p1"), b = makeKey("r2.t128.v8.p1"),
           c = makeKey("r4.t128.v8.p1");
  populate(tmp.path, a);
  populate(tmp.path, b);
  uint64_t one = readFile(entryPath(tmp.path, a.hash())).size();
  // a used long ago but read since (a hit refreshes a stale mtime); b not.
  setMtime(entryPath(tmp.path, a.hash()), 1000000);
  setMtime(entryPath(tmp.path, b.hash()), 2000000);
  Warnings w;
  CacheOptions o = w.options(tmp.path);
  o.maxBytes = int64_t(2 * one + one / 2); // room for two entries
  {
    KernelCache reader(o);
    FakeCompiler fc;
    ASSERT_TRUE(bool(reader.getOrCompile(a, fc.fn())));
    EXPECT_EQ(fc.calls, 0);
  }
  KernelCache cache(o);
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(c, fc.fn()))); // the write evicts
  EXPECT_TRUE(exists(entryPath(tmp.path, a.hash())))
      << "the entry read a moment ago was evicted";
  EXPECT_FALSE(exists(entryPath(tmp.path, b.hash())))
      << "the least recently used entry was kept (budget " << o.maxBytes
      << " bytes, entries of " << one << ")";
  EXPECT_TRUE(exists(entryPath(tmp.path, c.hash())));
  EXPECT_EQ(cache.stats().evicted, 1u);
  EXPECT_TRUE(w.messages.empty());
}

TEST(KernelCacheBudget, ARecentHitWritesNothing) {
  TempDir tmp;
  CacheKey a = makeKey();
  populate(tmp.path, a);
  std::string p = entryPath(tmp.path, a.hash());
  time_t recent = std::time(nullptr) - 60; // within the hour granule
  setMtime(p, recent);
  Warnings w;
  KernelCache cache(w.options(tmp.path));
  FakeCompiler fc;
  ASSERT_TRUE(bool(cache.getOrCompile(a, fc.fn())));
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, recent) << "a hit within the hour touched the entry";
}

TEST(KernelCacheBudget, BudgetComesFromTheEnvironmentUnlessGiven) {
  TempDir tmp;
  ::setenv("BITFOLD_CACHE_MAX_BYTES", "12345", 1);
  Warnings w;
  EXPECT_EQ(KernelCache(w.options(tmp.path)).maxBytes(), 12345u);
  CacheOptions o = w.options(tmp.path);
  o.maxBytes = 0;
  EXPECT_EQ(KernelCache(o).maxBytes(), 0u) << "0 must mean unlimited";
  ::setenv("BITFOLD_CACHE_MAX_BYTES", "lots", 1);
  EXPECT_EQ(KernelCache(w.options(tmp.path)).maxBytes(), kDefaultCacheMaxBytes);
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_NE(w.messages[0].find("BITFOLD_CACHE_MAX_BYTES='lots'"),
            std::string::npos);
  ::unsetenv("BITFOLD_CACHE_MAX_BYTES");
  EXPECT_EQ(KernelCache(w.options(tmp.path)).maxBytes(), kDefaultCacheMaxBytes);
}

TEST(KernelCacheBudget, ConcurrentWritersStayWithinTheBudgetAndReadWholeEntries) {
  TempDir tmp;
  const std::string cacheDir = tmp.path + "/cache";
  const uint64_t one = encodeEntry(makeKey("r1.t128.v8.p1"), fakeKernel(), 1)
                           .size() + 64;
  const uint64_t budget = 5 * one;
  constexpr int kWriters = 6, kKeysEach = 8;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kWriters; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char ch;
      if (::read(go[0], &ch, 1) != 1)
        ::_exit(10);
      CacheOptions o;
      o.dir = cacheDir;
      o.maxBytes = int64_t(budget);
      o.warn = [](llvm::StringRef) { ::_exit(11); }; // no warning expected
      // Every writer compiles its own keys and re-reads everyone's first
      // keys (through fresh caches, so from disk) while others evict them.
      for (int k = 0; k < kKeysEach; ++k) {
        for (int j = 0; j < kWriters; ++j) {
          KernelCache cache(o);
          int idx = (j == i ? k : 0) * kWriters + j;
          auto got = cache.getOrCompile(
              makeKey("r1.t" + std::to_string(32 + idx) + ".v8.p1"),
              [] { return llvm::Expected<codegen::CompiledKernel>(fakeKernel()); });
          if (!got) {
            llvm::consumeError(got.takeError());
            ::_exit(12);
          }
          if ((*got)->cubin != fakeKernel().cubin)
            ::_exit(13); // a torn or corrupt read
        }
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ASSERT_EQ(::write(go[1], "GGGGGG", kWriters), kWriters);
  ::close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child " << pid << " died";
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "child " << pid << " (12: failed get, 13: corrupt read)";
  }
  auto [bytes, n] = entryBytes(cacheDir);
  EXPECT_LE(bytes, budget + one)
      << n << " entries, " << bytes << " bytes; budget " << budget
      << " + one entry of " << one << ", " << kWriters << " writers x "
      << kKeysEach << " keys";
  EXPECT_GT(n, 0);
  CacheListing l = listCacheDir(cacheDir);
  for (const CacheFileInfo &e : l.entries)
    EXPECT_EQ(e.problem, "") << e.path;
  EXPECT_EQ(l.tmpFiles, 0);
}
