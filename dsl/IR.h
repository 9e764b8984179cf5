//===- dsl/IR.h - Row programs: expressions, operands, folds ----*- C++ -*-===//
//
// The embedded DSL in which bitfold kernels are written. A kernel is a *row
// program*: for each of R rows it reads operands through index maps, computes
// elementwise in IEEE fp32 with every rounding written down, reduces with
// explicit folds (fold order + combiner), and writes outputs.
//
// Contract: an Expr denotes exactly one IEEE computation. Nothing in bitfold
// may reassociate, contract or flush what a program wrote; schedules
// (codegen's TileConfig) choose how to run a program, never what it computes.
//
// Building never throws. A malformed node records its message (in the
// user's terms) and RowProgram::build() reports every such message.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_IR_H
#define BITFOLD_DSL_IR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bitfold::dsl {

/// Storage and value types. Arithmetic happens in F32 only: BF16/F16 values
/// are widened exactly when used as arithmetic operands. I1 is a predicate.
enum class DType : uint8_t { F32, BF16, F16, I1 };
llvm::StringRef dtypeName(DType t);
/// Bytes per element of a storage dtype (I1 has none).
unsigned dtypeBytes(DType t);

/// Every operation a row program can contain. The names of the special
/// functions say exactly which hardware or library semantics they copy.
enum class Op : uint8_t {
  // Leaves.
  Const,      ///< f32 constant (bits kept exactly).
  Scalar,     ///< per-launch f32 scalar parameter.
  Dim,        ///< a symbolic dimension converted to f32 (exact below 2^24).
  Load,       ///< element of an input operand at (row, col).
  FoldValue,  ///< one field of a fold's finished state (per row).
  Placeholder,///< argument of a combiner function (internal).
  Invalid,    ///< a node that failed validation; carries the message.
  // Unary.
  Neg, Abs,
  Sqrt,        ///< sqrt.rn.f32 (IEEE).
  RcpApproxFtz,///< rcp.approx.ftz.f32 (hardware MUFU.RCP).
  RsqrtApproxFtz, ///< rsqrt.approx.ftz.f32 (hardware MUFU.RSQ, no rescale).
  Ex2ApproxFtz,///< ex2.approx.ftz.f32 (hardware MUFU.EX2).
  ExpLibdevice,///< libdevice __nv_expf (as nvcc compiles expf).
  Saturate,    ///< clamp to [0, 1], NaN -> 0 (cvt.sat semantics).
  Round,       ///< f32 -> BF16/F16 round to nearest even (cvt.rn).
  Extend,      ///< BF16/F16 -> f32 (exact).
  // Binary.
  Add, Sub, Mul, ///< add.rn / sub.rn / mul.rn .f32, never contracted.
  SubFtz,        ///< sub.rn.ftz.f32 (as in nvcc's reciprocal sequence).
  Div,           ///< div.rn.f32 (IEEE).
  MinNum, MaxNum,///< IEEE minNum/maxNum (a NaN operand loses), like fminf.
  MinNaN, MaxNaN,///< NaN-propagating min/max, like torch.clamp.
  CmpLT, CmpLE, CmpGT, CmpGE, CmpEQ, ///< ordered: false on NaN.
  CmpNE,                             ///< unordered: true on NaN.
  And, Or,                           ///< predicate logic.
  Not,                               ///< predicate negation (unary).
  // Ternary.
  Fma,    ///< fma.rn.f32, only where written.
  Select, ///< cond ? a : b (both sides evaluated; exact).
};
llvm::StringRef opName(Op op);

class ExprNode;
using NodeRef = std::shared_ptr<const ExprNode>;

/// A value of a row program. Cheap to copy; immutable.
class Expr {
public:
  Expr() = default;
  explicit Expr(NodeRef n) : node(std::move(n)) {}
  /// f32 constant.
  Expr(float v);
  Expr(double v) = delete; // say 1.0f: a double constant would be rounded silently.

