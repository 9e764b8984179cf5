//===- tests/tools/CacheCommandTest.cpp - `bitfold cache` ----------------===//
//
// `bitfold cache` on a directory filled through KernelCache (a stand-in
// compile), one entry then corrupted.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "runtime/KernelCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/xxhash.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include <unistd.h>

using namespace bitfold;
using namespace bitfold::runtime;
using bitfold::tools::test::Output;

namespace {

const bool noDiskCache = [] {
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

Output cache(std::vector<std::string> args) {
  args.insert(args.begin(), "cache");
  return bitfold::tools::test::cli(args);
}

CacheKey key(const std::string &kernel, const std::string &config) {
  CacheKey k;
  k.kernelName = kernel;
  k.kernelHash = std::string(64, 'c');
  k.shape = "c4096.a16,16,16,16.o2147483647";
  k.config = config;
  k.arch = "sm_90";
  k.options = "cubin=1 tool=auto";
  k.bitfoldVersion = "0.1.0";
  k.llvmVersion = "22";
  k.toolchain = "fake";
  return k;
}

class CacheCommand : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> p;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("bitfold-cmd-test", p));
    dir = std::string(p);
    CacheOptions o;
    o.dir = dir;
    o.disk = true;
    ::unsetenv("BITFOLD_DISK_CACHE");
    KernelCache c(o);
    ::setenv("BITFOLD_DISK_CACHE", "0", 1);
    for (auto [kernel, config] :
         {std::pair{"ln_modulate", "r1.t128.v8.p1"},
          std::pair{"ln_modulate", "r2.t64.v8.p1"},
          std::pair{"conv_bias", "r4.t32.v8.p1"}}) {
      CacheKey k = key(kernel, config);
      auto r = c.getOrCompile(k, [cfg = std::string(config)] {
        codegen::CompiledKernel ck;
        ck.config = llvm::cantFail(keys::TileConfig::parse(cfg));
        ck.entryName = "e";
        ck.ptx = "ptx";
        ck.cubin = {'c', 'u', 'b'};
        return llvm::Expected<codegen::CompiledKernel>(std::move(ck));
      });
      ASSERT_TRUE(bool(r));
    }
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string dir;
};

} // namespace

