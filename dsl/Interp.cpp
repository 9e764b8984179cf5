//===- dsl/Interp.cpp - CPU reference interpreter -------------------------===//
//
// The program is flattened into "tapes": topologically ordered instruction
// lists over a flat value array. The main program has one phase per fold
// (the cone of its input) and one for the outputs; in each phase per-row
// instructions run once per row and per-element ones once per column.
// Combiner bodies are tapes over their placeholder arguments.
//
//===----------------------------------------------------------------------===//

#include "dsl/Interp.h"

#include "dsl/Float8.h"
#include "dsl/ApproxTables.h"
#include "dsl/LibdeviceSequences.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

using namespace bitfold::dsl;

ApproxUnit::~ApproxUnit() = default;

namespace {

float flushSubnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

class CorrectlyRoundedApprox final : public ApproxUnit {
public:
  float rcpApproxFtz(float x) const override {
    return flushSubnormal(float(1.0 / double(flushSubnormal(x))));
  }
  float rsqrtApproxFtz(float x) const override {
    double d = flushSubnormal(x);
    if (d == 0.0)
      return std::copysign(INFINITY, float(d));
    return flushSubnormal(float(1.0 / std::sqrt(d)));
  }
  float ex2ApproxFtz(float x) const override {
    return flushSubnormal(float(std::exp2(double(flushSubnormal(x)))));
  }
};

/// IEEE minNum/maxNum, or NaN-propagating min/max; -0 orders below +0.
float minMax(bool isMax, bool propagateNaN, float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    if (propagateNaN)
      return NAN;
    return std::isnan(a) ? b : a;
  }
  if (a == 0.0f && b == 0.0f)
    return isMax ? (std::signbit(a) ? b : a) : (std::signbit(a) ? a : b);
  return isMax ? (a > b ? a : b) : (a < b ? a : b);
}

float saturate01(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }

struct Instr {
  Op op;
  DType type;
  DType roundTo;
  uint32_t bits;
  int index, field;
  int args[3];
  bool perElement;
};

/// A flattened DAG. Leaves the tape cannot evaluate itself (loads, scalars,
/// dims, fold values, placeholders) are filled in by the caller's `leaf`.
class Tape {
public:
  /// Appends `e` and its operands; returns its slot. Fold values are leaves
  /// (their argument is the fold input, evaluated in another phase).
  int add(const Expr &e, const KernelDef *def) {
    const ExprNode *n = e.get();
    auto it = slots.find(n);
    if (it != slots.end())
      return it->second;
    Instr in{};
    in.op = n->op;
    in.type = n->type;
    in.roundTo = n->roundTo;
    in.bits = n->bits;
    in.index = n->index;
    in.field = n->field;
    in.perElement = false;
    in.args[0] = in.args[1] = in.args[2] = -1;
    if (n->op != Op::FoldValue) {
      for (size_t i = 0; i < n->args.size(); ++i) {
        in.args[i] = add(n->args[i], def);
        in.perElement |= instrs[in.args[i]].perElement;
      }
    }
    // Combiner bodies (no def) have no loads.
    if (def ? variesAlongRow(*def, *n)
            : n->op == Op::Load || n->op == Op::ColIndex)
      in.perElement = true;
    int slot = int(instrs.size());
    instrs.push_back(in);
    slots[n] = slot;
    return slot;
  }

  std::vector<Instr> instrs;
  llvm::DenseMap<const ExprNode *, int> slots;
};

/// One phase of the main program: what to run per row, what per column.
struct Phase {
  std::vector<int> rowInstrs, elemInstrs;
};

