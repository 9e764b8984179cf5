//===- runtime/FileLock.h - An flock()ed lock file (private) -----*- C++ -*-===//
//
// The kernel cache's per-key lock between processes (<hash>.lock); not a
// public header.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_FILELOCK_H
#define BITFOLD_RUNTIME_FILELOCK_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace bitfold::runtime {

/// An flock()ed lock file; unlocked (and closed) on destruction. The
/// holder writes its pid into it, so waiters can say who they wait for.
class FileLock {
public:
  FileLock() = default;
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;
  ~FileLock();
  enum Result { Locked, TimedOut, Unavailable, EntryUnusable };
  /// Unavailable: the lock file cannot be created (read-only or missing
  /// directory); EntryUnusable: something that is not a regular file sits
  /// at its path (only this key is affected). `why` says so. `notice` is
  /// called once when the wait passes `noticeSeconds`.
  Result acquire(const std::string &path, double timeoutSeconds,
                 double noticeSeconds,
                 llvm::function_ref<void(llvm::StringRef holder)> notice,
                 std::string &why);

private:
  Result release(Result r);
  /// "pid N" as the holder wrote it, or "" when unknown.
  std::string holder() const;
  int fd = -1;
};

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_FILELOCK_H
