//===- tests/tools/CliSupport.h - Calling the CLI in-process ----*- C++ -*-===//
#ifndef BITFOLD_TESTS_TOOLS_CLISUPPORT_H
#define BITFOLD_TESTS_TOOLS_CLISUPPORT_H

#include "tools/Commands.h"

#include <string>
#include <vector>

namespace bitfold::tools::test {

struct Output {
  std::string out, err;
  int status = -1;
};

/// `bitfold ARGS...` through tools::runCli, in this process.
inline Output cli(std::vector<std::string> args) {
  std::vector<const char *> argv{"bitfold"};
  for (const std::string &a : args)
    argv.push_back(a.c_str());
  Output o;
  llvm::raw_string_ostream out(o.out), err(o.err);
  o.status = runCli(int(argv.size()), argv.data(), out, err);
  return o;
}

/// The command line, for failure messages.
inline std::string joined(const std::vector<std::string> &args) {
  std::string s = "bitfold";
  for (const std::string &a : args)
    s += " " + a;
  return s;
}

} // namespace bitfold::tools::test

#endif // BITFOLD_TESTS_TOOLS_CLISUPPORT_H
