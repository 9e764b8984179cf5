//===- tests/fuzz/parser/ParserFuzz.cpp - libFuzzer entry: kernel text ----===//
//
// Feeds arbitrary bytes to dsl::parseKernel; aborts when a parsed program's
// printed text does not read back to the same text and hash.
//
//===----------------------------------------------------------------------===//

#include "tests/fuzz/parser/ParserCheck.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  if (std::optional<std::string> failure =
          bitfold::testing::checkParserInput(input)) {
    std::fprintf(stderr, "parser round trip failed: %s\n", failure->c_str());
    std::abort();
  }
  return 0;
}
