//===- runtime/CacheFiles.h - The cache's file helpers (private) -*- C++ -*-===//
//
// Shared by the kernel cache's files (KernelCache.cpp, CacheEntry.cpp,
// CacheMaintenance.cpp, FileLock.cpp); not a public header. Every read
// trusts nothing: no symlink is followed, no FIFO blocks, sizes are capped.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_CACHEFILES_H
#define BITFOLD_RUNTIME_CACHEFILES_H

#include "runtime/KernelCache.h"

#include "keys/Errors.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace bitfold::runtime::cachefs {

/// Entry, lock and maintenance failures are keys::CacheErrors.
using keys::cacheError;

/// Milliseconds on the steady clock.
double nowMs();

/// Whether `dir` is a directory and not a symlink (so the cache never
/// writes through a link planted inside it).
bool isRealDirectory(llvm::StringRef dir);

enum class ReadStatus { Found, Missing, Invalid };

/// Reads a regular file of at most maxBytes without following a symlink or
/// blocking on a FIFO (fileio::readBoundedFile). Missing: it is not there
/// (or cannot be opened: the write path reports that); Invalid: `problem`
/// says why.
ReadStatus readRegularFile(const std::string &path, uint64_t maxBytes,
                           std::string &out, std::string &problem,
                           int64_t *mtime = nullptr);

struct ReadResult {
  ReadStatus status = ReadStatus::Missing;
  std::string problem;
  codegen::CompiledKernel kernel;
};

/// The entry at `path` if it decodes, is for `keyText` and passes
/// `validate`; refreshes its recency (mtime) at most once per granule.
ReadResult readEntry(const std::string &path, const std::string &keyText,
                     uint64_t maxBytes, const ValidateFn &validate);

} // namespace bitfold::runtime::cachefs

#endif // BITFOLD_RUNTIME_CACHEFILES_H
