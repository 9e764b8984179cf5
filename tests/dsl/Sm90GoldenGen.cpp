//===- tests/dsl/Sm90GoldenGen.cpp - write the golden cases' inputs -------===//
//
//   sm90_golden_gen DIR   writes DIR/<case>.json and DIR/<case>.in for every
//                         case of goldenCases() (tests/dsl/golden-sm90).
//
//===----------------------------------------------------------------------===//

#include "tests/dsl/Sm90Golden.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

using namespace bitfold::testing;

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: sm90_golden_gen DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  llvm::sys::fs::create_directories(dir);
  for (const GoldenCase &c : goldenCases()) {
    llvm::Expected<GoldenProblem> p = makeGoldenProblem(c);
    if (!p) {
      llvm::errs() << c.name << ": " << llvm::toString(p.takeError()) << "\n";
      return 1;
    }
    std::error_code ec;
    llvm::raw_fd_ostream json(dir + "/" + c.name + ".json", ec);
    llvm::raw_fd_ostream in(dir + "/" + c.name + ".in", ec,
                            llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << dir << ": " << ec.message() << "\n";
      return 1;
    }
    json << manifestJson(c, *p);
    std::vector<char> bytes = concatBytes(*p, /*outputs=*/false);
    in.write(bytes.data(), bytes.size());
  }
  return 0;
}
