//===- dsl/IR.cpp - Node construction and the DSL's math ------------------===//

#include "dsl/IR.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <numbers>

using namespace bitfold::dsl;

llvm::StringRef bitfold::dsl::dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::I1: return "i1";
  case DType::F8E4M3FN: return "f8e4m3fn";
  case DType::F8E5M2: return "f8e5m2";
  case DType::I8: return "i8";
  case DType::I32: return "i32";
  }
  return "?";
}

unsigned bitfold::dsl::dtypeBytes(DType t) {
  switch (t) {
  case DType::F32: return 4;
  case DType::BF16:
  case DType::F16: return 2;
  case DType::I1: return 0;
  case DType::I32: return 4;
  case DType::F8E4M3FN:
  case DType::F8E5M2:
  case DType::I8: return 1;
  }
  return 0;
}

llvm::StringRef bitfold::dsl::opName(Op op) { return opInfo(op).name; }

std::optional<Op> bitfold::dsl::opFromName(llvm::StringRef name) {
  for (const OpInfo &info : kOpTable)
    if (info.name == name)
      return info.op;
  return std::nullopt;
}

llvm::StringRef bitfold::dsl::layoutName(Layout l) {
  switch (l) {
  case Layout::RowMajor: return "row_major";
  case Layout::ChannelsLast: return "channels_last";
  case Layout::ChannelsFirst: return "channels_first";
  }
  return "?";
}

bool bitfold::dsl::isChannelsFirst(const KernelDef &def) {
  bool firstIn = false, otherOut = false;
  for (const OperandDecl &o : def.operands) {
    firstIn |= o.layout == Layout::ChannelsFirst;
    otherOut |= o.isOutput && o.map == IndexMap::PerElement &&
                o.layout != Layout::ChannelsFirst;
  }
  return firstIn && !(def.folds.empty() && otherOut);
}

int64_t bitfold::dsl::storedCols(const OperandDecl &o, int64_t cols,
                                 llvm::ArrayRef<int64_t> dims) {
  if (o.map == IndexMap::Vector)
    return o.batchDim >= 0 && size_t(o.batchDim) < dims.size()
               ? dims[o.batchDim]
               : cols;
  return o.map == IndexMap::PerRow ? o.rowWidth : cols;
}

std::vector<Expr> bitfold::dsl::outputValues(const OperandDecl &o) {
  std::vector<Expr> out{o.value};
  out.insert(out.end(), o.moreValues.begin(), o.moreValues.end());
  return out;
}

bool bitfold::dsl::variesAlongRow(const KernelDef &def, const ExprNode &n) {
  if (n.op == Op::ColIndex)
    return true;
  // A per-row input (a target index) is one value for the whole row.
  return n.op == Op::Load &&
         !(n.index >= 0 && n.index < int(def.operands.size()) &&
           def.operands[n.index].map == IndexMap::PerRow);
}

llvm::StringRef bitfold::dsl::indexMapName(IndexMap m) {
  switch (m) {
  case IndexMap::PerElement: return "per_element";
  case IndexMap::PerBatch: return "per_batch";
  case IndexMap::PerColumn: return "per_column";
  case IndexMap::PerRow: return "per_row";
  case IndexMap::Vector: return "vector";
  }
  return "?";
}

Expr ExprNode::make(Op op, DType type, std::vector<Expr> args) {
  auto n = std::make_shared<ExprNode>();
  n->op = op;
  n->type = type;
  n->args = std::move(args);
  return Expr(std::move(n));
}

Expr ExprNode::invalid(std::string message) {
  auto n = std::make_shared<ExprNode>();
  n->op = Op::Invalid;
  n->type = DType::F32;
  n->message = std::move(message);
  return Expr(std::move(n));
}

Expr::Expr(float v) {
  auto n = std::make_shared<ExprNode>();
  n->op = Op::Const;
  n->type = DType::F32;
  n->bits = std::bit_cast<uint32_t>(v);
  node = std::move(n);
}

DType Expr::dtype() const { return node ? node->type : DType::F32; }

Expr Expr::to_f32() const {
  if (!node || node->type == DType::F32 || node->op == Op::Invalid)
    return *this;
  if (node->type == DType::I1)
    return ExprNode::invalid("to_f32: a predicate (i1) has no f32 value; "
                             "use select(cond, a, b)");
  if (node->type == DType::I32)
    return ExprNode::invalid("to_f32: an index value (i32) converts with "
                             "itof(i)");
  return ExprNode::make(Op::Extend, DType::F32, {*this});
}

