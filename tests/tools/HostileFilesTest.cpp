//===- tests/tools/HostileFilesTest.cpp - Every loader and writer ----------===//
//
// Every file loader (tune DB, tune merge's inputs, BITFOLD_TUNE_DB /
// runtime creation, shapes files of prebuild and tune, program files, cache
// entries) against a FIFO, a device node, a directory, a symbolic link to a
// device and a file over every cap: each refuses at once, naming what the
// file is (or the cap). Every writer (tune merge --out, TuneDB::save and
// mergeFiles, fileio::writeFileAtomically) against a FIFO, a directory, a
// socket, a link to a device and a dangling link: each refuses and leaves
// the target as it was; a link to a regular file gets its target replaced
// and stays a link. Loaders run in a forked child with an alarm, so a
// loader that blocks fails its case instead of hanging the suite.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "autotune/TuneDB.h"
#include "autotune/TuneTasks.h"
#include "capi/Compose.h"
#include "fileio/File.h"
#include "runtime/KernelCache.h"
#include "runtime/Runtime.h"
#include "templates/UserKernels.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

using namespace bitfold;
using namespace bitfold::tools::test;

namespace {

const bool quiet = [] {
  ::setenv("BITFOLD_LIBCUDA", "/nonexistent/bitfold-test/libcuda.so.1", 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  ::setenv("BITFOLD_QUIET", "1", 1);
  return true;
}();

/// Runs `body` in a forked child with a 20 s alarm; "hung" when it fired,
/// else what `body` returned.
std::string inChild(llvm::function_ref<std::string()> body) {
  int fds[2];
  if (::pipe(fds) != 0)
    return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(20);
    std::string report = body();
    (void)!::write(fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0)
    report.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGALRM ? "hung" : "crashed";
  return report;
}

std::string errorText(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : "accepted";
}

template <typename T> std::string errorText(llvm::Expected<T> v) {
  if (v)
    return "accepted";
  return llvm::toString(v.takeError());
}

/// The hostile inputs: name -> path and what the error must say.
struct Hostile {
  std::string name, path, says;
};

std::vector<Hostile> hostileInputs(TempDir &dir) {
  std::string fifo = dir.file("fifo"), folder = dir.file("folder"),
              link = dir.file("link-to-zero"), big = dir.file("big");
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(::mkdir(folder.c_str(), 0755), 0);
  EXPECT_EQ(::symlink("/dev/zero", link.c_str()), 0);
  // Sparse: over every cap (the cache entry's is the largest) at no cost.
  int fd = ::open(big.c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_EQ(::ftruncate(fd, off_t(runtime::kMaxEntryBytes + 1)), 0);
  ::close(fd);
  return {{"FIFO", fifo, "a FIFO"},
          {"device", "/dev/zero", "a character device"},
          {"directory", folder, "a directory"},
          {"link to a device", link, "character device"},
          {"oversized", big, "-byte limit of a"}};
}

struct Loader {
  std::string name;
  std::function<std::string(const std::string &, TempDir &)> load;
  bool followsLinks = true; // the cache refuses any link instead
};

std::vector<Loader> loaders() {
  return {
      {"TuneDB::load",
       [](const std::string &p, TempDir &) {
         return errorText(autotune::TuneDB::load(p));
       }},
      {"tune merge IN",
       [](const std::string &p, TempDir &d) {
         Output o = cli({"tune", "merge", p, "--out", d.file("merged.json")});
         return o.status == 0 ? "accepted" : o.err;
       }},
      {"Runtime tune DB (tune_db, BITFOLD_TUNE_DB)",
       [](const std::string &p, TempDir &) {
         // An unreadable tune DB is warned about and not used.
         std::string warned;
         runtime::RuntimeOptions o;
         o.cache.disk = false;
         o.cache.warn = [&](llvm::StringRef m) { warned += m.str(); };
         capi::TuneDbOptions db;
         db.path = p;
         { auto rt = capi::makeRuntime(std::move(o), db); }
         return warned.empty() ? std::string("accepted") : warned;
       }},
      {"loadShapesFile",
       [](const std::string &p, TempDir &) {
         return errorText(autotune::loadShapesFile(p));
       }},
      {"prebuild --shapes",
       [](const std::string &p, TempDir &d) {
         Output o = cli({"prebuild", "--shapes", p, "--arch", "sm_90",
                         "--cache-dir", d.file("cache")});
         return o.status == 0 ? "accepted" : o.err;
       }},
      {"addUserKernelFile",
       [](const std::string &p, TempDir &) {
         return errorText(templates::addUserKernelFile(p));
       }},
      {"interp --program",
       [](const std::string &p, TempDir &) {
         Output o = cli({"interp", "--program", p, "--shape", "2,64"});
         return o.status == 0 ? "accepted" : o.err;
       }},
      {"readEntryFile (cache entry)",
       [](const std::string &p, TempDir &) {
         return errorText(runtime::readEntryFile(p, runtime::kMaxEntryBytes));
       },
       /*followsLinks=*/false},
  };
}

} // namespace

TEST(HostileFiles, EveryLoaderRefusesFifoDeviceDirectoryLinkAndOversize) {
  ASSERT_TRUE(quiet);
  TempDir dir;
  std::vector<Hostile> inputs = hostileInputs(dir);
  for (const Loader &l : loaders())
    for (const Hostile &h : inputs) {
      std::string got = inChild([&] { return l.load(h.path, dir); });
      std::string says = h.says;
      if (!l.followsLinks && h.name == "link to a device")
        says = "symbolic link";
      EXPECT_NE(got.find(says), std::string::npos)
          << l.name << " on the " << h.name << " (" << h.path
          << "): " << got;
    }
}

namespace {

/// A socket file at `path` (bound, then closed: the file stays).
void makeSocket(const std::string &path) {
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(::bind(s, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0)
      << path;
  ::close(s);
}

/// The file type bits of `path` itself (lstat), 0 when missing.
unsigned typeOf(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & S_IFMT : 0;
}

struct Writer {
  std::string name;
  std::function<std::string(const std::string &, TempDir &)> write;
};

std::vector<Writer> writers() {
  return {
      {"writeFileAtomically",
       [](const std::string &p, TempDir &) {
         return errorText(fileio::writeFileAtomically(p, "{}\n", "test file"));
       }},
      {"TuneDB::save",
       [](const std::string &p, TempDir &) {
         return errorText(autotune::TuneDB().save(p));
       }},
      {"TuneDB::mergeFiles",
       [](const std::string &p, TempDir &d) {
         return errorText(autotune::TuneDB::mergeFiles({d.file("in.json")}, p));
       }},
      {"tune merge --out",
       [](const std::string &p, TempDir &d) {
         Output o = cli({"tune", "merge", d.file("in.json"), "--out", p});
         return o.status == 0 ? "accepted" : o.err;
       }},
  };
}

} // namespace

TEST(HostileFiles, EveryWriterRefusesNonRegularTargetsAndKeepsThem) {
  TempDir dir;
  ASSERT_FALSE(bool(autotune::TuneDB().save(dir.file("in.json"))));
  std::string fifo = dir.file("fifo"), folder = dir.file("folder"),
              sock = dir.file("sock"), devLink = dir.file("link-to-null"),
              dangling = dir.file("dangling");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  makeSocket(sock);
  ASSERT_EQ(::symlink("/dev/null", devLink.c_str()), 0);
  ASSERT_EQ(::symlink(dir.file("nothing/here").c_str(), dangling.c_str()), 0);
  struct Target {
    std::string path, says;
    unsigned type;
  } targets[] = {{fifo, "a FIFO", S_IFIFO},
                 {folder, "a directory", S_IFDIR},
                 {sock, "a socket", S_IFSOCK},
                 {devLink, "a character device", S_IFLNK},
                 {dangling, "a symbolic link to nothing", S_IFLNK}};
  for (const Writer &w : writers())
    for (const Target &t : targets) {
      std::string got = w.write(t.path, dir);
      EXPECT_NE(got.find("refusing to write"), std::string::npos)
          << w.name << " to " << t.path << ": " << got;
      EXPECT_NE(got.find(t.says), std::string::npos)
          << w.name << " to " << t.path << ": " << got;
      EXPECT_EQ(typeOf(t.path), t.type) << w.name << " replaced " << t.path;
    }
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(HostileFiles, AWriterThroughALinkReplacesItsTargetAndKeepsTheLink) {
  TempDir dir;
  ASSERT_FALSE(bool(autotune::TuneDB().save(dir.file("in.json"))));
  for (const Writer &w : writers()) {
    std::string target = dir.file("real.json"), link = dir.file("link.json");
    ASSERT_FALSE(bool(
        fileio::writeFileAtomically(target, "old\n", "test file")));
    ::unlink(link.c_str());
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
    std::string got = w.write(link, dir);
    EXPECT_EQ(got, "accepted") << w.name;
    EXPECT_EQ(typeOf(link), unsigned(S_IFLNK)) << w.name;
    auto text = fileio::readBoundedFile(target, 1 << 20, "test file");
    ASSERT_TRUE(bool(text)) << llvm::toString(text.takeError());
    EXPECT_NE(*text, "old\n") << w.name << " did not replace the target";
  }
}
