//===- fileio/File.h - Bounded reads, atomic writes -------------*- C++ -*-===//
//
// Every file bitfold reads from outside (kernel text, tune DBs, shapes
// files, cache entries, worker reports) goes through readBoundedFile, and
// every file it replaces through writeFileAtomically (README.md).
//
//===----------------------------------------------------------------------===//

#ifndef BITFOLD_FILEIO_FILE_H
#define BITFOLD_FILEIO_FILE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace bitfold::fileio {

/// Caps per kind of file: far above any real file, low enough that a
/// wrong path (a disk image, /dev/zero through a link) fails at once.
constexpr uint64_t kMaxProgramBytes = uint64_t(1) << 20;    // kernel text
constexpr uint64_t kMaxShapesFileBytes = uint64_t(4) << 20; // prebuild/tune
constexpr uint64_t kMaxTuneDbBytes = uint64_t(64) << 20;    // tune DB
constexpr uint64_t kMaxReportBytes = uint64_t(64) << 20;    // tune reports

/// Why a read or write failed; the message names the file and its use.
class FileError : public llvm::ErrorInfo<FileError> {
public:
  enum Kind { Missing, NotRegular, TooLarge, Io };
  static char ID;
  FileError(Kind kind, std::string message, std::string reason, int err = 0)
      : kind(kind), message(std::move(message)), reason(std::move(reason)),
        err(err) {}
  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
  Kind kind;
  /// "cannot read tune DB 'x.json': it is a FIFO, not a regular file".
  std::string message;
  /// The part after the colon: "it is a FIFO, not a regular file".
  std::string reason;
  /// The errno of a failed call, 0 when none.
  int err;
};

struct ReadOptions {
  /// Off: a symbolic link is an error (NotRegular), not followed.
  bool followSymlinks = true;
  /// Set to the file's modification time (seconds) when it was opened.
  int64_t *mtime = nullptr;
};

/// The whole content of the regular file `path`, at most `maxBytes` long.
/// `what` names the file's use in errors ("tune DB", "program file").
llvm::Expected<std::string> readBoundedFile(llvm::StringRef path,
                                            uint64_t maxBytes,
                                            llvm::StringRef what,
                                            ReadOptions opts = {});

/// Replaces `path` with `bytes` atomically: temp file beside the target,
/// fsync, rename. Refuses a target that exists and is not a regular file
/// (after resolving symbolic links: a link's target is replaced, the link
/// kept). The target's folder must exist.
llvm::Error writeFileAtomically(llvm::StringRef path, llvm::StringRef bytes,
                                llvm::StringRef what);

/// Writes all of `bytes` to `fd` (retrying short writes and EINTR); 0, or
/// the errno of the failure (ENOSPC for a write of nothing).
int writeFully(int fd, llvm::StringRef bytes);

/// "a directory", "a FIFO", ... for st_mode `mode` (for messages).
llvm::StringRef describeFileType(unsigned mode);

} // namespace bitfold::fileio

#endif