namespace {

bool isNumeric(DType t) { return t != DType::I1 && t != DType::I32; }

/// Checks the operands of `op` and widens numeric ones to f32. Returns an
/// Invalid node (propagating the first invalid operand) or an empty Expr.
Expr checkArgs(Op op, std::vector<Expr> &args, bool wantPredicates) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].get())
      return ExprNode::invalid(llvm::formatv(
          "{0}: operand {1} is an empty Expr (declared but never assigned)",
          opName(op), i));
    if (args[i]->op == Op::Invalid)
      return args[i];
  }
  for (size_t i = 0; i < args.size(); ++i) {
    DType t = args[i].dtype();
    if (wantPredicates && t != DType::I1)
      return ExprNode::invalid(llvm::formatv(
          "{0}: operand {1} must be a predicate (i1), found {2}", opName(op),
          i, dtypeName(t)));
    if (!wantPredicates && t == DType::I32)
      return ExprNode::invalid(llvm::formatv(
          "{0}: operand {1} is an index value (i32); convert it with itof",
          opName(op), i));
    if (!wantPredicates && !isNumeric(t))
      return ExprNode::invalid(llvm::formatv(
          "{0}: operand {1} is a predicate (i1); arithmetic needs a number "
          "(use select)",
          opName(op), i));
    if (!wantPredicates)
      args[i] = args[i].to_f32();
  }
  return Expr();
}

/// The index ops' type rules: i32 operands (a predicate first for iselect).
Expr makeIntOp(Op op, std::vector<Expr> args) {
  const OpInfo &info = opInfo(op);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].get())
      return ExprNode::invalid(llvm::formatv(
          "{0}: operand {1} is an empty Expr", info.name, i));
    if (args[i]->op == Op::Invalid)
      return args[i];
    DType want =
        info.types == TypeRule::IntSelect && i == 0 ? DType::I1 : DType::I32;
    if (args[i].dtype() != want)
      return ExprNode::invalid(llvm::formatv(
          "{0}: operand {1} must be {2}, found {3}", info.name, i,
          dtypeName(want), dtypeName(args[i].dtype())));
  }
  DType result = info.types == TypeRule::IntCompare ? DType::I1
                 : info.types == TypeRule::IntToFloat ? DType::F32
                                                      : DType::I32;
  return ExprNode::make(op, result, std::move(args));
}

} // namespace

Expr bitfold::dsl::makeOp(Op op, std::vector<Expr> args) {
  const OpInfo &info = opInfo(op);
  if (info.arity < 0 || int(args.size()) != info.arity)
    return ExprNode::invalid(llvm::formatv(
        "{0}: takes {1} operand(s), found {2}", info.name, info.arity,
        args.size()));
  switch (info.types) {
  case TypeRule::Leaf:
  case TypeRule::Round:
  case TypeRule::Extend:
  case TypeRule::Gather:
    return ExprNode::invalid(llvm::formatv(
        "{0}: has its own builder, not makeOp", info.name));
  case TypeRule::Arith:
  case TypeRule::Compare:
  case TypeRule::Logic: {
    if (Expr bad = checkArgs(op, args, info.types == TypeRule::Logic))
      return bad;
    DType result = info.types == TypeRule::Arith ? DType::F32 : DType::I1;
    return ExprNode::make(op, result, std::move(args));
  }
  case TypeRule::Select: {
    std::vector<Expr> c{args[0]};
    if (Expr bad = checkArgs(op, c, true))
      return bad;
    std::vector<Expr> ab{args[1], args[2]};
    if (Expr bad = checkArgs(op, ab, false))
      return bad;
    return ExprNode::make(op, DType::F32, {args[0], ab[0], ab[1]});
  }
  case TypeRule::IntArith:
  case TypeRule::IntCompare:
  case TypeRule::IntSelect:
  case TypeRule::IntToFloat:
    return makeIntOp(op, std::move(args));
  }
  return ExprNode::invalid("unknown type rule");
}