Phase makePhase(const Tape &tape, llvm::ArrayRef<int> roots) {
  std::vector<bool> needed(tape.instrs.size(), false);
  for (int r : roots)
    needed[r] = true;
  // Instructions are in topological order, so one backward sweep marks the
  // cone.
  for (int i = int(tape.instrs.size()) - 1; i >= 0; --i) {
    if (!needed[i])
      continue;
    for (int a : tape.instrs[i].args)
      if (a >= 0)
        needed[a] = true;
  }
  Phase p;
  for (size_t i = 0; i < tape.instrs.size(); ++i)
    if (needed[i])
      (tape.instrs[i].perElement ? p.elemInstrs : p.rowInstrs).push_back(int(i));
  return p;
}

} // namespace

const ApproxUnit &bitfold::dsl::correctlyRoundedApprox() {
  static CorrectlyRoundedApprox unit;
  return unit;
}

uint16_t bitfold::dsl::floatToBf16Bits(float v) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  if (std::isnan(v))
    return 0x7FFF;
  uint32_t lsb = (b >> 16) & 1;
  b += 0x7FFF + lsb;
  return uint16_t(b >> 16);
}

float bitfold::dsl::bf16BitsToFloat(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

uint16_t bitfold::dsl::floatToHalfBits(float v) {
  if (std::isnan(v))
    return 0x7FFF;
  _Float16 h = static_cast<_Float16>(v); // RNE in the default FP environment.
  return std::bit_cast<uint16_t>(h);
}

float bitfold::dsl::halfBitsToFloat(uint16_t b) {
  return static_cast<float>(std::bit_cast<_Float16>(b));
}

float bitfold::dsl::roundTo(DType t, float v) {
  switch (t) {
  case DType::BF16:
    return std::isnan(v) ? v : bf16BitsToFloat(floatToBf16Bits(v));
  case DType::F16:
    return std::isnan(v) ? v : halfBitsToFloat(floatToHalfBits(v));
  case DType::F8E4M3FN:
    return roundThroughF8E4M3FN(v);
  case DType::F8E5M2:
    return roundThroughF8E5M2(v);
  case DType::I8:
    return roundThroughI8(v);
  default:
    return v;
  }
}

float bitfold::dsl::expLibdevice(float a, const ApproxUnit &approx) {
  // The instruction sequence nvcc emits for __nv_expf (ApproxTables.h).
  return bitfold::dsl::approx::expfSequence(
      a, [&](float r) { return approx.ex2ApproxFtz(r); });
}

namespace {

/// What an op's evaluation needs besides its operands.
struct OpContext {
  const ApproxUnit &approx;
  uint32_t bits;  ///< Const.
  DType roundTo;  ///< Round.
};

float leafValue() { return NAN; }

// The approximate ops, one function each, so that a hardware model can
// replace any one of them.
float evalRcpApproxFtz(float x, const OpContext &ctx) {
  return ctx.approx.rcpApproxFtz(x);
}
float evalRsqrtApproxFtz(float x, const OpContext &ctx) {
  return ctx.approx.rsqrtApproxFtz(x);
}
float evalEx2ApproxFtz(float x, const OpContext &ctx) {
  return ctx.approx.ex2ApproxFtz(x);
}
float evalExpLibdevice(float x, const OpContext &ctx) {
  return expLibdevice(x, ctx.approx);
}
float evalTanhLibdevice(float x, const OpContext &ctx) {
  return libdevice::tanhfSequence(
      x, [&](float v) { return ctx.approx.ex2ApproxFtz(v); },
      [&](float v) { return ctx.approx.rcpApproxFtz(v); });
}
float evalErfLibdevice(float x, const OpContext &ctx) {
  return libdevice::erffSequence(
      x, [&](float v) { return ctx.approx.ex2ApproxFtz(v); });
}

/// The index ops (dsl/Ops.def): an i32 travels in its f32 slot bit for bit.
float fromInt(int32_t v) { return std::bit_cast<float>(v); }
int32_t toInt(float v) { return std::bit_cast<int32_t>(v); }

float evalInt(Op op, const float *a) {
  int32_t x = toInt(a[0]), y = toInt(a[1]);
  uint32_t ux = uint32_t(x), uy = uint32_t(y);
  bool overflow = x == INT32_MIN && y == -1;
  switch (op) {
  case Op::IAdd: return fromInt(int32_t(ux + uy));
  case Op::ISub: return fromInt(int32_t(ux - uy));
  case Op::IMul: return fromInt(int32_t(ux * uy));
  case Op::IDiv: return fromInt(y == 0 ? 0 : overflow ? INT32_MIN : x / y);
  case Op::IRem: return fromInt(y == 0 ? x : overflow ? 0 : x % y);
  case Op::ICmpLT: return x < y;
  case Op::ICmpLE: return x <= y;
  case Op::ICmpGT: return x > y;
  case Op::ICmpGE: return x >= y;
  case Op::ICmpEQ: return x == y;
  case Op::ICmpNE: return x != y;
  case Op::IToF: return float(x); // round to nearest even
  default: return NAN;
  }
}

/// The table's evaluation hooks (dsl/Ops.def).
float evalOp(Op op, const float *a, const OpContext &ctx) {
  switch (op) {
#define BITFOLD_DSL_OP(Name, Spelling, Arity, Types, Exact, ...)               \
  case Op::Name:                                                               \
    return __VA_ARGS__;
#include "dsl/Ops.def"
  }
  return NAN;
}

float evalInstr(const Instr &in, const float *v, const ApproxUnit &approx) {
  float a[3];
  for (int i = 0; i < 3; ++i)
    a[i] = in.args[i] >= 0 ? v[in.args[i]] : NAN;
  return evalOp(in.op, a, OpContext{approx, in.bits, in.roundTo});
}

/// A combiner body compiled to a tape over its placeholders.
struct BodyTape {
  Tape tape;
  std::vector<int> roots;
  std::vector<int> placeholderSlots; // (slot, placeholder index) pairs, flat.

  void build(const State &s) {
    for (const Expr &e : s.fields)
      roots.push_back(tape.add(e, nullptr));
    for (size_t i = 0; i < tape.instrs.size(); ++i)
      if (tape.instrs[i].op == Op::Placeholder) {
        placeholderSlots.push_back(int(i));
        placeholderSlots.push_back(tape.instrs[i].index);
      }
  }

  void run(const float *args, float *out, std::vector<float> &vals,
           const ApproxUnit &approx) const {
    vals.resize(tape.instrs.size());
    for (size_t i = 0; i + 1 < placeholderSlots.size(); i += 2)
      vals[placeholderSlots[i]] = args[placeholderSlots[i + 1]];
    for (size_t i = 0; i < tape.instrs.size(); ++i)
      if (tape.instrs[i].op != Op::Placeholder)
        vals[i] = evalInstr(tape.instrs[i], vals.data(), approx);
    for (size_t i = 0; i < roots.size(); ++i)
      out[i] = vals[roots[i]];
  }
};

float loadElement(const HostTensor &t, int64_t row, int64_t col) {
  const char *base = static_cast<const char *>(t.data);
  int64_t i = t.offset(row, col);
  switch (t.dtype) {
  case DType::F32: {
    float f;
    std::memcpy(&f, base + i * 4, 4);
    return f;
  }
  case DType::BF16:
  case DType::F16: {
    uint16_t h;
    std::memcpy(&h, base + i * 2, 2);
    return t.dtype == DType::BF16 ? bf16BitsToFloat(h) : halfBitsToFloat(h);
  }
  case DType::F8E4M3FN:
    return f8E4M3FNBitsToFloat(uint8_t(base[i]));
  case DType::F8E5M2:
    return f8E5M2BitsToFloat(uint8_t(base[i]));
  case DType::I8:
    return float(int8_t(base[i]));
  case DType::I32: { // an index value: its bits, as the tape holds i32
    int32_t v;
    std::memcpy(&v, base + i * 4, 4);
    return std::bit_cast<float>(v);
  }
  default:
    return NAN;
  }
}

void storeElement(const HostTensor &t, int64_t row, int64_t col, float v) {
  char *base = static_cast<char *>(t.data);
  int64_t i = t.offset(row, col);
  switch (t.dtype) {
  case DType::F32:
    std::memcpy(base + i * 4, &v, 4);
    return;
  case DType::BF16: {
    uint16_t h = floatToBf16Bits(v);
    std::memcpy(base + i * 2, &h, 2);
    return;
  }
  case DType::F16: {
    uint16_t h = floatToHalfBits(v);
    std::memcpy(base + i * 2, &h, 2);
    return;
  }
  case DType::F8E4M3FN:
    base[i] = char(floatToF8E4M3FNBits(v));
    return;
  case DType::F8E5M2:
    base[i] = char(floatToF8E5M2Bits(v));
    return;
  case DType::I8:
    base[i] = char(floatToI8(v));
    return;
  default:
    return;
  }
}

using PushFn = llvm::function_ref<void(int64_t col, float *state)>;
using CombineFn = llvm::function_ref<void(float *self, const float *other)>;

/// Applies tree stages to `lanes` (T states of F floats).
void runStages(llvm::ArrayRef<TreeStage> stages, float *lanes, int T, size_t F,
               CombineFn combine) {
  for (const TreeStage &s : stages)
    for (int i = 0; i < T; ++i)
      if (!(i & s.offset) && i + s.offset < T)
        combine(&lanes[i * F], &lanes[(i + s.offset) * F]);
}

} // namespace

void bitfold::dsl::forEachPush(
    const FoldOrder &o, int64_t row, int64_t cols,
    llvm::function_ref<void(int64_t, int, int64_t)> visit) {
  const int V = o.vector, A = o.accumulators;
  const int64_t L = int64_t(o.threads) * o.ctas;
  const bool byElement =
      o.accumulatorMap == FoldOrder::AccumulatorMap::VectorElement;
  int64_t head = 0;
  if (o.alignedVectors) {
    int64_t shift = (row % V) * (cols % V) % V; // (row * cols) % V
    head = std::min<int64_t>(shift ? V - shift : 0, cols);
    for (int64_t e = 0; e < head; ++e)
      visit(V - head + e, 0, e);
  }
  const int64_t body = cols - head;
  const int64_t vectors = o.alignedVectors ? body / V : (body + V - 1) / V;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t v = l, j = 0; v < vectors; v += L, ++j)
      for (int e = 0; e < V; ++e) {
        int64_t c = head + v * V + e;
        if (c >= cols)
          break;
        visit(l, byElement ? e : int(j % A), c);
      }
  for (int64_t c = head + vectors * V; c < cols; ++c)
    visit(c - (head + vectors * V), 0, c); // tail (aligned vectors only)
}