  const ExprNode *get() const { return node.get(); }
  const ExprNode *operator->() const { return node.get(); }
  /// True when the Expr holds a node. Note `!e` is the DSL's predicate
  /// negation, not a null test: write `!e.get()` for that.
  explicit operator bool() const { return node != nullptr; }
  DType dtype() const;

  /// Exact widening to f32 (identity on f32).
  Expr to_f32() const;

  NodeRef node;
};

/// An IR node. Construct only through the free functions below, which
/// validate operands and produce an Op::Invalid node with a message when
/// they are ill-formed, so an ill-formed node cannot reach codegen.
class ExprNode {
public:
  Op op;
  DType type;
  uint32_t bits = 0;      ///< Const: f32 bits.
  int index = -1;         ///< Scalar/Dim/Load/Placeholder: which; FoldValue: fold.
  int field = -1;         ///< FoldValue: which result.
  DType roundTo = DType::F32; ///< Round: target dtype.
  std::string message;    ///< Invalid: what is wrong.
  uint64_t program = 0;   ///< Load/Scalar/FoldValue: the RowProgram's id.
  std::vector<Expr> args;

  static Expr make(Op op, DType type, std::vector<Expr> args);
  static Expr invalid(std::string message);
};

// ---- The math. All binary ops widen BF16/F16 operands exactly to f32. ------
Expr operator+(const Expr &a, const Expr &b);
Expr operator-(const Expr &a, const Expr &b);
Expr operator*(const Expr &a, const Expr &b);
Expr operator-(const Expr &a);
Expr operator<(const Expr &a, const Expr &b);
Expr operator<=(const Expr &a, const Expr &b);
Expr operator>(const Expr &a, const Expr &b);
Expr operator>=(const Expr &a, const Expr &b);
Expr operator==(const Expr &a, const Expr &b);
Expr operator!=(const Expr &a, const Expr &b);
Expr operator&&(const Expr &a, const Expr &b);
Expr operator||(const Expr &a, const Expr &b);
Expr operator!(const Expr &a);

Expr add(const Expr &a, const Expr &b);
Expr sub(const Expr &a, const Expr &b);
Expr mul(const Expr &a, const Expr &b);
Expr fma(const Expr &a, const Expr &b, const Expr &c);
Expr div_rn(const Expr &a, const Expr &b);
Expr sqrt_rn(const Expr &a);
Expr abs(const Expr &a);
Expr sub_ftz(const Expr &a, const Expr &b);
Expr min_num(const Expr &a, const Expr &b);
Expr max_num(const Expr &a, const Expr &b);
Expr min_nan(const Expr &a, const Expr &b);
Expr max_nan(const Expr &a, const Expr &b);
Expr select(const Expr &cond, const Expr &a, const Expr &b);
Expr saturate(const Expr &a);
/// Round an f32 to a storage dtype, nearest even, NaN/Inf preserved.
/// round(F32, v) is v.
Expr round(DType to, const Expr &v);
template <DType T> Expr round(const Expr &v) { return round(T, v); }
constexpr DType bf16 = DType::BF16;
constexpr DType f16 = DType::F16;
constexpr DType f32 = DType::F32;

// Hardware approximations: exactly one instruction each.
Expr rcp_approx_ftz(const Expr &a);
Expr rsqrt_approx_ftz(const Expr &a);
Expr ex2_approx_ftz(const Expr &a);

// Named special functions, built from the primitives above.
/// nvcc's `1.f / x` fast path: r = rcp.approx.ftz(x); e = fma(x, r, -1);
/// e = sub.ftz(-0, e); r + r*e by fma. Correctly rounded for the small
/// integer counts a Welford fold sees.
Expr rcp_nvcc(const Expr &x);
/// CUDA rsqrtf as ptxas expands rsqrt.approx.f32: subnormal inputs are
/// scaled by 2^24 and the result by 2^12.
Expr rsqrt_cuda(const Expr &x);
/// rsqrt.approx.ftz.f32, no rescale (flashinfer's rsqrt).
Expr rsqrt_approx(const Expr &x);
/// libdevice __nv_expf (nvcc's expf without fast math).
Expr exp_libdevice(const Expr &x);
/// aten's sigmoid: 1 / (1 + expf(-x)) with IEEE division.
Expr sigmoid(const Expr &x);
/// aten's silu: x / (1 + expf(-x)) with IEEE division.
Expr silu(const Expr &x);