namespace bitfold::dsl {

namespace {
Expr arith(Op op, std::vector<Expr> args) { return makeOp(op, std::move(args)); }
Expr compare(Op op, const Expr &a, const Expr &b) { return makeOp(op, {a, b}); }
Expr logic(Op op, std::vector<Expr> args) { return makeOp(op, std::move(args)); }
} // namespace

Expr add(const Expr &a, const Expr &b) { return arith(Op::Add, {a, b}); }
Expr sub(const Expr &a, const Expr &b) { return arith(Op::Sub, {a, b}); }
Expr mul(const Expr &a, const Expr &b) { return arith(Op::Mul, {a, b}); }
Expr fma(const Expr &a, const Expr &b, const Expr &c) {
  return arith(Op::Fma, {a, b, c});
}
Expr div_rn(const Expr &a, const Expr &b) { return arith(Op::Div, {a, b}); }
Expr sqrt_rn(const Expr &a) { return arith(Op::Sqrt, {a}); }
Expr abs(const Expr &a) { return arith(Op::Abs, {a}); }
Expr sub_ftz(const Expr &a, const Expr &b) {
  return arith(Op::SubFtz, {a, b});
}
Expr min_num(const Expr &a, const Expr &b) { return arith(Op::MinNum, {a, b}); }
Expr max_num(const Expr &a, const Expr &b) { return arith(Op::MaxNum, {a, b}); }
Expr min_nan(const Expr &a, const Expr &b) { return arith(Op::MinNaN, {a, b}); }
Expr max_nan(const Expr &a, const Expr &b) { return arith(Op::MaxNaN, {a, b}); }
Expr saturate(const Expr &a) { return arith(Op::Saturate, {a}); }
Expr rcp_approx_ftz(const Expr &a) { return arith(Op::RcpApproxFtz, {a}); }
Expr rsqrt_approx_ftz(const Expr &a) {
  return arith(Op::RsqrtApproxFtz, {a});
}
Expr ex2_approx_ftz(const Expr &a) { return arith(Op::Ex2ApproxFtz, {a}); }
Expr exp_libdevice(const Expr &a) { return arith(Op::ExpLibdevice, {a}); }
Expr log_libdevice(const Expr &a) { return arith(Op::LogLibdevice, {a}); }
Expr tanh_libdevice(const Expr &a) { return arith(Op::TanhLibdevice, {a}); }
Expr erf_libdevice(const Expr &a) { return arith(Op::ErfLibdevice, {a}); }

Expr operator+(const Expr &a, const Expr &b) { return add(a, b); }
Expr operator-(const Expr &a, const Expr &b) { return sub(a, b); }
Expr operator*(const Expr &a, const Expr &b) { return mul(a, b); }
Expr operator-(const Expr &a) { return arith(Op::Neg, {a}); }
Expr operator<(const Expr &a, const Expr &b) { return compare(Op::CmpLT, a, b); }
Expr operator<=(const Expr &a, const Expr &b) { return compare(Op::CmpLE, a, b); }
Expr operator>(const Expr &a, const Expr &b) { return compare(Op::CmpGT, a, b); }
Expr operator>=(const Expr &a, const Expr &b) { return compare(Op::CmpGE, a, b); }
Expr operator==(const Expr &a, const Expr &b) { return compare(Op::CmpEQ, a, b); }
Expr operator!=(const Expr &a, const Expr &b) { return compare(Op::CmpNE, a, b); }
Expr operator&&(const Expr &a, const Expr &b) { return logic(Op::And, {a, b}); }
Expr operator||(const Expr &a, const Expr &b) { return logic(Op::Or, {a, b}); }
Expr operator!(const Expr &a) { return logic(Op::Not, {a}); }

Expr select(const Expr &cond, const Expr &a, const Expr &b) {
  return makeOp(Op::Select, {cond, a, b});
}

Expr row_index() { return ExprNode::make(Op::RowIndex, DType::I32, {}); }
Expr col_index() { return ExprNode::make(Op::ColIndex, DType::I32, {}); }
Expr iconst(int32_t v) {
  Expr e = ExprNode::make(Op::IConst, DType::I32, {});
  const_cast<ExprNode *>(e.get())->bits = uint32_t(v);
  return e;
}
Expr iadd(const Expr &a, const Expr &b) { return makeOp(Op::IAdd, {a, b}); }
Expr isub(const Expr &a, const Expr &b) { return makeOp(Op::ISub, {a, b}); }
Expr imul(const Expr &a, const Expr &b) { return makeOp(Op::IMul, {a, b}); }
Expr idiv(const Expr &a, const Expr &b) { return makeOp(Op::IDiv, {a, b}); }
Expr irem(const Expr &a, const Expr &b) { return makeOp(Op::IRem, {a, b}); }
Expr iselect(const Expr &c, const Expr &a, const Expr &b) {
  return makeOp(Op::ISelect, {c, a, b});
}
Expr itof(const Expr &a) { return makeOp(Op::IToF, {a}); }
Expr gather(const Expr &input, const Expr &col) {
  if (!input.get() || input->op != Op::Load)
    return ExprNode::invalid("gather: the first operand must be an input "
                             "(its row value)");
  std::vector<Expr> args{col};
  Expr bad = makeIntOp(Op::IToF, args); // same check: one i32 operand
  if (bad->op == Op::Invalid)
    return ExprNode::invalid(std::string("gather") +
                             bad->message.substr(bad->message.find(':')));
  auto n = std::make_shared<ExprNode>();
  n->op = Op::Gather;
  n->type = DType::F32;
  n->index = input->index;
  n->program = input->program;
  n->args = {col};
  return Expr(std::move(n));
}

Expr round(DType to, const Expr &v) {
  std::vector<Expr> args{v};
  if (Expr bad = checkArgs(Op::Round, args, false))
    return bad;
  if (to == DType::I1)
    return ExprNode::invalid("round: cannot round to i1; round to bf16, f16, "
                             "f8e4m3fn, f8e5m2, i8 or f32");
  if (to == DType::F32)
    return args[0];
  Expr r = ExprNode::make(Op::Round, to, {args[0]});
  const_cast<ExprNode *>(r.get())->roundTo = to;
  return r;
}

Expr rcp_nvcc(const Expr &x) {
  Expr r = rcp_approx_ftz(x);
  Expr e = fma(x, r, Expr(-1.0f));
  e = sub_ftz(Expr(-0.0f), e);
  return fma(r, e, r);
}

Expr rsqrt_cuda(const Expr &x) {
  const float flt_min = std::ldexp(1.0f, -126);
  Expr tiny = abs(x) < Expr(flt_min);
  Expr scaled = rsqrt_approx_ftz(x * Expr(std::ldexp(1.0f, 24))) *
                Expr(std::ldexp(1.0f, 12));
  return select(tiny, scaled, rsqrt_approx_ftz(x));
}

Expr rsqrt_approx(const Expr &x) { return rsqrt_approx_ftz(x); }

Expr sigmoid(const Expr &x) {
  return div_rn(Expr(1.0f), Expr(1.0f) + exp_libdevice(-x));
}

Expr silu(const Expr &x) {
  return div_rn(x, Expr(1.0f) + exp_libdevice(-x));
}

Expr gelu_erf(const Expr &x) {
  const float kAlpha = float(std::numbers::sqrt2 / 2); // M_SQRT1_2
  return (x * Expr(0.5f)) * (Expr(1.0f) + erf_libdevice(x * Expr(kAlpha)));
}

Expr gelu_tanh(const Expr &x) {
  // ATen's constants, computed in double and stored as the f32 opmath:
  // M_SQRT2 * M_2_SQRTPI * 0.5.
  const float kBeta =
      float(std::numbers::sqrt2 * (2 * std::numbers::inv_sqrtpi) * 0.5);
  const float kKappa = float(0.044715);
  Expr inner = Expr(kBeta) * fma(Expr(kKappa), (x * x) * x, x);
  return (Expr(0.5f) * x) * (Expr(1.0f) + tanh_libdevice(inner));
}

static Expr dimNode(int index, DType type) {
  auto n = std::make_shared<ExprNode>();
  n->op = Op::Dim;
  n->type = type;
  n->index = index;
  return Expr(std::move(n));
}

Expr Dim::to_f32() const { return dimNode(index, DType::F32); }
Expr Dim::to_i32() const { return dimNode(index, DType::I32); }

} // namespace bitfold::dsl