namespace {

/// The finished state of one row's fold.
std::vector<float> foldRow(const FoldOrder &o, llvm::ArrayRef<float> empty,
                           int64_t row, int64_t cols, PushFn push,
                           CombineFn combine) {
  const size_t F = empty.size();
  const int T = o.threads, A = o.accumulators;
  const int64_t L = int64_t(T) * o.ctas;
  std::vector<float> acc(size_t(L) * A * F);
  for (size_t i = 0; i < acc.size(); i += F)
    std::copy(empty.begin(), empty.end(), acc.begin() + i);
  auto at = [&](int64_t lane, int a) { return &acc[(lane * A + a) * F]; };
  forEachPush(o, row, cols,
              [&](int64_t lane, int a, int64_t c) { push(c, at(lane, a)); });
  std::vector<float> lanes(size_t(L) * F);
  for (int64_t l = 0; l < L; ++l) {
    for (int a = 1; a < A; ++a)
      combine(at(l, 0), at(l, a));
    std::copy(at(l, 0), at(l, 0) + F, &lanes[l * F]);
  }
  for (int g = 0; g < o.ctas; ++g)
    runStages(o.stages, &lanes[size_t(g) * T * F], T, F, combine);
  if (o.ctas == 1)
    return std::vector<float>(lanes.begin(), lanes.begin() + F);
  std::vector<float> gather(size_t(T) * F);
  for (size_t i = 0; i < gather.size(); i += F)
    std::copy(empty.begin(), empty.end(), gather.begin() + i);
  for (int g = 0; g < o.ctas; ++g)
    combine(&gather[(g % T) * F], &lanes[size_t(g) * T * F]);
  runStages(o.finalStages, gather.data(), T, F, combine);
  return std::vector<float>(gather.begin(), gather.begin() + F);
}

llvm::Error bindingError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Error checkBinding(const KernelDef &def, const Binding &b) {
  if (b.cols < 1)
    return bindingError(llvm::formatv("cols must be positive, found {0}",
                                      b.cols));
  if (int(b.groupRows.size()) != def.groups ||
      int(b.tensors.size()) != def.groups)
    return bindingError(llvm::formatv(
        "'{0}' serves {1} tensor group(s); the binding has {2} row counts and "
        "{3} tensor lists",
        def.name, def.groups, b.groupRows.size(), b.tensors.size()));
  if (b.dims.size() != def.dims.size())
    return bindingError(llvm::formatv("'{0}' has {1} named dims; {2} given",
                                      def.name, def.dims.size(),
                                      b.dims.size()));
  for (size_t i = 0; i < b.dims.size(); ++i)
    if (b.dims[i] < 1)
      return bindingError(llvm::formatv("dim {0} must be positive, found {1}",
                                        def.dims[i], b.dims[i]));
  if (b.scalars.size() != def.scalars.size())
    return bindingError(llvm::formatv("'{0}' has {1} scalars; {2} given",
                                      def.name, def.scalars.size(),
                                      b.scalars.size()));
  for (int g = 0; g < def.groups; ++g) {
    if (b.tensors[g].size() != def.operands.size())
      return bindingError(llvm::formatv(
          "group {0}: '{1}' has {2} operands; {3} tensors given", g, def.name,
          def.operands.size(), b.tensors[g].size()));
    for (size_t i = 0; i < def.operands.size(); ++i) {
      const OperandDecl &o = def.operands[i];
      const HostTensor &t = b.tensors[g][i];
      int64_t rows = b.groupRows[g];
      int64_t need = rows;
      if (o.map == IndexMap::PerColumn || o.map == IndexMap::Vector)
        need = rows > 0 ? 1 : 0;
      else if (o.map == IndexMap::PerBatch)
        need = (rows + b.dims[o.batchDim] - 1) / b.dims[o.batchDim];
      if (t.dtype != o.dtype)
        return bindingError(llvm::formatv("operand '{0}': expected {1}, found "
                                          "{2}",
                                          o.name, dtypeName(o.dtype),
                                          dtypeName(t.dtype)));
      if (need > 0 && !t.data)
        return bindingError(llvm::formatv("operand '{0}': null data", o.name));
      if (t.rows < need)
        return bindingError(llvm::formatv(
            "operand '{0}': needs {1} rows, has {2}", o.name, need, t.rows));
      if ((o.layout == Layout::ChannelsFirst) != (t.spatial > 0) ||
          (t.spatial > 0 && need % t.spatial != 0))
        return bindingError(llvm::formatv(
            "operand '{0}' is {1}: its view needs {2} (spatial size {3}, "
            "{4} rows)", o.name, layoutName(o.layout),
            t.spatial > 0 ? "no spatial size" : "the spatial size S whose "
            "images make up the rows", t.spatial, need));
      // A per-row operand's row is its one value.
      const int64_t width = storedCols(o, b.cols, b.dims);
      if (need > 1 && t.rowStride < width && t.spatial == 0)
        return bindingError(llvm::formatv(
            "operand '{0}': row stride {1} is below the {2} columns", o.name,
            t.rowStride, b.cols));
    }
  }
  return llvm::Error::success();
}

/// A fold order is the reference's only for its row range.
llvm::Error checkFoldRows(const KernelDef &def, const Binding &b) {
  for (const FoldDecl &f : def.folds)
    for (int64_t rows : b.groupRows)
      if (rows < f.order.minRows || rows > f.order.maxRows)
        return bindingError(llvm::formatv(
            "'{0}': fold order '{1}' is the reference's for {2}..{3} rows; "
            "the binding has {4} (the reference sums in another order)",
            def.name, f.order.name, f.order.minRows, f.order.maxRows, rows));
  return llvm::Error::success();
}

} // namespace

