//===- autotune/TuneCommand.h - `bitfold tune` ------------------*- C++ -*-===//
//
//   bitfold tune --shapes FILE.json --out DIR [--templates a,b]
//                [--shard i/n] [--devices all|0,1] [--budget-s N]
//                [--report FILE.md] [--repetitions N] [--cut-ratio X]
//   bitfold tune merge A.json B.json ... -o OUT.json
//
// Writes DIR/tune-db.json (merged into what is there) and DIR/cache/ (the
// runtime's disk-cache layout: point $BITFOLD_CACHE_DIR at it) with the
// cubins of each shape's winner and default config. With several devices,
// one worker process per GPU (this executable, re-run as
// `<self> tune ... --devices k --shard j`); their DB parts under
// DIR/parts/ are merged. Progress goes to stderr; the final table to `out`.
// Exit status: 0 all shapes tuned; 1 usage or other failures; 2 a bit
// difference between configs (a codegen bug).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_TUNECOMMAND_H
#define BITFOLD_AUTOTUNE_TUNECOMMAND_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace bitfold::autotune {

/// `args` are the words after "tune". Must be reached as `bitfold tune`
/// (workers re-run /proc/self/exe with "tune" as the first argument).
int runTuneCommand(llvm::ArrayRef<std::string> args, llvm::raw_ostream &out);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_TUNECOMMAND_H
