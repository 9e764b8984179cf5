//===- tests/tools/CliSupport.h - Calling the CLI in-process ----*- C++ -*-===//
#ifndef BITFOLD_TESTS_TOOLS_CLISUPPORT_H
#define BITFOLD_TESTS_TOOLS_CLISUPPORT_H

#include "tools/Commands.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

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

/// A temporary directory holding files; removed at the end of the test.
struct TempDir {
  llvm::SmallString<128> path;
  TempDir() {
    EXPECT_FALSE(
        bool(llvm::sys::fs::createUniqueDirectory("bitfold-cli", path)));
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<128> f(path);
    llvm::sys::path::append(f, name);
    return std::string(f);
  }
  /// Writes `text` to the file `name` in the directory; its path.
  std::string write(llvm::StringRef name, llvm::StringRef text) {
    std::string f = file(name);
    std::error_code ec;
    llvm::raw_fd_ostream os(f, ec);
    EXPECT_FALSE(ec) << f;
    os << text;
    return f;
  }
};

/// A user kernel's text (docs/kernel-format.md): y = bf16(x * a), named
/// `name` (each test registers its own: names are process-wide).
inline std::string scaleProgram(llvm::StringRef name) {
  return "bitfold.row_program " + name.str() + R"( v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16777216
input x : bf16 row_major per_element
scalar a : f32 default 2
body:
  %x = load x : bf16
  %xf = extend %x : f32
  %a = scalar a : f32
  %p = mul %xf, %a : f32
  %y = round to bf16 %p : bf16
  output y : bf16 row_major = %y
)";
}

} // namespace bitfold::tools::test

#endif // BITFOLD_TESTS_TOOLS_CLISUPPORT_H
