//===- tests/dsl/ParserFuzzTest.cpp - Mutated kernel texts ----------------===//
//
// The parser fuzz target's check (tests/fuzz/parser/ParserCheck.h) on a few
// thousand deterministic mutations of the fuzz corpus, so the plain suite
// exercises it without libFuzzer. A failure prints the seed, the mutation's
// index and the input.
//
//===----------------------------------------------------------------------===//

#include "dsl/Parser.h"
#include "tests/dsl/KernelTexts.h"
#include "tests/dsl/TemplateVariants.h"
#include "tests/fuzz/parser/ParserCheck.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

using namespace bitfold;

namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> out;
  std::error_code ec;
  std::set<std::string> paths;
  for (llvm::sys::fs::directory_iterator it(bitfold::testing::corpusDir(), ec), end;
       it != end && !ec; it.increment(ec))
    paths.insert(it->path());
  for (const std::string &p : paths)
    out.push_back(bitfold::testing::readFile(p));
  return out;
}

/// Tokens the mutator splices in: keywords, op names, values, numbers.
const std::vector<std::string> &dictionary() {
  static const std::vector<std::string> words = {
      "fold ", "output ", "%0", "%1", "%99", " = ", ", ", ": f32", ": bf16",
      ": i1", "add ", "select ", "round to bf16 ", "extend ", "const ",
      "0x7fc00000", "-0", "1e-6", "4294967296", "9223372036854775808",
      "fold_value 0.acc", "arg 7", "load x", "scalar eps", "dim S",
      "stages [", "]", "(", ")", "threads 2048", "vector 1048576",
      "cross_warp 32", "bfly_xor 1", "per_batch(S)", "align 3", "return ",
      "combiner sum (acc) empty (0) results (acc)", "\n", "#", "\x01", "\xff"};
  return words;
}

std::string mutate(std::string s, std::mt19937 &rng) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : size_t(0); };
  int edits = 1 + int(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    size_t at = pick(s.size() + 1);
    switch (rng() % 6) {
    case 0: // replace a byte
      if (!s.empty())
        s[pick(s.size())] = char(rng() % 256);
      break;
    case 1: // delete a range
      s.erase(at, pick(16) + 1);
      break;
    case 2: // splice a token
      s.insert(at, dictionary()[pick(dictionary().size())]);
      break;
    case 3: { // duplicate a line
      size_t start = s.rfind('\n', at ? at - 1 : 0);
      start = start == std::string::npos ? 0 : start + 1;
      size_t end = s.find('\n', start);
      if (end != std::string::npos)
        s.insert(start, s.substr(start, end - start + 1));
      break;
    }
    case 4: // change a digit
      for (size_t i = at; i < s.size(); ++i)
        if (std::isdigit((unsigned char)s[i])) {
          s[i] = char('0' + rng() % 10);
          break;
        }
      break;
    default: // truncate
      s.resize(at);
      break;
    }
  }
  return s;
}

/// Every stock template variant and doc example has a seed, and every
/// seed parses (a seed the parser rejects explores little). Seeds are not
/// required to match today's texts: an older valid text is as good a seed.
TEST(ParserFuzz, CorpusHoldsEveryStockTemplateAndDocExample) {
  std::vector<std::pair<std::string, std::string>> want;
  for (const bitfold::testing::TemplateVariant &v :
       bitfold::testing::templateVariants()) {
    auto def = bitfold::testing::buildVariant(v);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    std::string name = v.label;
    std::replace(name.begin(), name.end(), '/', '_');
    want.push_back({"template_" + name, (*def)->canonicalText});
  }
  std::vector<std::string> docs = bitfold::testing::docExamples();
  for (size_t i = 0; i < docs.size(); ++i)
    want.push_back({"doc_example_" + std::to_string(i + 1), docs[i]});
  // BITFOLD_WRITE_CORPUS=1 writes the missing entries.
  bool write = std::getenv("BITFOLD_WRITE_CORPUS") != nullptr;
  for (const auto &[name, text] : want) {
    std::string path = bitfold::testing::corpusDir() + "/" + name + ".bfk";
    if (llvm::sys::fs::exists(path))
      continue;
    if (write)
      std::ofstream(path) << text;
    else
      ADD_FAILURE() << "the corpus lacks " << path
                    << " (run with BITFOLD_WRITE_CORPUS=1 to add it)";
  }
  // The template and doc seeds parse; the hostile seeds (seed_*: literals
  // past the length limit, deep chains, empty guards) are there to be
  // refused, which the fuzz entry point checks below.
  for (const auto &[name, text] : want) {
    auto parsed = dsl::parseKernel(text);
    EXPECT_TRUE(bool(parsed)) << name << ": "
                              << llvm::toString(parsed.takeError()) << "\n"
                              << text;
  }
}

TEST(ParserFuzz, TheFuzzEntryPointAcceptsEverySeed) {
  for (const std::string &text : corpus())
    EXPECT_EQ(LLVMFuzzerTestOneInput(
                  reinterpret_cast<const uint8_t *>(text.data()), text.size()),
              0);
}

TEST(ParserFuzz, MutatedTextsNeverCrashAndAlwaysRoundTrip) {
  // BITFOLD_PARSER_FUZZ_SEED / _MUTATIONS run other or longer searches.
  auto knob = [](const char *name, long fallback) {
    const char *v = std::getenv(name);
    return v ? std::strtol(v, nullptr, 10) : fallback;
  };
  const unsigned seed = unsigned(knob("BITFOLD_PARSER_FUZZ_SEED", 20261201));
  const int mutations = int(knob("BITFOLD_PARSER_FUZZ_MUTATIONS", 4000));
  // Mutations of the seeds that parse (the hostile seed_* files are refused
  // as they are; the entry-point test above replays them).
  std::vector<std::string> seeds = corpus();
  llvm::erase_if(seeds, [](const std::string &s) {
    auto parsed = dsl::parseKernel(s);
    if (!parsed)
      llvm::consumeError(parsed.takeError());
    return !parsed;
  });
  ASSERT_FALSE(seeds.empty()) << "empty corpus in " << bitfold::testing::corpusDir();
  std::mt19937 rng(seed);
  int parsed = 0;
  for (int i = 0; i < mutations; ++i) {
    std::string input = mutate(seeds[rng() % seeds.size()], rng);
    std::optional<std::string> failure = bitfold::testing::checkParserInput(input);
    ASSERT_FALSE(failure) << "seed " << seed << ", mutation " << i << ": "
                          << *failure << "\ninput:\n"
                          << input;
    parsed += bool(dsl::parseKernel(input));
  }
  // Some mutations must still parse, or the round trip is never exercised
  // (about 2% do with today's corpus; which ones depends on the seeds).
  EXPECT_GT(parsed, mutations / 80) << "seed " << seed;
}

} // namespace
