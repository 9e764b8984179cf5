//===- tests/fuzz/parser/ParserCheck.h - One parser input, checked -*- C++ -*-===//
//
// The property the parser fuzzers check on any byte string: parsing never
// crashes; when it succeeds, the printed text parses again to the same text
// and hash (print(parse(print(parse(s)))) == print(parse(s))). Shared by the
// libFuzzer entry point (ParserFuzz.cpp) and tests/dsl/ParserFuzzTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_FUZZ_PARSER_PARSERCHECK_H
#define BITFOLD_TESTS_FUZZ_PARSER_PARSERCHECK_H

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace bitfold::testing {

/// Checks one input; returns a description of the violated property, or
/// nothing when the input is rejected cleanly or round-trips.
std::optional<std::string> checkParserInput(llvm::StringRef input);

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_FUZZ_PARSER_PARSERCHECK_H
