//===- tests/dsl/PrintHashes.cpp - Hashes of every template variant -------===//
//
// Prints "<label> <hash>" for every entry of templateVariants(), one a line.
// HashTest runs it in separate processes and compares. `--perturb N` first
// allocates N heap blocks so that node addresses differ between runs.
//
//===----------------------------------------------------------------------===//

#include "tests/dsl/TemplateVariants.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

int main(int argc, char **argv) {
  std::vector<std::unique_ptr<char[]>> ballast;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--perturb") == 0)
      for (int n = std::atoi(argv[i + 1]); n > 0; --n)
        ballast.push_back(std::make_unique<char[]>(size_t(16 + n % 97)));
  for (const bitfold::testing::TemplateVariant &v :
       bitfold::testing::templateVariants()) {
    auto def = bitfold::testing::buildVariant(v);
    if (!def) {
      std::fprintf(stderr, "%s: %s\n", v.label.c_str(),
                   llvm::toString(def.takeError()).c_str());
      return 1;
    }
    std::printf("%s %s\n", v.label.c_str(), (*def)->hash.c_str());
  }
  return 0;
}