namespace {

/// Runs one program over one binding: the tapes are built once, then every
/// row of every group runs its folds and its outputs.
class Interpreter {
public:
  Interpreter(const KernelDef &def, const Binding &binding,
              const ApproxUnit &approx)
      : def(def), binding(binding), approx(approx) {}

  void run() {
    compile();
    for (group = 0; group < def.groups; ++group)
      for (row = 0; row < binding.groupRows[group]; ++row) {
        for (size_t k = 0; k < def.folds.size(); ++k)
          runFold(k);
        runOutputs();
      }
  }

private:
  struct FoldTapes {
    BodyTape push, combine, finish;
  };

  void compile() {
    for (const FoldDecl &f : def.folds)
      foldInput.push_back(tape.add(f.input, &def));
    outputSlots.assign(def.operands.size(), {});
    std::vector<int> outputRoots;
    for (size_t i = 0; i < def.operands.size(); ++i)
      if (def.operands[i].isOutput)
        for (const Expr &v : outputValues(def.operands[i])) {
          outputSlots[i].push_back(tape.add(v, &def));
          outputRoots.push_back(outputSlots[i].back());
        }
    for (int slot : foldInput)
      foldPhases.push_back(makePhase(tape, {slot}));
    outPhase = makePhase(tape, outputRoots);
    bodies.resize(def.folds.size());
    for (size_t k = 0; k < def.folds.size(); ++k) {
      bodies[k].push.build(def.folds[k].combiner->pushBody());
      bodies[k].combine.build(def.folds[k].combiner->combineBody());
      bodies[k].finish.build(def.folds[k].combiner->finishBody());
    }
    vals.resize(tape.instrs.size());
    foldResults.resize(def.folds.size());
  }