TEST_F(CacheCommand, LsListsEntries) {
  Output o = cache({"ls", "--dir", dir});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("ln_modulate"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("r2.t64.v8.p1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("conv_bias"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("3 entries in " + dir), std::string::npos) << o.out;
}

TEST_F(CacheCommand, PruneKeepsTheNewestEntriesUnderTheBudget) {
  // Oldest first: give the three entries distinct, known ages.
  const char *order[][2] = {{"ln_modulate", "r1.t128.v8.p1"},
                            {"conv_bias", "r4.t32.v8.p1"},
                            {"ln_modulate", "r2.t64.v8.p1"}};
  uint64_t newest = 0;
  for (int i = 0; i < 3; ++i) {
    std::string p = entryPath(dir, key(order[i][0], order[i][1]).hash());
    int fd = -1;
    ASSERT_FALSE(llvm::sys::fs::openFileForWrite(
        p, fd, llvm::sys::fs::CD_OpenExisting, llvm::sys::fs::OF_Append));
    auto t = std::chrono::system_clock::now() - std::chrono::hours(3 - i);
    llvm::sys::TimePoint<> tp = std::chrono::time_point_cast<
        std::chrono::nanoseconds>(t);
    ASSERT_FALSE(llvm::sys::fs::setLastAccessAndModificationTime(fd, tp));
    ::close(fd);
    if (i == 2)
      ASSERT_FALSE(llvm::sys::fs::file_size(p, newest));
  }
  Output o = cache({"prune", "--max-bytes", std::to_string(newest), "--dir",
                    dir});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("pruned 2 files"), std::string::npos) << o.out;
  Output ls = cache({"ls", "--dir", dir});
  EXPECT_NE(ls.out.find("r2.t64.v8.p1"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("r4.t32.v8.p1"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("1 entries in " + dir), std::string::npos) << ls.out;
}

TEST_F(CacheCommand, StatsCountsPerKernel) {
  Output o = cache({"stats", "--dir=" + dir});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("entries:   3"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("invalid:   0"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("ln_modulate"), std::string::npos) << o.out;
}

TEST_F(CacheCommand, VerifyFindsCorruptEntriesAndCanDeleteThem) {
  EXPECT_EQ(cache({"verify", "--dir", dir}).status, 0);
  std::string victim = entryPath(dir, key("conv_bias", "r4.t32.v8.p1").hash());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('X');
  }
  Output o = cache({"verify", "--dir", dir});
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.out.find("BAD " + victim + ": checksum mismatch"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("2 of 3 entries valid"), std::string::npos) << o.out;
  Output ls = cache({"ls", "--dir", dir});
  EXPECT_NE(ls.out.find("INVALID: checksum mismatch"), std::string::npos)
      << ls.out;
  Output del = cache({"verify", "--delete-bad", "--dir", dir});
  EXPECT_EQ(del.status, 0);
  EXPECT_FALSE(llvm::sys::fs::exists(victim));
  EXPECT_EQ(cache({"verify", "--dir", dir}).status, 0);
}

TEST_F(CacheCommand, VerifyFlagsAnEntryUnderAnotherKeysName) {
  std::string a = entryPath(dir, key("ln_modulate", "r1.t128.v8.p1").hash());
  std::string b = entryPath(dir, key("ln_modulate", "r2.t64.v8.p1").hash());
  ASSERT_FALSE(llvm::sys::fs::copy_file(a, b));
  Output o = cache({"verify", "--dir", dir});
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.out.find("the file name is not the hash of the key"),
            std::string::npos)
      << o.out;
}

TEST_F(CacheCommand, ClearRemovesOnlyCacheFiles) {
  std::string keep = dir + "/README.txt";
  std::ofstream(keep) << "not ours";
  Output o = cache({"clear", "--dir", dir});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("removed 6 files"), std::string::npos) << o.out;
  EXPECT_TRUE(llvm::sys::fs::exists(keep));
  EXPECT_NE(cache({"ls", "--dir", dir}).out.find("0 entries"),
            std::string::npos);
}

TEST(CacheCommandUsage, BadArgumentsAreUsageErrors) {
  ASSERT_TRUE(noDiskCache);
  Output o = cache({});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("Not enough positional"), std::string::npos) << o.err;
  o = cache({"purge"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("unknown action 'purge' (expected ls, stats, verify, "
                       "clear or prune)"),
            std::string::npos)
      << o.err;
  o = cache({"prune"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("prune needs --max-bytes N"), std::string::npos)
      << o.err;
  o = cache({"ls", "--max-bytes", "10"});
  EXPECT_EQ(o.status, 2);
  o = cache({"prune", "--max-bytes", "-1"});
  EXPECT_EQ(o.status, 2);
  o = cache({"ls", "--bogus"});
  EXPECT_EQ(o.status, 2);
  o = cache({"ls", "--dir", "/nonexistent/bitfold-cache"});
  EXPECT_EQ(o.status, 0);
  EXPECT_NE(o.out.find("does not exist (empty cache)"), std::string::npos);
}

TEST(CacheCommandUsage, ADirThatIsAFileOrEmptyIsAnErrorNotAnEmptyCache) {
  ASSERT_TRUE(noDiskCache);
  llvm::SmallString<128> file;
  int fd = -1;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("bitfold-notadir", "txt",
                                                  fd, file));
  ::close(fd);
  for (const char *action : {"ls", "verify", "stats"}) {
    Output o = cache({action, "--dir", std::string(file)});
    EXPECT_EQ(o.status, 2) << action << ": " << o.out << o.err;
    EXPECT_NE(o.err.find("is not a directory"), std::string::npos) << o.err;
  }
  llvm::sys::fs::remove(file);
  for (const char *action : {"ls", "verify"}) {
    Output o = cache({action, "--dir="});
    EXPECT_EQ(o.status, 2) << action << ": " << o.out << o.err;
    EXPECT_NE(o.err.find("--dir needs a directory"), std::string::npos)
        << o.err;
  }
}

namespace {

/// `entry` with its metadata's `field` set to `value` and a fresh, valid
/// checksum: what someone who knows the format could write.
std::string resealed(const std::string &entry, const std::string &field,
                     const std::string &value) {
  auto [line1, rest] = llvm::StringRef(entry).split('\n');
  auto [line2, payload] = rest.split('\n');
  llvm::SmallVector<llvm::StringRef, 4> f;
  line2.split(f, ' ');
  uint64_t metaLen = 0;
  EXPECT_FALSE(f[0].getAsInteger(10, metaLen));
  std::string meta = payload.take_front(metaLen).str();
  std::string from = "\"" + field + "\":\"";
  size_t at = meta.find(from);
  EXPECT_NE(at, std::string::npos) << meta;
  size_t end = meta.find('"', at + from.size());
  meta = meta.substr(0, at + from.size()) + value + meta.substr(end);
  std::string newPayload = meta + payload.drop_front(metaLen).str();
  std::string sum;
  llvm::raw_string_ostream(sum) << llvm::format_hex_no_prefix(
      llvm::xxh3_64bits(llvm::StringRef(newPayload)), 16);
  return line1.str() + "\n" + std::to_string(meta.size()) + " " + f[1].str() +
         " " + f[2].str() + " " + sum + "\n" + newPayload;
}

} // namespace

TEST_F(CacheCommand, VerifyFlagsAResealedEntryWhoseMetaDisagreesWithItsKey) {
  std::string victim = entryPath(dir, key("conv_bias", "r4.t32.v8.p1").hash());
  std::string original;
  {
    std::ifstream in(victim, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (auto [field, value] : {std::pair{"kernel", "ln_modulate"},
                              std::pair{"shape", "c8.a16,16,16,16.o1"},
                              std::pair{"arch", "sm_80"}}) {
    std::string bytes = resealed(original, field, value);
    ASSERT_TRUE(bool(decodeEntry(original)));
    {
      std::ofstream out(victim, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    auto decoded = decodeEntry(bytes);
    ASSERT_FALSE(bool(decoded)) << field << " edited, still decodes";
    EXPECT_NE(llvm::toString(decoded.takeError())
                  .find(std::string("metadata field '") + field +
                        "' disagrees with the key"),
              std::string::npos);
    Output o = cache({"verify", "--dir", dir});
    EXPECT_EQ(o.status, 1) << field;
    EXPECT_NE(o.out.find("BAD " + victim), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("2 of 3 entries valid"), std::string::npos) << o.out;
  }
}
