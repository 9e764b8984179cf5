//===- dsl/Parser.cpp - The kernel text format, read back -----------------===//
//
// A hand-written recursive-descent parser over a small lexer. Newlines are
// whitespace and `#` starts a comment, so the canonical text and freer
// hand-written text both parse; values are named `%name` (the canonical
// text numbers them). Nodes are built with the same builders (and type
// rules) as C++ programs, and the result goes through freeze(): the
// verifier, then the canonical text and hash.
//
// Conversions are explicit in the format: an operand that an op widens
// implicitly in C++ must be written as an `extend`, so that every accepted
// text names each node of the program it builds.
//
//===----------------------------------------------------------------------===//

#include "dsl/Parser.h"

#include "dsl/TextCompositions.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <bit>
#include <cctype>
#include <map>

using namespace bitfold::dsl;

namespace {

struct Token {
  enum Kind { Ident, Int, Hex, Float, Value, Punct, End };
  Kind kind = End;
  llvm::StringRef text;
  unsigned line = 1, col = 1;
};

bool isIdentChar(char c) { return std::isalnum((unsigned char)c) || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
public:
  explicit Lexer(llvm::StringRef text) : text(text) {}

  Token next() {
    skipSpace();
    Token t;
    t.line = line;
    t.col = col;
    if (pos >= text.size())
      return t;
    size_t n = lexLength(t.kind);
    t.text = text.substr(pos, n);
    advance(n);
    return t;
  }

private:
  char at(size_t i) const { return i < text.size() ? text[i] : '\0'; }

  void advance(size_t n) {
    for (; n > 0 && pos < text.size(); --n, ++pos) {
      if (text[pos] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  }

  void skipSpace() {
    while (pos < text.size()) {
      char c = text[pos];
      if (c == '#') {
        while (pos < text.size() && text[pos] != '\n')
          advance(1);
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance(1);
      } else {
        return;
      }
    }
  }

  /// Length of the token at `pos`; sets its kind.
  size_t lexLength(Token::Kind &kind) const {
    char c = text[pos];
    size_t i = pos;
    if (std::isalpha((unsigned char)c) || c == '_') {
      kind = Token::Ident;
      while (isIdentChar(at(i)))
        ++i;
      return i - pos;
    }
    if (c == '%' && isIdentChar(at(pos + 1))) {
      kind = Token::Value;
      for (i = pos + 1; isIdentChar(at(i));)
        ++i;
      return i - pos;
    }
    if (isDigit(c) || (c == '-' && isDigit(at(pos + 1))))
      return lexNumber(kind);
    kind = Token::Punct;
    if ((c == '=' || c == '<') && at(pos + 1) == '=')
      return 2;
    return 1;
  }

  /// [-] digits [. digits] [e [+-] digits], or [-] 0x hexdigits.
  size_t lexNumber(Token::Kind &kind) const {
    size_t i = pos + (text[pos] == '-');
    if (at(i) == '0' && (at(i + 1) == 'x' || at(i + 1) == 'X')) {
      kind = Token::Hex;
      for (i += 2; std::isxdigit((unsigned char)at(i));)
        ++i;
      return i - pos;
    }
    kind = Token::Int;
    while (isDigit(at(i)))
      ++i;
    if (at(i) == '.' && isDigit(at(i + 1))) {
      kind = Token::Float;
      for (++i; isDigit(at(i));)
        ++i;
    }
    char s = at(i + 1);
    if ((at(i) == 'e' || at(i) == 'E') &&
        (isDigit(s) || ((s == '+' || s == '-') && isDigit(at(i + 2))))) {
      kind = Token::Float;
      for (i += 2; isDigit(at(i));)
        ++i;
    }
    return i - pos;
  }

  llvm::StringRef text;
  size_t pos = 0;
  unsigned line = 1, col = 1;
};

/// Tokens longer than this are shown shortened in messages.
constexpr size_t kMaxShownToken = 40;

std::string describe(const Token &t) {
  if (t.kind == Token::End)
    return "end of input";
  std::string out = "'";
  llvm::StringRef text = t.text;
  std::string tail = "'";
  if (text.size() > kMaxShownToken) {
    tail = llvm::formatv("...' ({0} characters)", text.size()).str();
    text = text.take_front(kMaxShownToken - 8);
  }
  for (char c : text) {
    if (std::isprint((unsigned char)c))
      out += c;
    else
      out += llvm::formatv("\\x{0:x-2}", unsigned((unsigned char)c)).str();
  }
  return out + tail;
}

/// Deeper expressions are rejected: printing and lowering walk them
/// recursively.
constexpr int kMaxDepth = 2000;
/// Longest numeric literal read: the exact decimal expansion of any f64
/// fits (the longest, a subnormal's, is "-0." and 1074 digits), so no exact
/// value is refused; longer ones are refused before any conversion runs
/// (LLVM's decimal conversion does work that grows with the digit count).
constexpr size_t kMaxNumberChars = 1100;
constexpr int64_t kMaxFolds = 1024;
constexpr int64_t kMaxPlaceholder = 1 << 20;

using Scope = llvm::StringMap<Expr>;

class Parser {
public:
  Parser(llvm::StringRef text, llvm::StringRef source)
      : lex(text), source(source) {
    tok = lex.next();
    def.programId = newProgramId();
  }

  llvm::Expected<std::shared_ptr<const KernelDef>> run();

private:
  // ---- Tokens and errors ---------------------------------------------------
  void bump() { tok = lex.next(); }

  bool failAt(const Token &at, const llvm::Twine &msg) {
    if (error.empty())
      error = llvm::formatv("{0}{1}:{2}: {3}",
                            source.empty() ? "" : (source + ":").str(),
                            at.line, at.col, msg.str());
    return false;
  }
  bool expected(const llvm::Twine &what) {
    return failAt(tok, "expected " + what + ", found " + describe(tok));
  }
  bool isKeyword(llvm::StringRef kw) const {
    return tok.kind == Token::Ident && tok.text == kw;
  }
  bool isPunct(llvm::StringRef p) const {
    return tok.kind == Token::Punct && tok.text == p;
  }
  bool keyword(llvm::StringRef kw) {
    if (!isKeyword(kw))
      return expected("'" + kw + "'");
    bump();
    return true;
  }
  bool punct(llvm::StringRef p) {
    if (!isPunct(p))
      return expected("'" + p + "'");
    bump();
    return true;
  }

  /// One of `values`, spelled as `spell` prints it.
  template <typename E>
  bool oneOf(std::initializer_list<E> values, llvm::StringRef (*spell)(E),
             E &out, llvm::StringRef what) {
    for (E v : values)
      if (isKeyword(spell(v))) {
        out = v;
        bump();
        return true;
      }
    return expected(what);
  }
  bool ident(std::string &out, llvm::StringRef what);
  /// False (with a message) when the number token is over kMaxNumberChars.
  bool numberLength();
  bool integer(int64_t &out, llvm::StringRef what, int64_t lo, int64_t hi);
  bool floatBits(uint32_t &out, llvm::StringRef what);
  bool dtype(DType &out);
  bool layout(Layout &out);
  bool indexMap(OperandDecl &o);
  bool alignment(OperandDecl &o);
  bool aliases(OperandDecl &o);
  bool declared(const llvm::StringMap<int> &names, llvm::StringRef what,
                int &index);
  bool identList(std::vector<std::string> &out, llvm::StringRef what);
  bool value(const Scope &scope, Expr &out);

  // ---- Grammar -------------------------------------------------------------
  bool header();
  bool declarations();
  bool input();
  bool scalar();
  bool body();
  bool nodeDefinition(Scope &scope);
  bool operation(Op op, const Token &opTok, const Scope &scope, Expr &out);
  bool unknownOp();
  bool composed(const TextComposition &c, const Scope &scope, Expr &out);
  bool computed(Op op, const Token &opTok, const Scope &scope, Expr &out);
  bool leaf(Op op, const Token &opTok, Expr &out);
  bool gather(const Token &opTok, const Scope &scope, Expr &out);
  static bool isIntRule(TypeRule r) {
    return r == TypeRule::IntArith || r == TypeRule::IntCompare ||
           r == TypeRule::IntSelect || r == TypeRule::IntToFloat;
  }
  bool foldValue(Expr &out);
  bool fold();
  bool stageList(std::vector<TreeStage> &out);
  bool orderExtensions(FoldOrder &o);
  bool stages(FoldOrder &o);
  bool combiner(std::shared_ptr<const Combiner> &out);
  bool function(llvm::StringRef name, State &out);
  bool output();
  bool rowWidth(OperandDecl &o);
  bool collectFolds();

  /// A leaf; loads, scalars and fold values belong to this program.
  Expr leafNode(Op op, DType type, int index) {
    auto n = std::make_shared<ExprNode>();
    n->op = op;
    n->type = type;
    n->index = index;
    if (op == Op::Load || op == Op::Scalar || op == Op::FoldValue)
      n->program = def.programId;
    return Expr(std::move(n));
  }
  bool remember(const Token &at, Scope &scope, llvm::StringRef name,
                const Expr &e);

  Lexer lex;
  Token tok;
  llvm::StringRef source;
  std::string error;
  KernelDef def;
  Scope mainScope;
  llvm::StringMap<int> dimIndex, inputIndex, scalarIndex;
  std::map<int64_t, std::pair<Token, FoldDecl>> folds;
  std::map<std::pair<int, int>, Expr> foldValues;
  llvm::DenseMap<const ExprNode *, int> depth;
  /// For the verifier's messages: where each node was defined.
  llvm::DenseMap<const ExprNode *, std::string> nodeNames;
};

bool Parser::ident(std::string &out, llvm::StringRef what) {
  if (tok.kind != Token::Ident)
    return expected(what);
  out = tok.text.str();
  bump();
  return true;
}

bool Parser::numberLength() {
  if (tok.text.size() <= kMaxNumberChars)
    return true;
  return failAt(tok, llvm::formatv("a number literal of {0} characters, over "
                                   "the limit of {1} (enough for the exact "
                                   "decimal of any f64)",
                                   tok.text.size(), kMaxNumberChars));
}

bool Parser::integer(int64_t &out, llvm::StringRef what, int64_t lo,
                     int64_t hi) {
  if (tok.kind != Token::Int)
    return expected(what);
  if (!numberLength())
    return false;
  if (tok.text.getAsInteger(10, out) || out < lo || out > hi)
    return failAt(tok, llvm::formatv("expected {0} in {1}..{2}, found {3}",
                                     what, lo, hi, describe(tok)));
  bump();
  return true;
}

/// An f32 as its bit pattern (0x3f800000, canonical) or a decimal literal
/// rounded to nearest even (1.0, -0.5, 1e-6).
bool Parser::floatBits(uint32_t &out, llvm::StringRef what) {
  if ((tok.kind == Token::Hex || tok.kind == Token::Int ||
       tok.kind == Token::Float) &&
      !numberLength())
    return false;
  if (tok.kind == Token::Hex) {
    uint64_t bits;
    llvm::StringRef digits = tok.text;
    if (!digits.consume_front("0x") && !digits.consume_front("0X"))
      return failAt(tok, "expected " + what + " as unsigned bits, found " +
                             describe(tok));
    if (digits.getAsInteger(16, bits) || bits > 0xffffffffu)
      return failAt(tok, "expected " + what + " of 32 bits, found " +
                             describe(tok));
    out = uint32_t(bits);
    bump();
    return true;
  }
  if (tok.kind != Token::Int && tok.kind != Token::Float)
    return expected(what);
  llvm::APFloat f(llvm::APFloat::IEEEsingle());
  auto status = f.convertFromString(tok.text,
                                    llvm::APFloat::rmNearestTiesToEven);
  if (!status)
    return failAt(tok, "expected " + what + ", found " + describe(tok) +
                           ": " + llvm::toString(status.takeError()));
  // Rounding to +-inf is a typo, not a value: infinities are written as
  // bits (0x7f800000).
  if (*status & llvm::APFloat::opOverflow)
    return failAt(tok, "expected " + what + ", found " + describe(tok) +
                           ": it overflows f32 (largest finite: "
                           "3.40282347e38; write an infinity as its bits, "
                           "0x7f800000)");
  out = uint32_t(f.bitcastToAPInt().getZExtValue());
  bump();
  return true;
}

bool Parser::dtype(DType &out) {
  return oneOf({DType::F32, DType::BF16, DType::F16, DType::I1,
                DType::F8E4M3FN, DType::F8E5M2, DType::I8, DType::I32},
               dtypeName, out,
               "a dtype (f32, bf16, f16, i1, f8e4m3fn, f8e5m2, i8 or i32)");
}

bool Parser::layout(Layout &out) {
  return oneOf({Layout::RowMajor, Layout::ChannelsLast, Layout::ChannelsFirst},
               layoutName, out,
               "a layout (row_major, channels_last or channels_first)");
}

bool Parser::indexMap(OperandDecl &o) {
  if (!oneOf({IndexMap::PerElement, IndexMap::PerBatch, IndexMap::PerColumn,
              IndexMap::PerRow, IndexMap::Vector},
             indexMapName, o.map,
             "an index map (per_element, per_batch(DIM), per_column, "
             "per_row or vector(DIM))"))
    return false;
  if (o.map != IndexMap::PerBatch && o.map != IndexMap::Vector)
    return true;
  if (!punct("("))
    return false;
  Token at = tok;
  std::string dim;
  if (!ident(dim, o.map == IndexMap::Vector ? "the vector's length dim"
                                            : "the rows-per-batch dim"))
    return false;
  auto it = dimIndex.find(dim);
  if (it == dimIndex.end())
    return failAt(at, "expected a declared dim, found '" + dim +
                          "' (declare it first: dim " + dim + ")");
  o.batchDim = it->second;
  return punct(")");
}

/// [align N]
/// [aliases INPUT]: the output may overwrite that input in place.
bool Parser::aliases(OperandDecl &o) {
  if (!isKeyword("aliases"))
    return true;
  bump();
  Token at = tok;
  std::string name;
  if (!ident(name, "the input it overwrites"))
    return false;
  for (size_t i = 0; i < def.operands.size(); ++i)
    if (def.operands[i].name == name && !def.operands[i].isOutput) {
      o.aliasOf = int(i);
      return true;
    }
  return failAt(at, "expected a declared input, found '" + name + "'");
}

bool Parser::alignment(OperandDecl &o) {
  if (!isKeyword("align"))
    return true;
  bump();
  int64_t align;
  if (!integer(align, "an alignment in elements", 1, INT32_MAX))
    return false;
  o.guardAlignElems = int(align);
  return true;
}

/// A name declared in the header: its index in `names`.
bool Parser::declared(const llvm::StringMap<int> &names, llvm::StringRef what,
                      int &index) {
  Token at = tok;
  std::string name;
  if (!ident(name, "a " + what.str() + " name"))
    return false;
  auto it = names.find(name);
  if (it == names.end())
    return failAt(at, "expected a declared " + what + ", found '" + name +
                          "'");
  index = it->second;
  return true;
}

bool Parser::identList(std::vector<std::string> &out, llvm::StringRef what) {
  if (!punct("("))
    return false;
  while (!isPunct(")")) {
    if (!out.empty() && !punct(","))
      return false;
    out.emplace_back();
    if (!ident(out.back(), what))
      return false;
  }
  bump();
  return true;
}

bool Parser::value(const Scope &scope, Expr &out) {
  if (tok.kind != Token::Value)
    return expected("a value (%name)");
  auto it = scope.find(tok.text.drop_front());
  if (it == scope.end())
    return failAt(tok, "expected a value defined above, found " +
                           describe(tok));
  out = it->second;
  bump();
  return true;
}

bool Parser::remember(const Token &at, Scope &scope, llvm::StringRef name,
                      const Expr &e) {
  int d = 0;
  for (const Expr &a : e->args)
    d = std::max(d, depth.lookup(a.get()));
  if (d + 1 > kMaxDepth)
    return failAt(at, llvm::formatv("expression deeper than {0} nodes",
                                    kMaxDepth));
  depth[e.get()] = d + 1;
  nodeNames.try_emplace(e.get(),
                        llvm::formatv("{0} at {1}:{2}", at.text, at.line,
                                      at.col));
  if (!scope.try_emplace(name, e).second)
    return failAt(at, "expected a new value name, found " + describe(at) +
                          " (defined above)");
  return true;
}

// ---- Header and declarations ----------------------------------------------

bool Parser::header() {
  if (!keyword("bitfold") || !punct(".") || !keyword("row_program") ||
      !ident(def.name, "the program name"))
    return false;
  if (isKeyword(kKernelFormatVersion)) {
    bump();
  } else if (tok.kind == Token::Ident && tok.text.starts_with("v")) {
    return failAt(tok, "expected format version " + kKernelFormatVersion +
                           " (the version this build reads), found " +
                           describe(tok));
  } else {
    return expected("the format version " + kKernelFormatVersion);
  }
  int64_t groups, multiple, zero, lo, hi;
  if (!keyword("groups") || !integer(groups, "a group count", 0, INT32_MAX))
    return false;
  def.groups = int(groups);
  if (!keyword("guard") || !keyword("cols") || !punct("%") ||
      !integer(multiple, "a column multiple", 0, INT64_MAX) || !punct("==") ||
      !integer(zero, "0", 0, 0) || !punct(",") ||
      !integer(lo, "the least column count", 0, INT64_MAX) || !punct("<=") ||
      !keyword("cols") || !punct("<=") ||
      !integer(hi, "the largest column count", 0, INT64_MAX))
    return false;
  def.colsMultipleOf = multiple;
  def.minCols = lo;
  def.maxCols = hi;
  return true;
}

bool Parser::declarations() {
  while (!isKeyword("body")) {
    if (isKeyword("dim")) {
      bump();
      std::string name;
      if (!ident(name, "a dim name"))
        return false;
      dimIndex.try_emplace(name, int(def.dims.size()));
      def.dims.push_back(name);
    } else if (isKeyword("input")) {
      if (!input())
        return false;
    } else if (isKeyword("scalar")) {
      if (!scalar())
        return false;
    } else {
      return expected("'dim', 'input', 'scalar' or 'body'");
    }
  }
  bump();
  return punct(":");
}

bool Parser::input() {
  bump();
  OperandDecl o;
  if (!ident(o.name, "an input name") || !punct(":") || !dtype(o.dtype) ||
      !layout(o.layout) || !indexMap(o) || !alignment(o))
    return false;
  inputIndex.try_emplace(o.name, int(def.operands.size()));
  def.operands.push_back(std::move(o));
  return true;
}

bool Parser::scalar() {
  bump();
  ScalarDecl s;
  if (!ident(s.name, "a scalar name") || !punct(":") || !dtype(s.dtype))
    return false;
  if (isKeyword("default")) {
    bump();
    uint32_t bits;
    if (!floatBits(bits, "a default value"))
      return false;
    s.defaultValue = std::bit_cast<float>(bits);
  }
  scalarIndex.try_emplace(s.name, int(def.scalars.size()));
  def.scalars.push_back(std::move(s));
  return true;
}

// ---- Body ------------------------------------------------------------------

bool Parser::body() {
  while (tok.kind != Token::End) {
    bool ok;
    if (tok.kind == Token::Value)
      ok = nodeDefinition(mainScope);
    else if (isKeyword("fold"))
      ok = fold();
    else if (isKeyword("output"))
      ok = output();
    else
      ok = expected("a value definition (%name = ...), 'fold' or 'output'");
    if (!ok)
      return false;
  }
  return true;
}

/// %name = op operands : type
bool Parser::nodeDefinition(Scope &scope) {
  Token nameTok = tok;
  bump();
  if (!punct("="))
    return false;
  Token opTok = tok;
  std::optional<Op> op;
  const TextComposition *composition = nullptr;
  if (tok.kind == Token::Ident) {
    op = opFromName(tok.text);
    composition = op ? nullptr : findTextComposition(tok.text);
  }
  if (!op && !composition)
    return unknownOp();
  bump();
  Expr e;
  bool ok = op ? operation(*op, opTok, scope, e)
               : composed(*composition, scope, e);
  if (!ok || !punct(":"))
    return false;
  Token typeTok = tok;
  DType t;
  if (!dtype(t))
    return false;
  // `dim NAME : i32` is the dim as an index value.
  if (op == Op::Dim && t == DType::I32)
    e = Dim{e->index}.to_i32();
  if (t != e.dtype())
    return failAt(typeTok, llvm::formatv("expected type {0} (the type of "
                                         "this {1}), found {2}",
                                         dtypeName(e.dtype()), opTok.text,
                                         dtypeName(t)));
  return remember(nameTok, scope, nameTok.text.drop_front(), e);
}

/// "expected an op name", with the nearest one when there is one.
bool Parser::unknownOp() {
  std::string near =
      tok.kind == Token::Ident ? nearestOpName(tok.text) : std::string();
  return expected(near.empty() ? llvm::Twine("an op name")
                               : "an op name (did you mean " + near + "?)");
}

/// A composition of the C++ DSL (dsl/TextCompositions.h) of one f32 value.
bool Parser::composed(const TextComposition &c, const Scope &scope,
                      Expr &out) {
  Token at = tok;
  if (!value(scope, out))
    return false;
  if (out.dtype() != DType::F32)
    return failAt(at, llvm::formatv("expected an f32 operand of {0}, found "
                                    "{1}{2}",
                                    c.name, dtypeName(out.dtype()),
                                    out.dtype() == DType::I1 ? " (use select)"
                                    : out.dtype() == DType::I32
                                        ? " (convert it with itof)"
                                        : " (widen it with extend)"));
  out = c.build(out);
  return true;
}

bool Parser::operation(Op op, const Token &opTok, const Scope &scope,
                       Expr &out) {
  Token at = tok;
  switch (opInfo(op).types) {
  case TypeRule::Leaf:
    return leaf(op, opTok, out);
  case TypeRule::Round: {
    DType to;
    if (!keyword("to") || !dtype(to))
      return false;
    if (to == DType::F32 || to == DType::I1)
      return failAt(at, "expected a storage dtype (bf16, f16, f8e4m3fn, "
                        "f8e5m2 or i8) after 'round to', found " +
                            dtypeName(to).str());
    at = tok;
    if (!value(scope, out))
      return false;
    if (out.dtype() != DType::F32)
      return failAt(at, "expected an f32 operand, found " +
                            dtypeName(out.dtype()).str());
    out = round(to, out);
    return true;
  }
  case TypeRule::Extend:
    if (!value(scope, out))
      return false;
    if (out.dtype() == DType::F32 || out.dtype() == DType::I1)
      return failAt(at, "expected a bf16, f16, f8e4m3fn, f8e5m2 or i8 "
                        "operand, found " +
                            dtypeName(out.dtype()).str());
    out = out.to_f32();
    return true;
  case TypeRule::Gather:
    return gather(opTok, scope, out);
  default:
    return computed(op, opTok, scope, out);
  }
}

/// Operands of a computing op, each already of the type its rule wants:
/// numbers f32 (write extend), predicates i1.
bool Parser::computed(Op op, const Token &opTok, const Scope &scope,
                      Expr &out) {
  const OpInfo &info = opInfo(op);
  std::vector<Expr> args;
  for (int i = 0; i < info.arity; ++i) {
    if (i && !punct(","))
      return false;
    Token at = tok;
    args.emplace_back();
    if (!value(scope, args.back()))
      return false;
    DType t = args.back().dtype();
    bool predicate = info.types == TypeRule::Logic ||
                     ((info.types == TypeRule::Select ||
                       info.types == TypeRule::IntSelect) &&
                      i == 0);
    if (!predicate && isIntRule(info.types)) {
      if (t != DType::I32)
        return failAt(at, llvm::formatv("expected an i32 operand of {0}, "
                                        "found {1}",
                                        info.name, dtypeName(t)));
      continue;
    }
    if (predicate && t != DType::I1)
      return failAt(at, llvm::formatv("expected an i1 operand of {0}, found "
                                      "{1}",
                                      info.name, dtypeName(t)));
    if (!predicate && t != DType::F32)
      return failAt(at, llvm::formatv(
                            "expected an f32 operand of {0}, found {1}{2}",
                            info.name, dtypeName(t),
                            t == DType::I1    ? " (use select)"
                            : t == DType::I32 ? " (convert it with itof)"
                                              : " (widen it with extend)"));
  }
  out = makeOp(op, std::move(args));
  if (out->op == Op::Invalid)
    return failAt(opTok, out->message);
  return true;
}

bool Parser::leaf(Op op, const Token &opTok, Expr &out) {
  Token at = tok;
  std::string name;
  switch (op) {
  case Op::Const: {
    uint32_t bits;
    if (!floatBits(bits, "a constant"))
      return false;
    out = leafNode(Op::Const, DType::F32, -1);
    const_cast<ExprNode *>(out.get())->bits = bits;
    return true;
  }
  case Op::Scalar: {
    int index;
    if (!declared(scalarIndex, "scalar", index))
      return false;
    out = leafNode(Op::Scalar, DType::F32, index);
    return true;
  }
  case Op::Dim: {
    if (!ident(name, "a dim (cols, rows or a declared dim)"))
      return false;
    auto it = dimIndex.find(name);
    int index = name == "cols" ? -1 : name == "rows" ? -2
                : it != dimIndex.end() ? it->second : -3;
    if (index == -3)
      return failAt(at, "expected cols, rows or a declared dim, found '" +
                            name + "'");
    out = leafNode(Op::Dim, DType::F32, index);
    return true;
  }
  case Op::Load: {
    int index;
    if (!declared(inputIndex, "input", index))
      return false;
    out = leafNode(Op::Load, def.operands[index].dtype, index);
    return true;
  }
  case Op::FoldValue:
    return foldValue(out);
  case Op::RowIndex:
    out = row_index();
    return true;
  case Op::ColIndex:
    out = col_index();
    return true;
  case Op::IConst: {
    int64_t v;
    if (!integer(v, "an i32 constant", INT32_MIN, INT32_MAX))
      return false;
    out = iconst(int32_t(v));
    return true;
  }
  case Op::Placeholder: {
    int64_t index;
    if (!integer(index, "an argument index", 0, kMaxPlaceholder))
      return false;
    out = leafNode(Op::Placeholder, DType::F32, int(index));
    return true;
  }
  default:
    return failAt(opTok, "expected an op name, found 'invalid' (an invalid "
                         "node records a builder error; it cannot be "
                         "written)");
  }
}

/// gather INPUT, %col: the input's element at an i32 column of its row.
bool Parser::gather(const Token &opTok, const Scope &scope, Expr &out) {
  int index;
  if (!declared(inputIndex, "input", index) || !punct(","))
    return false;
  Token at = tok;
  Expr col;
  if (!value(scope, col))
    return false;
  if (col.dtype() != DType::I32)
    return failAt(at, llvm::formatv("expected an i32 column of gather, found "
                                    "{0}",
                                    dtypeName(col.dtype())));
  out = bitfold::dsl::gather(leafNode(Op::Load, def.operands[index].dtype, index), col);
  if (out->op == Op::Invalid)
    return failAt(opTok, out->message);
  return true;
}

/// fold_value FOLD.RESULT; the node's argument is the fold's input.
bool Parser::foldValue(Expr &out) {
  Token at = tok;
  int64_t index;
  std::string result;
  if (!integer(index, "a fold index", 0, kMaxFolds) || !punct(".") ||
      !ident(result, "a result name"))
    return false;
  auto it = folds.find(index);
  if (it == folds.end())
    return failAt(at, llvm::formatv("expected a fold declared above, found "
                                    "fold {0}",
                                    index));
  const FoldDecl &f = it->second.second;
  llvm::ArrayRef<std::string> results = f.combiner->resultNames();
  auto r = std::find(results.begin(), results.end(), result);
  if (r == results.end())
    return failAt(at, llvm::formatv("expected a result of combiner '{0}', "
                                    "found '{1}'",
                                    f.combiner->name(), result));
  int field = int(r - results.begin());
  Expr &known = foldValues[{int(index), field}];
  if (!known.get()) {
    known = leafNode(Op::FoldValue, DType::F32, int(index));
    const_cast<ExprNode *>(known.get())->field = field;
    const_cast<ExprNode *>(known.get())->args.push_back(f.input);
  }
  out = known;
  return true;
}

// ---- Folds -----------------------------------------------------------------

/// fold K of %v order NAME threads T vector V stages [...] combiner ...
bool Parser::fold() {
  Token foldTok = tok;
  bump();
  int64_t index, threads, vector;
  FoldDecl f;
  Token at = tok;
  if (!integer(index, "a fold index", 0, kMaxFolds - 1))
    return false;
  if (folds.count(index))
    return failAt(at, llvm::formatv("expected a new fold index, found fold "
                                    "{0} (declared above)",
                                    index));
  if (!keyword("of") || !value(mainScope, f.input) || !keyword("order") ||
      !ident(f.order.name, "an order name") || !keyword("threads") ||
      !integer(threads, "a thread count", 0, INT32_MAX) ||
      !keyword("vector") ||
      !integer(vector, "a vector width", 0, INT32_MAX) || !stages(f.order) ||
      !combiner(f.combiner))
    return false;
  f.order.threads = int(threads);
  f.order.vector = int(vector);
  folds.emplace(index, std::make_pair(foldTok, std::move(f)));
  return true;
}

bool Parser::stages(FoldOrder &o) {
  return keyword("stages") && stageList(o.stages) && orderExtensions(o);
}

/// [KIND OFFSET, ...]
bool Parser::stageList(std::vector<TreeStage> &out) {
  if (!punct("["))
    return false;
  while (!isPunct("]")) {
    if (!out.empty() && !punct(","))
      return false;
    TreeStage s{};
    if (!oneOf({TreeStage::ShuffleDown, TreeStage::ButterflyXor,
                TreeStage::CrossWarp},
               stageKindName, s.kind,
               "a stage kind (shfl_down, bfly_xor or cross_warp)"))
      return false;
    int64_t offset;
    if (!integer(offset, "a stage offset", 0, INT32_MAX))
      return false;
    s.offset = int(offset);
    out.push_back(s);
  }
  bump();
  return true;
}

/// What the printer adds for orders beyond the plain model (IR.h FoldOrder):
/// accumulators N (by-element | round-robin) [aligned] ctas N final [...]
/// rows MIN..MAX [outvec N]
bool Parser::orderExtensions(FoldOrder &o) {
  if (!isKeyword("accumulators"))
    return true;
  bump();
  int64_t acc, ctas, minRows, maxRows;
  if (!integer(acc, "an accumulator count", 1, 64))
    return false;
  std::string first, second;
  if (!ident(first, "by-element or round-robin") || !punct("-") ||
      !ident(second, "by-element or round-robin"))
    return false;
  if (first + "-" + second == "by-element")
    o.accumulatorMap = FoldOrder::AccumulatorMap::VectorElement;
  else if (first + "-" + second != "round-robin")
    return expected("by-element or round-robin");
  o.accumulators = int(acc);
  o.alignedVectors = isKeyword("aligned");
  if (o.alignedVectors)
    bump();
  if (!keyword("ctas") || !integer(ctas, "a CTA count", 1, 1 << 20) ||
      !keyword("final") || !stageList(o.finalStages) || !keyword("rows") ||
      !integer(minRows, "a row count", 1, INT64_MAX) || !punct(".") ||
      !punct(".") || !integer(maxRows, "a row count", 1, INT64_MAX))
    return false;
  o.ctas = int(ctas);
  o.minRows = minRows;
  o.maxRows = maxRows;
  if (!isKeyword("outvec"))
    return true;
  bump();
  int64_t vec;
  if (!integer(vec, "an output vector size (1, 2 or 4)", 1, 4))
    return false;
  o.outputVec = int(vec);
  return true;
}

/// combiner NAME (fields) empty (values) results (names) push: ...
/// combine: ... finish: ...
bool Parser::combiner(std::shared_ptr<const Combiner> &out) {
  std::string name;
  std::vector<std::string> fields, results;
  std::vector<float> empty;
  if (!keyword("combiner") || !ident(name, "a combiner name") ||
      !identList(fields, "a field name") || !keyword("empty") || !punct("("))
    return false;
  while (!isPunct(")")) {
    uint32_t bits;
    if ((!empty.empty() && !punct(",")) || !floatBits(bits, "a value"))
      return false;
    empty.push_back(std::bit_cast<float>(bits));
  }
  bump();
  Token at = tok;
  if (!keyword("results") || !identList(results, "a result name"))
    return false;
  if (results.empty() && !fields.empty())
    return failAt(at, "expected at least one result name, found none");
  State push, combine, finish;
  if (!function("push", push) || !function("combine", combine) ||
      !function("finish", finish))
    return false;
  out = std::make_shared<Combiner>(
      name, fields, empty, [&](const State &, const Expr &) { return push; },
      [&](const State &, const State &) { return combine; }, results,
      [&](const State &) { return finish; });
  return true;
}

/// NAME: definitions... return %a, %b
bool Parser::function(llvm::StringRef name, State &out) {
  if (!keyword(name) || !punct(":"))
    return false;
  Scope scope;
  while (!isKeyword("return")) {
    if (tok.kind != Token::Value)
      return expected("a value definition (%name = ...) or 'return'");
    if (!nodeDefinition(scope))
      return false;
  }
  bump();
  if (tok.kind != Token::Value)
    return true; // a state without fields
  while (true) {
    out.fields.emplace_back();
    if (!value(scope, out.fields.back()))
      return false;
    if (!isPunct(","))
      return true;
    bump();
  }
}

// ---- Outputs and the whole program ----------------------------------------

/// How a text converts a value of type `from` to the storage type `to`.
std::string storeHint(DType to, DType from) {
  if (from == DType::I1)
    return " (a predicate cannot be stored: select between two f32 values "
           "first)";
  if (to == DType::I1)
    return " (an output cannot be i1)";
  if (to == DType::F32)
    return " (widen it with extend)";
  return llvm::formatv(" (write %r = round to {0} %v : {0} first{1})",
                       dtypeName(to),
                       from == DType::F32 ? "" : ", after extend")
      .str();
}

/// output NAME : DTYPE LAYOUT [per_row[(K)]] [align N] [aliases IN] = %v
/// A per_row(K) output takes K values: `= %mean, %rstd`.
bool Parser::output() {
  bump();
  OperandDecl o;
  o.isOutput = true;
  o.map = IndexMap::PerElement;
  if (!ident(o.name, "an output name") || !punct(":") || !dtype(o.dtype) ||
      !layout(o.layout) || !rowWidth(o) || !alignment(o) || !aliases(o) ||
      !punct("="))
    return false;
  Token first = tok;
  std::vector<Expr> values;
  while (true) {
    Token at = tok;
    values.emplace_back();
    if (!value(mainScope, values.back()))
      return false;
    DType t = values.back().dtype();
    if (t != o.dtype)
      return failAt(at, llvm::formatv("expected {0} {1} value for output "
                                      "'{2}', found {3}{4}",
                                      o.dtype == DType::BF16 ? "a" : "an",
                                      dtypeName(o.dtype), o.name,
                                      dtypeName(t), storeHint(o.dtype, t)));
    if (!isPunct(","))
      break;
    bump();
  }
  if (values.size() != size_t(o.rowWidth))
    return failAt(first,
                  o.map == IndexMap::PerRow
                      ? llvm::formatv("output '{0}' is per_row({1}): expected "
                                      "{1} values, found {2}",
                                      o.name, o.rowWidth, values.size())
                            .str()
                      : llvm::formatv("output '{0}' stores one value per "
                                      "element, found {1} values (k values "
                                      "per row: per_row(k))",
                                      o.name, values.size())
                            .str());
  o.value = values.front();
  o.moreValues.assign(values.begin() + 1, values.end());
  def.operands.push_back(std::move(o));
  return true;
}

/// `per_row`: one value per row (written only when used, so texts without
/// it keep v1 and their hashes); `per_row(K)`: K values per row.
bool Parser::rowWidth(OperandDecl &o) {
  if (!isKeyword("per_row"))
    return true;
  bump();
  o.map = IndexMap::PerRow;
  if (!isPunct("("))
    return true;
  bump();
  int64_t k;
  if (!integer(k, "the values per row", 1, kMaxRowWidth))
    return false;
  o.rowWidth = int(k);
  return punct(")");
}

/// Folds may be written in any order (the canonical text writes each one
/// where its value is first used) but are numbered 0, 1, ... without gaps.
bool Parser::collectFolds() {
  int64_t next = 0;
  for (auto &[index, entry] : folds) {
    if (index != next)
      return failAt(entry.first, llvm::formatv("expected fold {0} (folds are "
                                               "numbered 0, 1, ... without "
                                               "gaps), found fold {1}",
                                               next, index));
    def.folds.push_back(std::move(entry.second));
    ++next;
  }
  return true;
}

llvm::Expected<std::shared_ptr<const KernelDef>> Parser::run() {
  if (!header() || !declarations() || !body() || !collectFolds())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), error);
  auto frozen = freeze(std::move(def), {}, [&](const ExprNode &n) {
    auto it = nodeNames.find(&n);
    return it == nodeNames.end() ? std::string("a node") : it->second;
  });
  if (!frozen && !source.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        source + ": " + llvm::toString(frozen.takeError()));
  return frozen;
}

} // namespace

llvm::Expected<std::shared_ptr<const KernelDef>>
bitfold::dsl::parseKernel(llvm::StringRef text, llvm::StringRef sourceName) {
  return Parser(text, sourceName).run();
}