  float evalLeaf(const Instr &in, int64_t c) {
    switch (in.op) {
    case Op::Load: // a per-row input's one value is at column 0
      return loadElement(binding.tensors[group][in.index], operandRow(in.index),
                         def.operands[in.index].map == IndexMap::PerRow ? 0
                                                                        : c);
    case Op::Scalar: return binding.scalars[in.index];
    case Op::Dim: {
      int64_t d = in.index == -1   ? binding.cols
                  : in.index == -2 ? binding.groupRows[group]
                                   : binding.dims[in.index];
      // The i32 form carries its bits, as every index value.
      return in.type == DType::I32 ? std::bit_cast<float>(int32_t(d))
                                   : float(d);
    }
    case Op::FoldValue: return foldResults[in.index][in.field];
    case Op::RowIndex: return std::bit_cast<float>(int32_t(row));
    case Op::ColIndex: return std::bit_cast<float>(int32_t(c));
    case Op::Gather: return gatherElement(in);
    default: return evalInstr(in, vals.data(), approx);
    }
  }

  /// An input at a computed column; NaN outside the row (a vector's D).
  float gatherElement(const Instr &in) {
    int32_t c = std::bit_cast<int32_t>(vals[in.args[0]]);
    if (c < 0 || c >= storedCols(def.operands[in.index], binding.cols,
                                 binding.dims))
      return std::bit_cast<float>(0x7fc00000u);
    return loadElement(binding.tensors[group][in.index], operandRow(in.index),
                       c);
  }

