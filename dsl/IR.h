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

#include "dsl/Ops.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bitfold::dsl {

/// Storage and value types. Arithmetic happens in F32 only: BF16/F16 values
/// are widened exactly when used as arithmetic operands. I1 is a predicate.
/// F8E4M3FN, F8E5M2 and I8 are one-byte storage types (torch's
/// float8_e4m3fn, float8_e5m2 and int8): `extend` widens them exactly,
/// `round` narrows to them as torch's `.to()` does (dsl/Float8.h).
/// I32 is an index value (row_index, col_index and integer arithmetic on
/// them); it is stored only as a per-row input (a target index per row).
enum class DType : uint8_t { F32, BF16, F16, I1, F8E4M3FN, F8E5M2, I8, I32 };
llvm::StringRef dtypeName(DType t);
/// Bytes per element of a storage dtype (I1 has none).
unsigned dtypeBytes(DType t);
/// The one-byte storage types (F8E4M3FN, F8E5M2, I8).
inline bool isByteDType(DType t) {
  return t == DType::F8E4M3FN || t == DType::F8E5M2 || t == DType::I8;
}

/// The op's spelling in the canonical text (opInfo(op).name).
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

/// A node of a computing op (type rule Arith, Compare, Logic or Select)
/// with the table's type rule: numeric operands widened exactly to f32,
/// predicates checked. An ill-typed use gives an Invalid node, as every
/// builder below does (they all call this).
Expr makeOp(Op op, std::vector<Expr> args);

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
/// libdevice __nv_logf, __nv_tanhf, __nv_erff (nvcc's logf, tanhf, erff
/// without fast math; what torch.log/tanh/erf compute on f32).
Expr log_libdevice(const Expr &x);
Expr tanh_libdevice(const Expr &x);
Expr erf_libdevice(const Expr &x);
/// aten's sigmoid: 1 / (1 + expf(-x)) with IEEE division.
Expr sigmoid(const Expr &x);
/// aten's silu: x / (1 + expf(-x)) with IEEE division.
Expr silu(const Expr &x);
/// aten's GELU, erf form, as nvcc compiles it for f32:
/// (x * 0.5) * (1 + erff(x * M_SQRT1_2)); nothing to contract.
Expr gelu_erf(const Expr &x);
/// aten's GELU, tanh form, as nvcc compiles it for f32 (it contracts
/// kKappa * x^3 + x into one fma):
/// (0.5 * x) * (1 + tanhf(kBeta * fma(kKappa, (x * x) * x, x))).
Expr gelu_tanh(const Expr &x);

// ---- Index values (i32; docs/kernel-format.md "Index ops") -------------
/// The row's index within its group, and the element's column.
Expr row_index();
Expr col_index();
Expr iconst(int32_t v);
/// Wrapping i32 arithmetic; idiv truncates toward zero, irem has the
/// dividend's sign; by 0: idiv gives 0, irem the dividend.
Expr iadd(const Expr &a, const Expr &b);
Expr isub(const Expr &a, const Expr &b);
Expr imul(const Expr &a, const Expr &b);
Expr idiv(const Expr &a, const Expr &b);
Expr irem(const Expr &a, const Expr &b);
/// Signed comparisons (i1) and selection between index values.
Expr icmp(Op op, const Expr &a, const Expr &b);
Expr iselect(const Expr &cond, const Expr &a, const Expr &b);
/// i32 -> f32, round to nearest even.
Expr itof(const Expr &a);
/// Input `input` (its row value, Input::row()) at column `col` (i32) of
/// the row its index map gives, widened to f32; NaN outside [0, cols).
Expr gather(const Expr &input, const Expr &col);

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

/// Bounds on a fold order (the verifier enforces them): lanes are the
/// threads of one CTA, a vector is what one lane pushes in a row, and codegen
/// allocates and unrolls per lane, per element and per stage.
constexpr int kMaxFoldThreads = 1024;
constexpr int kMaxFoldVector = 64;
constexpr int kMaxFoldStages = 10; ///< log2(kMaxFoldThreads).
constexpr int64_t kMaxFoldElementsPerLane = int64_t(1) << 24;

/// Spelling of a stage kind in the canonical text.
llvm::StringRef stageKindName(TreeStage::Kind k);