// ---- Combiner --------------------------------------------------------------

static Expr placeholder(int id) {
  auto n = std::make_shared<ExprNode>();
  n->op = Op::Placeholder;
  n->type = DType::F32;
  n->index = id;
  return Expr(std::move(n));
}

static State placeholders(int first, size_t count) {
  State s;
  for (size_t i = 0; i < count; ++i)
    s.fields.push_back(placeholder(first + int(i)));
  return s;
}

Combiner::Combiner(std::string name, std::vector<std::string> fields,
                   std::vector<float> empty, PushFn push, CombineFn combine,
                   std::vector<std::string> results, FinishFn finish)
    : name_(std::move(name)), fields_(std::move(fields)),
      empty_(std::move(empty)), results_(std::move(results)) {
  int f = int(fields_.size());
  if (push)
    push_ = push(placeholders(0, f), placeholder(f));
  if (combine)
    combine_ = combine(placeholders(0, f), placeholders(f, f));
  if (results_.empty()) {
    results_ = fields_;
    finish_ = placeholders(0, f);
  } else if (finish) {
    finish_ = finish(placeholders(0, f));
  }
}

// ---- RowProgram ------------------------------------------------------------

const OperandDecl *KernelDef::findOperand(llvm::StringRef n) const {
  for (const OperandDecl &o : operands)
    if (o.name == n)
      return &o;
  return nullptr;
}

