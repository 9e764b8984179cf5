//===- tests/fuzz/parser/ParserCheck.cpp - One parser input, checked ------===//

#include "tests/fuzz/parser/ParserCheck.h"

#include "dsl/Parser.h"

std::optional<std::string>
bitfold::testing::checkParserInput(llvm::StringRef input) {
  auto first = dsl::parseKernel(input);
  if (!first) {
    std::string message = llvm::toString(first.takeError());
    if (message.empty())
      return std::string("a rejected input gave an empty error message");
    return std::nullopt;
  }
  const std::string &text = (*first)->canonicalText;
  auto second = dsl::parseKernel(text);
  if (!second)
    return "the printed text does not parse: " +
           llvm::toString(second.takeError()) + "\nprinted text:\n" + text;
  if ((*second)->canonicalText != text)
    return "print(parse(printed)) differs from printed:\n" + text +
           "\nreprinted:\n" + (*second)->canonicalText;
  if ((*second)->hash != (*first)->hash)
    return "the hash changed on the round trip of:\n" + text;
  return std::nullopt;
}