/// Which virtual lane owns which element, in which order, and the tree.
/// Lane t owns the V-element vectors t, t+T, t+2T, ... of the row and
/// pushes them in that order, elements 0..V-1 of each vector in order.
/// Lanes that own nothing enter the tree with the combiner's empty state.
///
/// The fields after `stages` extend this (docs/aten-reduce.md; their
/// defaults give the model above, and isPlain() says so):
/// - `ctas` groups of T lanes (aten's CTAs per output): L = T * ctas lanes,
///   lane l owns vectors l, l+L, ...; `stages` run inside each group; then
///   gather lane g < T folds, starting empty, lane 0 of groups g, g+T, ...
///   in that order, `finalStages` merge the gather lanes, and the fold's
///   value is gather lane 0.
/// - `accumulators` A independent states per lane, all starting empty:
///   RoundRobin sends a lane's j-th vector to state j % A, VectorElement
///   sends element i of every vector to state i (A == V). At the end each
///   lane folds them serially: s0 = combine(s0, s_i), i = 1..A-1.
/// - `alignedVectors` (aten's input-vectorized path): row r starts at
///   element r * cols of a V-aligned buffer; its first h = (V - r*cols % V)
///   % V elements (the head) go to lanes V-h+e, state 0, before anything
///   else; the vectors start at column h; the elements after the last whole
///   vector (the tail) go to lanes 0, 1, ..., state 0, after everything.
/// - `minRows`..`maxRows`: the row counts for which the reference takes
///   this order (aten's block shape depends on the row count).
struct FoldOrder {
  std::string name;
  int threads = 0; ///< T, a power of two.
  int vector = 0;  ///< V, elements per vector.
  std::vector<TreeStage> stages;
  enum class AccumulatorMap : uint8_t { RoundRobin, VectorElement };
  int accumulators = 1;
  AccumulatorMap accumulatorMap = AccumulatorMap::RoundRobin;
  bool alignedVectors = false;
  int ctas = 1;
  std::vector<TreeStage> finalStages;
  int64_t minRows = 1, maxRows = INT64_MAX;
  /// Strided-axis orders (aten's reduction over a non-innermost dim,
  /// docs/aten-reduce.md section 9): the output_vec_size (1, 2 or 4) this
  /// order was derived for; like the row range, a launch condition (the
  /// launch derives it from the column stride S). 0: a row-axis order.
  int outputVec = 0;
  bool operator==(const FoldOrder &) const = default;
  /// True when the lane mapping uses only the original fields (what codegen
  /// maps today); the row range is a launch condition, not a mapping.
  bool isPlain() const {
    return accumulators == 1 && !alignedVectors && ctas == 1;
  }
  bool hasRowRange() const { return minRows != 1 || maxRows != INT64_MAX; }
  bool stridedAxis() const { return outputVec != 0; }
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
  /// N C [D] H W stored contiguous (NCHW, NCDHW): rows = the N*S pixels
  /// (S = [D*]H*W), a row's C elements lie S apart. The fold axis is
  /// strided; consecutive rows are adjacent in memory (docs/aten-reduce.md
  /// section 9). A program with such an operand has every per-element
  /// operand in it and folds in strided-axis orders (FoldOrder::outputVec),
  /// except an elementwise program (no folds) whose outputs are row-major
  /// or channels-last: it may read channels-first inputs (isChannelsFirst).
  ChannelsFirst,
};
/// Which element of an operand row r, column c reads.
enum class IndexMap : uint8_t {
  PerElement, ///< [r, c]
  PerBatch,   ///< [r / S, c]: broadcast over the S rows of a batch.
  PerColumn,  ///< [c]: one row for all.
  /// [r], one value per row; the tensor holds `rows` values. An output:
  /// a fold result or an expression of per-row values (mean, rstd, a quant
  /// scale, a per-row loss), written once per row after the folds; or k
  /// such values per row ([rows, k], OperandDecl::rowWidth). An input:
  /// read once per row (cross-entropy's i32 target class).
  PerRow,
  /// Inputs only: a vector of D values (D a declared dim, set by the
  /// tensor's length), read only by `gather` at an index in [0, D): a
  /// per-channel parameter such as GroupNorm's gamma[channel].
  Vector,
};
llvm::StringRef layoutName(Layout l);
struct KernelDef;
struct OperandDecl;
/// Columns an operand's tensor stores per row: k (rowWidth) for a per-row
/// operand, D for a vector(D) input (given `dims`; `cols` without them, an
/// upper bound only where D <= cols), otherwise the program's `cols`.
int64_t storedCols(const OperandDecl &o, int64_t cols,
                   llvm::ArrayRef<int64_t> dims = {});
