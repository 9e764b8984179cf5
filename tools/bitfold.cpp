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

int main(int argc, char **argv) {
  return bitfold::tools::runCli(argc, argv, llvm::outs(), llvm::errs());
}
