//===- tools/bitfold.cpp - The bitfold command-line tool ------------------===//
//
//   bitfold version | templates | interp | compile | run | cache | tune
//
// `bitfold --help` lists the commands, `bitfold CMD --help` each one's
// options with an example. The parsing is in Cli.cpp, the commands in the
// other files of this folder.
//
//===----------------------------------------------------------------------===//

#include "tools/Commands.h"

#include "runtime/Status.h"

int main(int argc, char **argv) {
  // A fatal error inside LLVM ends the process: say it was bitfold's.
  bitfold::runtime::installLlvmErrorHandlers();
  return bitfold::tools::runCli(argc, argv, llvm::outs(), llvm::errs());
}