/// Whether leaf `n` differs between the elements of a row: the column
/// index, or a load of an input that is not per_row. What is built from
/// no such leaf (outside folds) is one value per row.
bool variesAlongRow(const KernelDef &def, const ExprNode &n);
/// Whether the program runs channels-first (a thread per pixel of NC[D]HW
/// tensors, its folds along the strided C axis): it has a channels-first
/// operand, unless it has no folds and its per-element outputs are not
/// channels-first. Such an elementwise program runs row plans over the
/// outputs' pixels and reads its channels-first inputs element by element,
/// S apart (a channels-last conv output plus a contiguous residual).
bool isChannelsFirst(const KernelDef &def);
llvm::StringRef indexMapName(IndexMap m);
/// The most values a per_row(k) output stores per row: one thread writes
/// them, so k bounds the code a row's store takes.
constexpr int kMaxRowWidth = 64;
/// An output's stored values: `value`, then a per-row output's moreValues.
std::vector<Expr> outputValues(const OperandDecl &o);

struct OperandDecl {
  std::string name;
  DType dtype;
  Layout layout;
  IndexMap map;
  /// PerBatch: index of the named dim S; Vector: of its length D.
  int batchDim = -1;
  bool isOutput = false;
  Expr value;        ///< outputs: what is stored (per_row(k): the first).
  /// Per-row outputs: k values per row (text `per_row(k)`, a [rows, k]
  /// tensor with a row's k values contiguous); `moreValues` holds values
  /// 2..k. k = 1 is the [rows] tensor of `per_row`.
  int rowWidth = 1;
  std::vector<Expr> moreValues;
  /// Guard: the reference takes the code path this program copies only when
  /// the operand's address is a multiple of this many elements (0: any).
  int guardAlignElems = 0;
  /// Outputs: the input (operand index) this output may overwrite in place
  /// (text: `aliases NAME`), or -1. A declaration, not a promise: the
  /// runtime checks what the caller passes (docs/kernel-format.md).
  int aliasOf = -1;
};

struct FoldDecl {
  FoldOrder order;
  std::shared_ptr<const Combiner> combiner;
  Expr input; ///< per-element f32 value pushed.
};

struct ScalarDecl {
  std::string name;
  DType dtype;
  /// The value a launch uses when the caller gives none (eps = 1e-6).
  /// Printed (`default 0x...`) only when set, so it is part of the text and
  /// the hash of the programs that declare one.
  std::optional<float> defaultValue;
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
  /// The dim as an index value (i32; dims stay below 2^31).
  Expr to_i32() const;
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

  /// An input; IndexMap::PerRow gives one value per row (dtype i32 for a
  /// per-row index such as a target class, row_major).
  Input input(llvm::StringRef name, DType dtype, Layout layout,
              IndexMap map = IndexMap::PerElement, Dim batch = Dim{});
  Expr scalar(llvm::StringRef name, DType dtype = DType::F32);
  /// An f32 scalar with the value callers get by default.
  Expr scalar(llvm::StringRef name, float defaultValue);
  void output(llvm::StringRef name, DType dtype, Layout layout, Expr value);
  /// An output of one value per row (IndexMap::PerRow, a [rows] tensor):
  /// `value` is per row (fold results, scalars, dims, constants).
  void outputPerRow(llvm::StringRef name, DType dtype, Expr value);
  /// An output of k = values.size() values per row (a [rows, k] tensor,
  /// a row's k values contiguous), each per row: {mean, rstd}.
  void outputPerRow(llvm::StringRef name, DType dtype,
                    std::vector<Expr> values);

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
  /// Output `output` may overwrite input `input` in place (the same
  /// tensor passed as both): vLLM's fused_add_rms_norm updates its
  /// residual and x. Declare after both.
  void inPlace(llvm::StringRef output, llvm::StringRef input);

  /// Verify and freeze. Errors list every problem found, one per line.
  llvm::Expected<std::shared_ptr<const KernelDef>> build();

private:
  KernelDef def;
  std::vector<std::string> errors;
};

/// A fresh identity for a program's leaves (RowProgram and the parser).
uint64_t newProgramId();

/// Names a node in verifier messages (e.g. "%3 at 7:3" for parsed text).
using NodeNamer = llvm::function_ref<std::string(const ExprNode &)>;

/// Verifies `def` and freezes it with its canonical text and hash; `errors`
/// (problems its builder found) are reported with the verifier's.
llvm::Expected<std::shared_ptr<const KernelDef>>
freeze(KernelDef def, llvm::ArrayRef<std::string> errors = {},
       NodeNamer nodeName = {});

/// Verify a KernelDef (build() calls this). Public for tests that construct
/// definitions by hand. With `nodeName`, messages about one node name it.
llvm::Error verify(const KernelDef &def, NodeNamer nodeName = {});

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
