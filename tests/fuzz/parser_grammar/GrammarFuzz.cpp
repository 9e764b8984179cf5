//===- tests/fuzz/parser_grammar/GrammarFuzz.cpp - Kernel text from choices ===//
//
// A structured generator for the kernel text parser: the fuzz input is a
// stream of choices (FuzzInput.h's Reader) that walks the grammar of
// docs/kernel-format.md: header (group counts and guards at and past their
// limits), declarations of every dtype, layout and index map, then a body
// of nodes drawn from the op table with operands of earlier values, and
// outputs. Literals are where byte mutation alone rarely goes: decimal
// fractions and exponents of up to 60,000 digits, overflowing and
// subnormal values, hex bits; chains run past the parser's depth limit.
// Mostly valid text, so the parser's and verifier's deep paths are hit;
// each program goes through checkParserInput (tests/fuzz/parser), the
// same round-trip property as the byte-level target.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"
#include "tests/fuzz/parser/ParserCheck.h"

#include "dsl/Ops.h"

#include <cstdio>
#include <string>
#include <vector>

using bitfold::fuzz::Reader;

namespace {

const char *pick(Reader &r, std::initializer_list<const char *> from) {
  return from.begin()[r.get<uint8_t>() % from.size()];
}

/// Runs of `n` digits (`n` drawn up to `max`, skewed long now and then).
std::string digits(Reader &r, size_t max) {
  uint8_t kind = r.get<uint8_t>();
  size_t n = kind < 200 ? 1 + r.get<uint8_t>() % 12
                        : 1 + r.get<uint16_t>() % max;
  std::string s(n, '0');
  uint8_t d = r.get<uint8_t>();
  for (size_t i = 0; i < n; ++i)
    s[i] = char('0' + (d + i * 7) % 10);
  return s;
}

std::string literal(Reader &r) {
  switch (r.get<uint8_t>() % 8) {
  case 0:
    return pick(r, {"0x3f800000", "0x7f800000", "0xff800000", "0x7fc00000",
                    "0x00000001", "0x80000000", "0xffffffff", "0x100000000"});
  case 1: // long fraction (the crash of issue 27)
    return "0." + digits(r, 60000);
  case 2: // long integer part: overflows f32
    return digits(r, 60000) + ".5";
  case 3: // exponents, in and past range
    return "1e" + std::string(r.get<uint8_t>() % 2 ? "-" : "") +
           digits(r, 400);
  case 4:
    return pick(r, {"3.4028235e38", "3.4028236e38", "1e39", "-1e39",
                    "1.4e-45", "7e-46", "1e-50", "-0.0", "0"});
  default:
    return std::string(r.get<uint8_t>() % 4 ? "" : "-") + digits(r, 8) +
           "." + digits(r, 8);
  }
}

struct Program {
  std::string text;
  std::vector<std::string> f32Values, inputs, inputDtypes, scalars;
  int next = 0;

  std::string fresh() { return "%v" + std::to_string(next++); }
  std::string anyF32(Reader &r) const {
    return f32Values[r.get<uint16_t>() % f32Values.size()];
  }
};

void header(Reader &r, Program &p) {
  p.text = "bitfold.row_program gen v1\n";
  p.text += "groups " + std::string(pick(r, {"1", "1", "1", "2", "4", "5",
                                              "0", "1000", "99999999999"})) +
            "\n";
  p.text += std::string("guard cols % ") +
            pick(r, {"1", "1", "4", "8", "1024", "0", "9223372036854775807"}) +
            " == 0, " + pick(r, {"1", "1", "4", "7", "1025", "0"}) +
            " <= cols <= " +
            pick(r, {"16777216", "4096", "7", "2047", "0",
                     "9223372036854775807"}) +
            "\n";
}

void declarations(Reader &r, Program &p) {
  int inputs = 1 + r.get<uint8_t>() % 3;
  for (int i = 0; i < inputs; ++i) {
    std::string name = "in" + std::to_string(i);
    p.inputs.push_back(name);
    p.inputDtypes.push_back(pick(r, {"f32", "bf16", "f16"}));
    p.text += "input " + name + " : " + p.inputDtypes.back() + " " +
              pick(r, {"row_major", "row_major", "channels_last"}) + " " +
              pick(r, {"per_element", "per_element", "per_column"}) +
              (r.get<uint8_t>() % 8 ? "" : " align 4") + "\n";
  }
  if (r.get<uint8_t>() % 2) {
    p.scalars.push_back("s0");
    p.text += "scalar s0 : f32 default " + literal(r) + "\n";
  }
  p.text += "body:\n";
}

/// One node: a load, a constant, a scalar or an op of the table over
/// earlier f32 values (extend/round where the dtypes need them).
void node(Reader &r, Program &p) {
  std::string v = p.fresh();
  uint8_t kind = r.get<uint8_t>() % 16;
  if (p.f32Values.empty() || kind == 0) {
    size_t in = r.get<uint8_t>() % p.inputs.size();
    const std::string &dtype = p.inputDtypes[in];
    std::string raw = dtype == "f32" ? v : p.fresh();
    p.text += "  " + raw + " = load " + p.inputs[in] + " : " + dtype + "\n";
    if (raw != v)
      p.text += "  " + v + " = extend " + raw + " : f32\n";
  } else if (kind == 1) {
    p.text += "  " + v + " = const " + literal(r) + " : f32\n";
  } else if (kind == 2 && !p.scalars.empty()) {
    p.text += "  " + v + " = scalar s0 : f32\n";
  } else {
    const auto &op = bitfold::dsl::kOpTable[r.get<uint8_t>() %
                                             bitfold::dsl::kNumOps];
    if (op.arity <= 0 || op.types == bitfold::dsl::TypeRule::Round ||
        op.types == bitfold::dsl::TypeRule::Extend) {
      p.text += "  " + v + " = neg " + p.anyF32(r) + " : f32\n";
    } else {
      p.text += "  " + v + " = " + op.name.str() + " ";
      for (int a = 0; a < op.arity; ++a)
        p.text += (a ? ", " : "") + p.anyF32(r);
      p.text += " : " + std::string(op.types ==
                                            bitfold::dsl::TypeRule::Compare
                                        ? "i1"
                                        : "f32") +
                "\n";
      if (op.types == bitfold::dsl::TypeRule::Compare)
        return; // a predicate: not an f32 operand for later nodes
    }
  }
  p.f32Values.push_back(v);
}

std::string generate(Reader &r) {
  Program p;
  header(r, p);
  declarations(r, p);
  // Mostly short bodies; now and then a chain past the depth limit (2000).
  size_t nodes = r.get<uint8_t>() < 250 ? 1 + r.get<uint8_t>() % 24
                                        : 1900 + r.get<uint8_t>() % 200 * 2;
  for (size_t i = 0; i < nodes; ++i)
    node(r, p);
  std::string last = p.f32Values.back();
  p.text += "  %out = round to bf16 " + last + " : bf16\n";
  p.text += "  output y : bf16 row_major = %out\n";
  return p.text;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r(data, size);
  std::string text = generate(r);
  if (std::optional<std::string> failure =
          bitfold::testing::checkParserInput(text)) {
    std::fprintf(stderr, "parser round trip failed: %s\n", failure->c_str());
    std::abort();
  }
  return 0;
}