  /// The row of input `operand` that the current row reads (its index map).
  int64_t operandRow(int operand) const {
    const OperandDecl &o = def.operands[operand];
    return o.map == IndexMap::PerElement || o.map == IndexMap::PerRow ? row
           : o.map == IndexMap::PerColumn || o.map == IndexMap::Vector  ? 0
                                          : row / binding.dims[o.batchDim];
  }

  void runRow(const Phase &p) {
    for (int i : p.rowInstrs)
      vals[i] = evalLeaf(tape.instrs[i], -1);
  }

  void runColumn(const Phase &p, int64_t c) {
    for (int i : p.elemInstrs)
      vals[i] = evalLeaf(tape.instrs[i], c);
  }

  /// The fold's order (foldRow) drives the combiner's push and combine;
  /// finish reads the merged state.
  void runFold(size_t k) {
    const FoldDecl &f = def.folds[k];
    const Combiner &cb = *f.combiner;
    const size_t F = cb.numFields();
    runRow(foldPhases[k]);
    std::vector<float> args(2 * F + 1);
    auto push = [&](int64_t c, float *state) {
      runColumn(foldPhases[k], c);
      std::copy(state, state + F, args.begin());
      args[F] = vals[foldInput[k]];
      bodies[k].push.run(args.data(), state, scratch, approx);
    };
    auto combine = [&](float *self, const float *other) {
      std::copy(self, self + F, args.begin());
      std::copy(other, other + F, args.begin() + F);
      bodies[k].combine.run(args.data(), self, scratch, approx);
    };
    std::vector<float> state =
        foldRow(f.order, cb.emptyState(), row, binding.cols, push, combine);
    foldResults[k].resize(cb.resultNames().size());
    bodies[k].finish.run(state.data(), foldResults[k].data(), scratch, approx);
  }

