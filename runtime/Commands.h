//===- runtime/Commands.h - `bitfold run` and `bitfold cache` ----*- C++ -*-===//
//
// The logic of two CLI commands, as functions tools/bitfold.cpp calls with
// the arguments after the command word. Both return the process exit
// status: 0 success, 1 a failed check (differing bits, corrupt entries) or
// a runtime error, 2 a usage error. Normal output goes to `out`, errors
// and usage to `err`.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_COMMANDS_H
#define BITFOLD_RUNTIME_COMMANDS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace bitfold::runtime {

/// bitfold cache ls|stats|verify|clear [--dir DIR] [--delete-bad]
///   ls      one line per entry: key hash, kernel, shape, config, arch,
///           size, age; invalid entries flagged with the reason
///   stats   entry count and bytes, per kernel; invalid, temp and lock files
///   verify  decodes and checksums every entry, checks its file name is the
///           hash of its key; exit 1 if any is bad (--delete-bad removes
///           them)
///   clear   removes entries, temp and lock files (nothing else)
/// DIR defaults to $BITFOLD_CACHE_DIR, else ~/.cache/bitfold.
int runCacheCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out,
                    llvm::raw_ostream &err);
int runCacheCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out);

/// bitfold run TEMPLATE --shape DIMS [--params P] [--config C] [--seed N]
///                      [--iters N] [--scalar NAME=VALUE]... [--device N]
///                      [--tune-db FILE]
///   Allocates device tensors for the shape (row-major templates:
///   B,S,D or rows,D or any (..., D); channels-last ones: N,C,H,W or
///   N,C,D,H,W), fills the inputs with seeded random values (normal-ish,
///   never zero), poisons the outputs (0xFF bytes), launches once through
///   the C API (config: --config, else the tune DB's winner with --tune-db
///   or $BITFOLD_TUNE_DB, else the default), prints the first launch's
///   provenance (the config and where it came from; "compiled in X ms",
///   "disk cache hit (X ms)" or "memory cache hit"; the cache counters),
///   copies back, runs the DSL interpreter on the same host data
///   and compares bit for bit: per output the count of differing elements
///   and the first one. Where the kernel uses approximate hardware
///   instructions (rsqrt.approx ...), whose interpreter stand-in is
///   correctly rounded, differences explained by a 1-2 ulp change of those
///   instructions are counted separately as "interp-approx" and do not
///   fail the run. Then times --iters launches (default 20, CUDA events,
///   median). Exit 1 on any other difference.
int runRunCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out,
                  llvm::raw_ostream &err);
int runRunCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_COMMANDS_H