int KernelDef::numInputs() const {
  int n = 0;
  for (const OperandDecl &o : operands)
    n += !o.isOutput;
  return n;
}

int KernelDef::numOutputs() const {
  return int(operands.size()) - numInputs();
}

uint64_t bitfold::dsl::newProgramId() {
  static std::atomic<uint64_t> nextId{1};
  return nextId++;
}

RowProgram::RowProgram(std::string name) {
  def.name = std::move(name);
  def.programId = newProgramId();
}

Dim RowProgram::dim(llvm::StringRef name) {
  for (size_t i = 0; i < def.dims.size(); ++i)
    if (def.dims[i] == name)
      return Dim{int(i)};
  def.dims.push_back(name.str());
  return Dim{int(def.dims.size() - 1)};
}

Input RowProgram::input(llvm::StringRef name, DType dtype, Layout layout,
                        IndexMap map, Dim batch) {
  OperandDecl o;
  o.name = name.str();
  o.dtype = dtype;
  o.layout = layout;
  o.map = map;
  o.batchDim = batch.index;
  int index = int(def.operands.size());
  def.operands.push_back(o);

  auto n = std::make_shared<ExprNode>();
  n->op = Op::Load;
  n->program = def.programId;
  n->type = dtype;
  n->index = index;
  return Input{Expr(std::move(n))};
}

Expr RowProgram::scalar(llvm::StringRef name, DType dtype) {
  def.scalars.push_back(ScalarDecl{name.str(), dtype});
  auto n = std::make_shared<ExprNode>();
  n->op = Op::Scalar;
  n->program = def.programId;
  n->type = DType::F32;
  n->index = int(def.scalars.size() - 1);
  return Expr(std::move(n));
}

Expr RowProgram::scalar(llvm::StringRef name, float defaultValue) {
  Expr e = scalar(name, DType::F32);
  def.scalars.back().defaultValue = defaultValue;
  return e;
}

void RowProgram::output(llvm::StringRef name, DType dtype, Layout layout,
                        Expr value) {
  OperandDecl o;
  o.name = name.str();
  o.dtype = dtype;
  o.layout = layout;
  o.map = IndexMap::PerElement;
  o.isOutput = true;
  o.value = std::move(value);
  def.operands.push_back(std::move(o));
}

void RowProgram::outputPerRow(llvm::StringRef name, DType dtype, Expr value) {
  output(name, dtype, Layout::RowMajor, std::move(value));
  def.operands.back().map = IndexMap::PerRow;
}

void RowProgram::outputPerRow(llvm::StringRef name, DType dtype,
                              std::vector<Expr> values) {
  outputPerRow(name, dtype, values.empty() ? Expr() : values.front());
  OperandDecl &o = def.operands.back();
  o.rowWidth = int(values.size());
  if (values.size() > 1)
    o.moreValues.assign(values.begin() + 1, values.end());
}