// ---- Folds -----------------------------------------------------------------

/// One merge stage of a fold tree. Lanes are virtual (the reference's
/// threads); a stage with offset o sets, for every lane i with bit o clear
/// and i + o < T, lane[i] = combine(self = lane[i], other = lane[i + o]).
/// The fold's value is lane 0's state after the last stage. The kind says
/// how the reference moved the data; it does not change the DAG.
struct TreeStage {
  enum Kind : uint8_t { ShuffleDown, ButterflyXor, CrossWarp };
  Kind kind;
  int offset;
  bool operator==(const TreeStage &) const = default;
};

/// Which virtual lane owns which element, in which order, and the tree.
/// Lane t owns the V-element vectors t, t+T, t+2T, ... of the row and
/// pushes them in that order, elements 0..V-1 of each vector in order.
/// Lanes that own nothing enter the tree with the combiner's empty state.
struct FoldOrder {
  std::string name;
  int threads = 0; ///< T, a power of two.
  int vector = 0;  ///< V, elements per vector.
  std::vector<TreeStage> stages;
  bool operator==(const FoldOrder &) const = default;
};

/// State of a combiner: named f32 fields.
struct State {
  std::vector<Expr> fields;
  Expr &operator[](size_t i) { return fields[i]; }
  const Expr &operator[](size_t i) const { return fields[i]; }
};

/// A combiner is DSL code: push(state, x), combine(self, other) and
/// finish(state) -> results. Each function is traced once with placeholder
/// arguments; the expressions are what the fold evaluates.
class Combiner {
public:
  using PushFn = std::function<State(const State &, const Expr &)>;
  using CombineFn = std::function<State(const State &, const State &)>;
  using FinishFn = std::function<State(const State &)>;

  Combiner(std::string name, std::vector<std::string> fields,
           std::vector<float> empty, PushFn push, CombineFn combine,
           std::vector<std::string> results = {}, FinishFn finish = {});

  const std::string &name() const { return name_; }
  size_t numFields() const { return fields_.size(); }
  llvm::ArrayRef<std::string> fieldNames() const { return fields_; }
  llvm::ArrayRef<float> emptyState() const { return empty_; }
  llvm::ArrayRef<std::string> resultNames() const { return results_; }

  /// Traced bodies. Placeholders: push uses 0..F-1 (state) and F (x);
  /// combine uses 0..F-1 (self) and F..2F-1 (other); finish uses 0..F-1.
  const State &pushBody() const { return push_; }
  const State &combineBody() const { return combine_; }
  const State &finishBody() const { return finish_; }

private:
  std::string name_;
  std::vector<std::string> fields_;
  std::vector<float> empty_;
  std::vector<std::string> results_;
  State push_, combine_, finish_;
};

// ---- Operands and programs -------------------------------------------------

/// How a host tensor's dims map onto (rows, cols).
enum class Layout : uint8_t {
  RowMajor,     ///< (..., C) with C packed; rows = product of leading dims.
  ChannelsLast, ///< N C [D] H W stored channels-last; rows = pixels.
};
/// Which element of an operand row r, column c reads.
enum class IndexMap : uint8_t {
  PerElement, ///< [r, c]
  PerBatch,   ///< [r / S, c]: broadcast over the S rows of a batch.
  PerColumn,  ///< [c]: one row for all.
};
llvm::StringRef layoutName(Layout l);
llvm::StringRef indexMapName(IndexMap m);

struct OperandDecl {
  std::string name;
  DType dtype;
  Layout layout;
  IndexMap map;
  int batchDim = -1; ///< PerBatch: index of the named dim S.
  bool isOutput = false;
  Expr value;        ///< outputs: what is stored.
  /// Guard: the reference takes the code path this program copies only when
  /// the operand's address is a multiple of this many elements (0: any).
  int guardAlignElems = 0;
};

