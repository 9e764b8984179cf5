//===- tests/runtime/RuntimeCli.cpp - `run` and `cache` without the CLI ---===//
//
// bitfold_runtime_cli run|cache ARGS...: the runtime's commands in a small
// binary, for checking them on a GPU machine before (and independently of)
// tools/bitfold.cpp. Same functions the CLI calls.
//
//===----------------------------------------------------------------------===//

#include "runtime/Commands.h"

#include <string>
#include <vector>

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "run")
    return bitfold::runtime::runRunCommand(args, llvm::outs(), llvm::errs());
  if (cmd == "cache")
    return bitfold::runtime::runCacheCommand(args, llvm::outs(), llvm::errs());
  llvm::errs() << "usage: bitfold_runtime_cli run|cache ARGS...\n";
  return 2;
}