State RowProgram::fold(const Expr &input, const FoldOrder &order,
                       std::shared_ptr<const Combiner> combiner) {
  FoldDecl f;
  f.order = order;
  f.combiner = combiner;
  f.input = input;
  int index = int(def.folds.size());
  def.folds.push_back(std::move(f));
  State results;
  size_t count = combiner ? combiner->resultNames().size() : 0;
  for (size_t i = 0; i < count; ++i) {
    auto n = std::make_shared<ExprNode>();
    n->op = Op::FoldValue;
  n->program = def.programId;
    n->type = DType::F32;
    n->index = index;
    n->field = int(i);
    // The fold value depends on the fold's input: keep it as an argument so
    // a walk from the outputs reaches the fold.
    n->args.push_back(input);
    results.fields.push_back(Expr(std::move(n)));
  }
  if (!combiner)
    errors.push_back(llvm::formatv("fold {0}: the combiner is null", index));
  return results;
}

void RowProgram::groups(int n) { def.groups = n; }

void RowProgram::guardCols(int64_t multipleOf, int64_t minCols,
                           int64_t maxCols) {
  def.colsMultipleOf = multipleOf;
  def.minCols = minCols;
  def.maxCols = maxCols;
}

void RowProgram::inPlace(llvm::StringRef output, llvm::StringRef input) {
  int in = -1;
  for (size_t i = 0; i < def.operands.size(); ++i)
    if (def.operands[i].name == input && !def.operands[i].isOutput)
      in = int(i);
  for (OperandDecl &o : def.operands)
    if (o.isOutput && o.name == output && in >= 0) {
      o.aliasOf = in;
      return;
    }
  errors.push_back(llvm::formatv("inPlace('{0}', '{1}'): declare the output "
                                 "and the input first",
                                 output, input));
}

void RowProgram::guardAlign(llvm::StringRef operand, int elements) {
  for (OperandDecl &o : def.operands)
    if (o.name == operand) {
      if (elements < 1 || (elements & (elements - 1))) {
        errors.push_back(llvm::formatv("guardAlign('{0}'): alignment must be "
                                       "a power of two of elements, found {1}",
                                       operand, elements));
        return;
      }
      o.guardAlignElems = elements;
      return;
    }
  errors.push_back(llvm::formatv("guardAlign: no operand named '{0}' (declare "
                                 "it first)",
                                 operand));
}

llvm::Expected<std::shared_ptr<const KernelDef>> RowProgram::build() {
  return freeze(def, errors);
}

llvm::Expected<std::shared_ptr<const KernelDef>>
bitfold::dsl::freeze(KernelDef def, llvm::ArrayRef<std::string> errors,
                     NodeNamer nodeName) {
  std::string all;
  for (const std::string &e : errors)
    all += e + "\n";
  if (llvm::Error err = verify(def, nodeName)) {
    all += llvm::toString(std::move(err));
  }
  if (!all.empty()) {
    if (all.back() == '\n')
      all.pop_back();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("row program '{0}' is ill-formed:\n{1}", def.name, all)
            .str());
  }
  auto out = std::make_shared<KernelDef>(std::move(def));
  out->canonicalText = printCanonical(*out);
  out->hash = contentHash(out->canonicalText);
  return std::shared_ptr<const KernelDef>(std::move(out));
}

void bitfold::dsl::forEachNode(
    const KernelDef &def, llvm::function_ref<void(const ExprNode &)> visit) {
  llvm::DenseSet<const ExprNode *> seen;
  std::vector<const ExprNode *> stack;
  auto push = [&](const Expr &e) {
    if (e.get() && seen.insert(e.get()).second)
      stack.push_back(e.get());
  };
  for (const OperandDecl &o : def.operands)
    if (o.isOutput)
      for (const Expr &v : outputValues(o))
        push(v);
  for (const FoldDecl &f : def.folds) {
    push(f.input);
    if (!f.combiner)
      continue;
    for (const State *s : {&f.combiner->pushBody(), &f.combiner->combineBody(),
                           &f.combiner->finishBody()})
      for (const Expr &e : s->fields)
        push(e);
  }
  while (!stack.empty()) {
    const ExprNode *n = stack.back();
    stack.pop_back();
    visit(*n);
    for (const Expr &a : n->args)
      push(a);
  }
}

Expr bitfold::dsl::icmp(Op op, const Expr &a, const Expr &b) {
  if (opInfo(op).types != TypeRule::IntCompare)
    return ExprNode::invalid(llvm::formatv(
        "icmp: {0} is not an index comparison", opName(op)));
  return makeOp(op, {a, b});
}