  void runOutputs() {
    runRow(outPhase);
    // Per-row values need no column: value j of k at column j of the row.
    for (size_t i = 0; i < def.operands.size(); ++i)
      if (def.operands[i].map == IndexMap::PerRow)
        for (size_t j = 0; j < outputSlots[i].size(); ++j)
          storeElement(binding.tensors[group][i], row, int64_t(j),
                       vals[outputSlots[i][j]]);
    for (int64_t c = 0; c < binding.cols; ++c) {
      runColumn(outPhase, c);
      for (size_t i = 0; i < def.operands.size(); ++i)
        if (!outputSlots[i].empty() && def.operands[i].map != IndexMap::PerRow)
          storeElement(binding.tensors[group][i], row, c,
                       vals[outputSlots[i].front()]);
    }
  }

  const KernelDef &def;
  const Binding &binding;
  const ApproxUnit &approx;
  Tape tape;
  std::vector<int> foldInput;
  std::vector<std::vector<int>> outputSlots; ///< per operand, per value.
  std::vector<Phase> foldPhases;
  Phase outPhase;
  std::vector<FoldTapes> bodies;
  std::vector<float> vals, scratch;
  std::vector<std::vector<float>> foldResults;
  int group = 0;
  int64_t row = 0;
};

} // namespace

llvm::Error bitfold::dsl::interpret(const KernelDef &def,
                                    const Binding &binding,
                                    const ApproxUnit &approx) {
  if (llvm::Error e = checkBinding(def, binding))
    return e;
  if (llvm::Error e = checkFoldRows(def, binding))
    return e;
  Interpreter(def, binding, approx).run();
  return llvm::Error::success();
}

float bitfold::dsl::evaluateOp(const ExprNode &n, llvm::ArrayRef<float> args,
                               const ApproxUnit &approx) {
  float a[3] = {NAN, NAN, NAN};
  for (size_t i = 0; i < args.size() && i < 3; ++i)
    a[i] = args[i];
  return evalOp(n.op, a, OpContext{approx, n.bits, n.roundTo});
}
