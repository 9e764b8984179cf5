//===- runtime/FileLock.cpp - An flock()ed lock file ------------------------===//

#include "runtime/FileLock.h"

#include "runtime/CacheFiles.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

using namespace bitfold::runtime;

FileLock::~FileLock() {
  if (fd >= 0) {
    ::flock(fd, LOCK_UN);
    ::close(fd);
  }
}

FileLock::Result
FileLock::acquire(const std::string &path, double timeoutSeconds,
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
  double start = cachefs::nowMs();
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
    double waited = (cachefs::nowMs() - start) / 1000.0;
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

FileLock::Result FileLock::release(Result r) {
  ::close(fd);
  fd = -1;
  return r;
}

std::string FileLock::holder() const {
  char buf[32] = {0};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  llvm::StringRef pid = llvm::StringRef(buf, n > 0 ? size_t(n) : 0).trim();
  unsigned v = 0;
  return pid.getAsInteger(10, v) ? "" : ("pid " + pid).str();
}
