//===- fileio/File.cpp - Bounded reads, atomic writes ---------------------===//
//
// POSIX calls where LLVM Support has no equivalent: open(O_NONBLOCK) so a
// FIFO cannot block the open, fstat on the opened descriptor so the checked
// file is the read one, read() rather than mmap so a file truncated under
// us cannot fault, fsync before the rename so a crash leaves the old file
// or the new one.
//
//===----------------------------------------------------------------------===//

#include "fileio/File.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace bitfold::fileio;

char FileError::ID = 0;

namespace {

/// "<verb> <what> '<path>': <reason>".
llvm::Error fileError(FileError::Kind kind, llvm::StringRef verb,
                      llvm::StringRef what, llvm::StringRef path,
                      const llvm::Twine &reason, int err = 0) {
  std::string r = reason.str();
  return llvm::make_error<FileError>(
      kind, (verb + " " + what + " '" + path + "': " + r).str(), r, err);
}

llvm::Error errnoError(llvm::StringRef verb, llvm::StringRef what,
                       llvm::StringRef path, int err) {
  return fileError(FileError::Io, verb, what, path, std::strerror(err), err);
}

/// Closes a descriptor on every path out.
struct Fd {
  explicit Fd(int fd) : fd(fd) {}
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
  int fd;
};

llvm::Error readAll(int fd, std::string &out, llvm::StringRef path,
                    llvm::StringRef what) {
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errnoError("cannot read", what, path, errno);
    if (n == 0)
      break; // truncated meanwhile: the parser sees what is there
    got += size_t(n);
  }
  out.resize(got);
  return llvm::Error::success();
}

llvm::Error writeAll(int fd, llvm::StringRef bytes, llvm::StringRef what,
                     llvm::StringRef tmp) {
  if (int err = bitfold::fileio::writeFully(fd, bytes))
    return errnoError("cannot write", what, tmp, err);
  if (::fsync(fd) != 0)
    return errnoError("cannot sync", what, tmp, errno);
  return llvm::Error::success();
}

/// The file a write to `path` replaces: `path`, or a symbolic link's
/// resolved target; an error when that exists and is not a regular file.
/// `mode` gets the existing file's permissions (0 when there is none).
llvm::Expected<std::string> writeTarget(llvm::StringRef path,
                                        llvm::StringRef what, mode_t &mode) {
  mode = 0;
  std::string target = path.str();
  struct stat st;
  if (::lstat(target.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return target;
    return errnoError("cannot write", what, path, errno);
  }
  if (S_ISLNK(st.st_mode)) {
    llvm::SmallString<256> resolved;
    if (llvm::sys::fs::real_path(path, resolved) ||
        ::stat(resolved.c_str(), &st) != 0)
      return fileError(FileError::NotRegular, "refusing to write", what, path,
                       "it is a symbolic link to nothing that exists");
    target = std::string(resolved);
  }
  if (!S_ISREG(st.st_mode))
    return fileError(FileError::NotRegular, "refusing to write", what, path,
                     "it is " + describeFileType(st.st_mode) +
                         ", not a regular file");
  mode = st.st_mode & 07777;
  return target;
}

} // namespace

int bitfold::fileio::writeFully(int fd, llvm::StringRef bytes) {
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? errno : ENOSPC;
    p += n;
    left -= size_t(n);
  }
  return 0;
}

llvm::StringRef bitfold::fileio::describeFileType(unsigned mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISLNK(mode))
    return "a symbolic link";
  if (S_ISREG(mode))
    return "a regular file";
  return "not a regular file";
}

llvm::Expected<std::string>
bitfold::fileio::readBoundedFile(llvm::StringRef path, uint64_t maxBytes,
                                 llvm::StringRef what, ReadOptions opts) {
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  if (!opts.followSymlinks)
    flags |= O_NOFOLLOW;
  Fd fd(::open(path.str().c_str(), flags));
  if (fd.fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return fileError(FileError::Missing, "cannot read", what, path,
                       "it does not exist", err);
    if (err == ELOOP && !opts.followSymlinks)
      return fileError(FileError::NotRegular, "cannot read", what, path,
                       "it is a symbolic link", err);
    return errnoError("cannot read", what, path, err);
  }
  struct stat st;
  if (::fstat(fd.fd, &st) != 0)
    return errnoError("cannot read", what, path, errno);
  if (opts.mtime)
    *opts.mtime = int64_t(st.st_mtime);
  if (!S_ISREG(st.st_mode))
    return fileError(FileError::NotRegular, "cannot read", what, path,
                     "it is " + describeFileType(st.st_mode) +
                         ", not a regular file");
  if (uint64_t(st.st_size) > maxBytes)
    return fileError(FileError::TooLarge, "cannot read", what, path,
                     llvm::formatv("it is {0} bytes, over the {1}-byte limit "
                                   "of a {2}",
                                   uint64_t(st.st_size), maxBytes, what));
  std::string out(size_t(st.st_size), '\0');
  if (llvm::Error e = readAll(fd.fd, out, path, what))
    return std::move(e);
  return out;
}

llvm::Error bitfold::fileio::writeFileAtomically(llvm::StringRef path,
                                                 llvm::StringRef bytes,
                                                 llvm::StringRef what) {
  mode_t mode;
  auto target = writeTarget(path, what, mode);
  if (!target)
    return target.takeError();
  llvm::SmallString<256> tmp;
  int raw = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          *target + ".tmp.%%%%%%%%", raw, tmp))
    return fileError(FileError::Io, "cannot write", what, path, ec.message(),
                     ec.value());
  Fd fd(raw);
  if (mode)
    (void)::fchmod(fd.fd, mode); // keep the replaced file's permissions
  llvm::Error e = writeAll(fd.fd, bytes, what, tmp);
  if (!e && ::rename(tmp.c_str(), target->c_str()) != 0)
    e = errnoError("cannot rename its temp file to", what, *target, errno);
  if (e) {
    ::unlink(tmp.c_str());
    return e;
  }
  // The rename itself durable too (best effort: some filesystems refuse).
  llvm::SmallString<256> dir(*target);
  llvm::sys::path::remove_filename(dir);
  Fd dirFd(::open(dir.empty() ? "." : dir.c_str(),
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dirFd.fd >= 0)
    (void)::fsync(dirFd.fd);
  return llvm::Error::success();
}