struct FoldDecl {
  FoldOrder order;
  std::shared_ptr<const Combiner> combiner;
  Expr input; ///< per-element f32 value pushed.
};

struct ScalarDecl {
  std::string name;
  DType dtype;
};

/// A finished, verified row program. Immutable; shared by codegen, the
/// interpreter and the runtime.
struct KernelDef {
  std::string name;
  std::vector<std::string> dims; ///< named dims beyond rows and cols.
  std::vector<OperandDecl> operands;
  std::vector<ScalarDecl> scalars;
  std::vector<FoldDecl> folds;
  int groups = 1; ///< tensor groups sharing one launch (e.g. q and k).
  /// Guard on the column count, in the reference's terms.
  int64_t colsMultipleOf = 1;
  int64_t minCols = 1, maxCols = int64_t(1) << 24;
  std::string canonicalText; ///< see Printer.
  std::string hash;          ///< hex SHA-256 of canonicalText.
  uint64_t programId = 0;    ///< identity of the builder (not printed).

  const OperandDecl *findOperand(llvm::StringRef name) const;
  int numInputs() const;
  int numOutputs() const;
};

class RowProgram;

/// A symbolic dimension handle (cols, or a named dim such as S).
struct Dim {
  int index = -1; ///< -1 = cols, -2 = rows, >= 0 named dim.
  Expr to_f32() const;
};

/// Input operand handle; `row()` is its element at the current (r, c).
class Input {
public:
  Expr row() const { return value; }
  Expr value;
};

/// Builder for a row program. Methods never throw; misuse is recorded and
/// reported by build().
class RowProgram {
public:
  explicit RowProgram(std::string name);

  Dim cols() const { return Dim{-1}; }
  Dim rows() const { return Dim{-2}; }
  /// A named row-count dimension (e.g. S, rows per batch).
  Dim dim(llvm::StringRef name);

  Input input(llvm::StringRef name, DType dtype, Layout layout,
              IndexMap map = IndexMap::PerElement, Dim batch = Dim{});
  Expr scalar(llvm::StringRef name, DType dtype = DType::F32);
  void output(llvm::StringRef name, DType dtype, Layout layout, Expr value);

  /// Reduce `input` over the row's columns. Returns the finished results
  /// (combiner's finish), one per-row Expr each.
  State fold(const Expr &input, const FoldOrder &order,
             std::shared_ptr<const Combiner> combiner);

  /// Serve `n` tensor groups (e.g. q and k) from one launch.
  void groups(int n);
  /// The reference's conditions on the column count.
  void guardCols(int64_t multipleOf, int64_t minCols, int64_t maxCols);
  /// The reference's condition on an operand's address: a multiple of
  /// `elements` elements (e.g. aten's vectorized layer norm needs x and y
  /// aligned to its 4-element vectors).
  void guardAlign(llvm::StringRef operand, int elements);

  /// Verify and freeze. Errors list every problem found, one per line.
  llvm::Expected<std::shared_ptr<const KernelDef>> build();

private:
  KernelDef def;
  std::vector<std::string> errors;
};

/// Verify a KernelDef (build() calls this). Public for tests that construct
/// definitions by hand.
llvm::Error verify(const KernelDef &def);

/// Calls `visit` once for every node of the program: outputs, fold inputs
/// and the combiners' push/combine/finish bodies.
void forEachNode(const KernelDef &def,
                 llvm::function_ref<void(const ExprNode &)> visit);

/// Canonical text of a verified program: stable across runs and platforms.
std::string printCanonical(const KernelDef &def);
/// Each node's name in the canonical text: "%12" in the body, and
/// "<combiner>.<push|combine|finish>.%3" in a combiner body (bodies are
/// numbered on their own). Codegen uses them as source locations.
using NodeNames = llvm::DenseMap<const ExprNode *, std::string>;
NodeNames canonicalNodeNames(const KernelDef &def);
/// Hex SHA-256 of a string.
std::string contentHash(llvm::StringRef text);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_IR_H
