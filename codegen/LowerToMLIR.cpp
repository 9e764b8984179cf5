//===- codegen/LowerToMLIR.cpp - Row program -> MLIR ----------------------===//
//
// One kernel per (program, shape, config). Everything is unrolled at build
// time (the column count is baked in): the body is straight-line code in one
// block except the guarded stores (scf.if). Per-row values are built once
// (memo by node); per-element values once per element slot of the current
// phase's mapping (memo by node and slot), so a one-pass kernel reuses the
// values its fold loaded.
//
// Exactness: every DSL op becomes exactly one IEEE op or a fixed sequence
// that computes exactly the interpreter's function (dsl/Interp.cpp), with no
// fast-math flags anywhere. The fold evaluates the interpreter's DAG: each
// lane pushes its elements in order, each tree stage updates exactly the
// lanes whose offset bit is clear, and lane 0's state is broadcast.
//
//===----------------------------------------------------------------------===//

#include "codegen/Lowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;
using dsl::DType;
using dsl::ExprNode;
using DOp = dsl::Op;

void codegen::loadCodegenDialects(MLIRContext &ctx) {
  ctx.loadDialect<arith::ArithDialect, scf::SCFDialect, cf::ControlFlowDialect,
                  LLVM::LLVMDialect, NVVM::NVVMDialect>();
}

namespace {

/// One memory access of a phase: `width` contiguous elements at column `col`
/// (already clamped to 0 where out of range) of the current row.
struct Access {
  int id = 0;
  int width = 1;
  Value col;     ///< index type, clamped.
  Value inRange; ///< i1, or null when statically in range.
};

// ---------------------------------------------------------------------------
// Static fold knowledge: fields of a virtual lane that are known at compile
// time (a Welford count: it depends only on how many elements the lane saw).
// Evaluated with the interpreter's exact IEEE semantics on the host, and only
// through ops whose result the host computes exactly; an approximate op
// (rcp.approx, ...) or anything data-dependent is unknown.

using Known = std::vector<std::optional<float>>;

Known evalKnown(const dsl::State &body, const Known &args) {
  llvm::DenseMap<const ExprNode *, std::optional<float>> memo;
  std::function<std::optional<float>(const ExprNode *)> ev =
      [&](const ExprNode *n) -> std::optional<float> {
    auto it = memo.find(n);
    if (it != memo.end())
      return it->second;
    std::optional<float> r;
    auto arg = [&](int i) { return ev(n->args[i].get()); };
    switch (n->op) {
    case DOp::Placeholder: r = args[n->index]; break;
    case DOp::Const: r = std::bit_cast<float>(n->bits); break;
    case DOp::Select: {
      std::optional<float> c = arg(0);
      if (c)
        r = *c != 0.0f ? arg(1) : arg(2);
      break;
    }
    default: {
      llvm::SmallVector<float, 3> a;
      for (size_t i = 0; i < n->args.size(); ++i) {
        std::optional<float> v = arg(int(i));
        if (!v) {
          memo[n] = std::nullopt;
          return std::nullopt;
        }
        a.push_back(*v);
      }
      switch (n->op) {
      case DOp::Neg: r = -a[0]; break;
      case DOp::Abs: r = std::fabs(a[0]); break;
      case DOp::Extend: r = a[0]; break;
      case DOp::Add: r = a[0] + a[1]; break;
      case DOp::Sub: r = a[0] - a[1]; break;
      case DOp::Mul: r = a[0] * a[1]; break;
      case DOp::Fma: r = std::fma(a[0], a[1], a[2]); break;
      case DOp::CmpLT: r = a[0] < a[1] ? 1.0f : 0.0f; break;
      case DOp::CmpLE: r = a[0] <= a[1] ? 1.0f : 0.0f; break;
      case DOp::CmpGT: r = a[0] > a[1] ? 1.0f : 0.0f; break;
      case DOp::CmpGE: r = a[0] >= a[1] ? 1.0f : 0.0f; break;
      case DOp::CmpEQ: r = a[0] == a[1] ? 1.0f : 0.0f; break;
      case DOp::CmpNE: r = a[0] != a[1] ? 1.0f : 0.0f; break;
      case DOp::And: r = (a[0] != 0.0f && a[1] != 0.0f) ? 1.0f : 0.0f; break;
      case DOp::Or: r = (a[0] != 0.0f || a[1] != 0.0f) ? 1.0f : 0.0f; break;
      case DOp::Not: r = a[0] == 0.0f ? 1.0f : 0.0f; break;
      default: break; // approximate or not modelled: unknown
      }
    }
    }
    memo[n] = r;
    return r;
  };
  Known out;
  for (const dsl::Expr &e : body.fields)
    out.push_back(ev(e.get()));
  return out;
}

// ---------------------------------------------------------------------------
// Exact rewrites the lowering applies (each proven in docs/design-notes.md,
// "Exact rewrites in codegen").

/// nvcc's reciprocal `r = rcp.approx.ftz(x); fma(r, sub.ftz(-0, fma(x, r, -1)),
/// r)` of a compile-time integer 1 <= x < 2^21 is RN(1/x): rcp.approx is
/// within 1 ulp (PTX ISA), the Newton step's exact value is within 2^-46 of
/// 1/x relatively, and 1/x is at least 2^-25/x away from every rounding
/// midpoint. Returns the node's constant value where the pattern matches.
std::optional<float> nvccReciprocalOfConstant(const ExprNode *n,
                                              llvm::ArrayRef<Value> a) {
  auto isConst = [](const ExprNode *m, uint32_t bits) {
    return m->op == DOp::Const && m->bits == bits;
  };
  if (n->op != DOp::Fma || n->args[0].get() != n->args[2].get())
    return std::nullopt;
  const ExprNode *r = n->args[0].get();
  const ExprNode *e = n->args[1].get();
  if (r->op != DOp::RcpApproxFtz || e->op != DOp::SubFtz ||
      !isConst(e->args[0].get(), 0x80000000u))
    return std::nullopt;
  const ExprNode *f = e->args[1].get();
  if (f->op != DOp::Fma || f->args[0].get() != r->args[0].get() ||
      f->args[1].get() != r || !isConst(f->args[2].get(), 0xbf800000u))
    return std::nullopt;
  auto call = a[0].getDefiningOp<LLVM::CallIntrinsicOp>();
  if (!call)
    return std::nullopt;
  auto cst = call.getOperand(0).getDefiningOp<arith::ConstantOp>();
  if (!cst)
    return std::nullopt;
  float x = llvm::cast<FloatAttr>(cst.getValue()).getValue().convertToFloat();
  if (!(x >= 1.0f && x < 2097152.0f) || x != std::floor(x))
    return std::nullopt;
  return 1.0f / x;
}

/// True when the f32 constant `bits` is exactly a value of `t` (BF16/F16).
bool exactIn(uint32_t bits, DType t) {
  llvm::APFloat v(std::bit_cast<float>(bits));
  bool losesInfo = false;
  llvm::APFloat::opStatus s = v.convert(
      t == DType::BF16 ? llvm::APFloat::BFloat() : llvm::APFloat::IEEEhalf(),
      llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return s == llvm::APFloat::opOK && !losesInfo && !v.isNaN();
}

/// `round_t(op(x, y))` with op add/sub/mul and x, y exactly values of t
/// (widened t values or t-exact constants) is t's own IEEE op on the narrow
/// values: rounding the exact result to f32 first and then to t gives the
/// same bits whenever 24 >= 2p + 2 (p = 8 for bf16, 11 for f16; Figueroa,
/// "When is double rounding innocuous?", 1995). On sm_90 it is one
/// add/mul.rn.bf16x2 per pair instead of widen, op, cvt.rn per element.
/// bf16 add/mul exist from sm_90 (sm_80 spells them as fma with a 1.0 or
/// -0.0 register, which the PTX audit cannot tell from a contraction), f16
/// ones from sm_53.
struct NarrowArith {
  DOp op;
  const ExprNode *lhs, *rhs; ///< t-typed nodes, or t-exact f32 constants.
};

std::optional<NarrowArith> matchNarrowArith(const ExprNode *n, int smVersion) {
  if (n->op != DOp::Round || (n->roundTo == DType::BF16 && smVersion < 90))
    return std::nullopt;
  const ExprNode *m = n->args[0].get();
  if (m->op != DOp::Add && m->op != DOp::Sub && m->op != DOp::Mul)
    return std::nullopt;
  auto source = [&](const ExprNode *x) -> const ExprNode * {
    if (x->op == DOp::Extend && x->args[0]->type == n->roundTo)
      return x->args[0].get();
    if (x->op == DOp::Const && exactIn(x->bits, n->roundTo))
      return x;
    return nullptr;
  };
  const ExprNode *l = source(m->args[0].get()), *r = source(m->args[1].get());
  if (!l || !r || (l->op == DOp::Const && r->op == DOp::Const))
    return std::nullopt;
  return NarrowArith{m->op, l, r};
}

class KernelBuilder {
public:
  KernelBuilder(MLIRContext &ctx, const dsl::KernelDef &def, const Plan &plan,
                LoweringStats &stats)
      : ctx(ctx), b(&ctx), loc(UnknownLoc::get(&ctx)), def(def), plan(plan),
        stats(stats) {
    f32 = b.getF32Type();
    i1 = b.getI1Type();
    i32 = b.getI32Type();
    i64 = b.getI64Type();
    idx = plan.index64 ? i64 : i32;
    ptrGen = LLVM::LLVMPointerType::get(&ctx, 0);
    ptrGlobal = LLVM::LLVMPointerType::get(&ctx, 1);
    ptrShared = LLVM::LLVMPointerType::get(&ctx, 3);
  }

  OwningOpRef<ModuleOp> build(StringRef entryName);

private:
  // ---- Small builders ----
  Value cF32(float v) {
    return arith::ConstantOp::create(b, loc, f32, b.getF32FloatAttr(v));
  }
  Value cF32Bits(uint32_t bits) { return cF32(std::bit_cast<float>(bits)); }
  Value cIdx(int64_t v) {
    return arith::ConstantOp::create(b, loc, idx, b.getIntegerAttr(idx, v));
  }
  Value cI32(int64_t v) {
    return arith::ConstantOp::create(b, loc, i32, b.getIntegerAttr(i32, v));
  }
  Value cI64(int64_t v) {
    return arith::ConstantOp::create(b, loc, i64, b.getIntegerAttr(i64, v));
  }
  Value cBool(bool v) {
    return arith::ConstantOp::create(b, loc, i1, b.getBoolAttr(v));
  }
  Value toIdx(Value v) { // from i32 or i64 (non-negative)
    if (v.getType() == idx)
      return v;
    if (idx == i64)
      return arith::ExtUIOp::create(b, loc, i64, v);
    return arith::TruncIOp::create(b, loc, i32, v);
  }
  Value intrinsic(StringRef name, ValueRange args, Type result = {}) {
    auto op = LLVM::CallIntrinsicOp::create(b, loc, result ? result : f32,
                                            b.getStringAttr(name), args);
    return op.getResult(0);
  }
  Value sel(Value c, Value t, Value f) {
    return arith::SelectOp::create(b, loc, c, t, f);
  }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value andI(Value x, Value y) {
    if (!x)
      return y;
    if (!y)
      return x;
    return arith::AndIOp::create(b, loc, x, y);
  }
  Type storageType(DType t) {
    switch (t) {
    case DType::BF16: return b.getBF16Type();
    case DType::F16: return b.getF16Type();
    case DType::I1: return i1;
    default: return f32;
    }
  }

  // ---- Ops ----
  Value emitOp(const ExprNode *n, llvm::ArrayRef<Value> a);
  Value emitNarrowArith(const NarrowArith &m, DType t,
                        llvm::function_ref<Value(const ExprNode *)> valueOf);
  Value minMax(DOp op, Value x, Value y);
  Value expLibdevice(Value x);
  Value saturate(Value x);

  // ---- Values ----
  bool isElem(const ExprNode *n);
  Value rowValue(const ExprNode *n);
  Value elemValue(const ExprNode *n, const Access &acc, int e);
  std::vector<Value> evalBody(const dsl::State &body,
                              llvm::ArrayRef<Value> args);
  std::vector<Value> &loadAccess(int operand, const Access &acc);
  /// Elements one load or store of `operand` moves: at most 16 bytes.
  int pieceElems(int operand, const Access &acc) const {
    return std::min(acc.width,
                    16 / int(dsl::dtypeBytes(def.operands[operand].dtype)));
  }
  /// Address of element `start` of `acc` in `operand`'s row.
  Value pieceAddr(int operand, const Access &acc, int start);

  // ---- Structure ----
  void setupRow(LLVM::LLVMFuncOp fn);
  std::vector<Access> foldAccesses(const FoldPlan &fp);
  std::vector<Access> outputAccesses();
  Access makeAccess(int id, int width, Value col, int64_t minCol,
                    int64_t maxCol, bool threadsIdle, Value threadActive);
  void emitFold(size_t f, const std::vector<Access> &accs);
  void emitOutputs(const std::vector<Access> &accs);
  void newPhase();
  Value sharedBuffer(StringRef name, int64_t floats);
  Value sharedAddr(Value buf, Value index);
  void barrier() { NVVM::Barrier0Op::create(b, loc); }

  MLIRContext &ctx;
  OpBuilder b;
  Location loc;
  const dsl::KernelDef &def;
  const Plan &plan;
  LoweringStats &stats;
  ModuleOp module;
  Type f32, i1, i32, i64, idx, ptrGen, ptrGlobal, ptrShared;

  // Row set-up.
  Value tid, laneInRow /*i32*/, rowInCta /*i32*/, pIdx /*idx*/, rowValid;
  Value groupRowsF;              ///< rows of the row's group (i64).
  std::vector<Value> base;       ///< per operand: ptr<1> to its row start.
  std::vector<Value> dimValues;  ///< i64.
  std::vector<Value> scalarValues;
  std::vector<std::vector<Value>> foldResults;

  llvm::DenseMap<const ExprNode *, bool> elemMemo;
  llvm::DenseMap<const ExprNode *, Value> rowMemo;
  std::map<std::pair<const ExprNode *, int64_t>, Value> elemValues;
  std::map<std::pair<int, int>, std::vector<Value>> loads;
  /// Loaded bf16 values -> their exact f32 widening from the loaded word.
  llvm::DenseMap<Value, Value> widened;
};

// ---------------------------------------------------------------------------
// Ops: one DSL op -> the IEEE op (or the interpreter's exact sequence).

Value KernelBuilder::saturate(Value x) {
  // x > 0 ? (x < 1 ? x : 1) : 0   (NaN -> 0, -0 -> +0), as the interpreter.
  Value inner = sel(cmp(arith::CmpFPredicate::OLT, x, cF32(1.0f)), x, cF32(1.0f));
  return sel(cmp(arith::CmpFPredicate::OGT, x, cF32(0.0f)), inner, cF32(0.0f));
}

Value KernelBuilder::expLibdevice(Value a) {
  // libdevice __nv_expf (ftz off), the sequence of dsl::expLibdevice.
  const float log2eHi = std::bit_cast<float>(uint32_t(1069066811));
  const float log2eLo = std::bit_cast<float>(uint32_t(849703008));
  const float magic = std::bit_cast<float>(uint32_t(1262485504));
  volatile float step = log2eHi / 252.0f;
  volatile float bias = (-126.0f + magic) + 127.0f;
  volatile float magic127 = magic + 127.0f;
  Value t = LLVM::FMAOp::create(b, loc, a, cF32(step), cF32(0.5f));
  Value s = saturate(t);
  Value j = intrinsic("llvm.nvvm.fma.rm.f", {s, cF32(252.0f), cF32(bias)});
  Value k = arith::NegFOp::create(
      b, loc, arith::SubFOp::create(b, loc, j, cF32(magic127)));
  Value r = LLVM::FMAOp::create(b, loc, a, cF32(log2eHi), k);
  r = LLVM::FMAOp::create(b, loc, a, cF32(log2eLo), r);
  stats.fmaWritten += 3;
  Value jBits = arith::BitcastOp::create(b, loc, i32, j);
  Value sBits = arith::ShLIOp::create(b, loc, jBits, cI32(23));
  Value scale = arith::BitcastOp::create(b, loc, f32, sBits);
  Value e = intrinsic("llvm.nvvm.ex2.approx.ftz.f32", {r});
  return arith::MulFOp::create(b, loc, e, scale);
}

Value KernelBuilder::minMax(DOp op, Value x, Value y) {
  // The interpreter's minMax: NaN handling first, then -0 below +0, then <.
  bool isMax = op == DOp::MaxNum || op == DOp::MaxNaN;
  Value xNaN = cmp(arith::CmpFPredicate::UNO, x, x);
  Value yNaN = cmp(arith::CmpFPredicate::UNO, y, y);
  Value xNeg = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::slt,
      arith::BitcastOp::create(b, loc, i32, x), cI32(0));
  Value bothZero =
      andI(cmp(arith::CmpFPredicate::OEQ, x, cF32(0.0f)),
           cmp(arith::CmpFPredicate::OEQ, y, cF32(0.0f)));
  Value zeroPick = isMax ? sel(xNeg, y, x) : sel(xNeg, x, y);
  Value ordPick = isMax ? sel(cmp(arith::CmpFPredicate::OGT, x, y), x, y)
                        : sel(cmp(arith::CmpFPredicate::OLT, x, y), x, y);
  Value v = sel(bothZero, zeroPick, ordPick);
  if (op == DOp::MinNaN || op == DOp::MaxNaN) {
    Value anyNaN = arith::OrIOp::create(b, loc, xNaN, yNaN);
    return sel(anyNaN, cF32Bits(0x7fc00000u), v);
  }
  return sel(xNaN, y, sel(yNaN, x, v));
}

Value KernelBuilder::emitOp(const ExprNode *n, llvm::ArrayRef<Value> a) {
  using P = arith::CmpFPredicate;
  switch (n->op) {
  case DOp::Const: return cF32Bits(n->bits);
  case DOp::Neg: return arith::NegFOp::create(b, loc, a[0]);
  case DOp::Abs: return LLVM::FAbsOp::create(b, loc, a[0]);
  case DOp::Sqrt: return intrinsic("llvm.nvvm.sqrt.rn.f", {a[0]});
  case DOp::RcpApproxFtz: return intrinsic("llvm.nvvm.rcp.approx.ftz.f", {a[0]});
  case DOp::RsqrtApproxFtz:
    return intrinsic("llvm.nvvm.rsqrt.approx.ftz.f", {a[0]});
  case DOp::Ex2ApproxFtz:
    return intrinsic("llvm.nvvm.ex2.approx.ftz.f32", {a[0]});
  case DOp::ExpLibdevice: return expLibdevice(a[0]);
  case DOp::Saturate: return saturate(a[0]);
  case DOp::Round:
    // cvt.rn through the NVVM intrinsics, not fptrunc: LLVM would fold
    // fptrunc(fmul(fpext, fpext)) into bf16 arithmetic (exact, but then the
    // PTX no longer shows the program's f32 ops and cvt.rn).
    if (n->roundTo == DType::BF16)
      return intrinsic("llvm.nvvm.f2bf16.rn", {a[0]}, b.getBF16Type());
    return arith::BitcastOp::create(
        b, loc, b.getF16Type(),
        intrinsic("llvm.nvvm.f2h.rn", {a[0]}, b.getI16Type()));
  case DOp::Extend:
    if (a[0].getType() == f32)
      return a[0];
    if (auto it = widened.find(a[0]); it != widened.end())
      return it->second;
    if (auto call = a[0].getDefiningOp<LLVM::CallIntrinsicOp>();
        call && call.getIntrin() == "llvm.nvvm.f2bf16.rn") {
      // extend(round_bf16(v)) in one instruction: cvt.rn.bf16x2.f32 d, v, 0
      // puts rnd(v) in the upper half and +0 in the lower one, which are the
      // bits of the widened value. Same rounding (cvt.rn) as f2bf16.rn;
      // ptxas emits both as F2FP (it already packs pairs of f2bf16.rn).
      Value pair = intrinsic("llvm.nvvm.ff2bf16x2.rn",
                             {call.getOperand(0), cF32(0.0f)},
                             VectorType::get({2}, b.getBF16Type()));
      return LLVM::BitcastOp::create(b, loc, f32, pair);
    }
    return arith::ExtFOp::create(b, loc, f32, a[0]);
  // Folded where both operands are constants (APFloat, round to nearest
  // even: the IEEE result), so exact rewrites can see constant arguments.
  case DOp::Add: return b.createOrFold<arith::AddFOp>(loc, a[0], a[1]);
  case DOp::Sub: return b.createOrFold<arith::SubFOp>(loc, a[0], a[1]);
  case DOp::Mul: return b.createOrFold<arith::MulFOp>(loc, a[0], a[1]);
  case DOp::SubFtz: {
    auto op = LLVM::InlineAsmOp::create(
        b, loc, f32, ValueRange{a[0], a[1]}, "sub.rn.ftz.f32 $0, $1, $2;",
        "=f,f,f", /*has_side_effects=*/false, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
        ArrayAttr());
    return op.getResult(0);
  }
  case DOp::Div: return intrinsic("llvm.nvvm.div.rn.f", {a[0], a[1]});
  case DOp::MinNum:
  case DOp::MaxNum:
  case DOp::MinNaN:
  case DOp::MaxNaN: return minMax(n->op, a[0], a[1]);
  case DOp::CmpLT: return cmp(P::OLT, a[0], a[1]);
  case DOp::CmpLE: return cmp(P::OLE, a[0], a[1]);
  case DOp::CmpGT: return cmp(P::OGT, a[0], a[1]);
  case DOp::CmpGE: return cmp(P::OGE, a[0], a[1]);
  case DOp::CmpEQ: return cmp(P::OEQ, a[0], a[1]);
  case DOp::CmpNE: return cmp(P::UNE, a[0], a[1]);
  case DOp::And: return arith::AndIOp::create(b, loc, a[0], a[1]);
  case DOp::Or: return arith::OrIOp::create(b, loc, a[0], a[1]);
  case DOp::Not: return arith::XOrIOp::create(b, loc, a[0], cBool(true));
  case DOp::Fma:
    if (std::optional<float> c = nvccReciprocalOfConstant(n, a))
      return cF32(*c);
    ++stats.fmaWritten;
    return LLVM::FMAOp::create(b, loc, a[0], a[1], a[2]);
  case DOp::Select: return sel(a[0], a[1], a[2]);
  default:
    llvm_unreachable("leaf op reached emitOp");
  }
}

Value KernelBuilder::emitNarrowArith(
    const NarrowArith &m, DType t,
    llvm::function_ref<Value(const ExprNode *)> valueOf) {
  Type ty = storageType(t);
  auto operand = [&](const ExprNode *x) -> Value {
    if (x->op != DOp::Const)
      return valueOf(x);
    llvm::APFloat v(std::bit_cast<float>(x->bits));
    bool losesInfo = false;
    v.convert(llvm::cast<FloatType>(ty).getFloatSemantics(),
              llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    return arith::ConstantOp::create(b, loc, ty, b.getFloatAttr(ty, v));
  };
  Value l = operand(m.lhs), r = operand(m.rhs);
  ++stats.narrowArith;
  switch (m.op) {
  case DOp::Add: return arith::AddFOp::create(b, loc, l, r);
  case DOp::Sub: return arith::SubFOp::create(b, loc, l, r);
  default: return arith::MulFOp::create(b, loc, l, r);
  }
}

// ---------------------------------------------------------------------------
// Values.

bool KernelBuilder::isElem(const ExprNode *n) {
  auto it = elemMemo.find(n);
  if (it != elemMemo.end())
    return it->second;
  bool e = n->op == DOp::Load;
  if (n->op != DOp::FoldValue)
    for (const dsl::Expr &a : n->args)
      e = e || isElem(a.get());
  elemMemo[n] = e;
  return e;
}

Value KernelBuilder::rowValue(const ExprNode *n) {
  auto it = rowMemo.find(n);
  if (it != rowMemo.end())
    return it->second;
  Value v;
  switch (n->op) {
  case DOp::Scalar: v = scalarValues[n->index]; break;
  case DOp::Dim:
    if (n->index == -1)
      v = cF32(float(plan.cols));
    else if (n->index == -2)
      v = arith::SIToFPOp::create(b, loc, f32, groupRowsF);
    else
      v = arith::SIToFPOp::create(b, loc, f32, dimValues[n->index]);
    break;
  case DOp::FoldValue: v = foldResults[n->index][n->field]; break;
  default: {
    if (std::optional<NarrowArith> m = matchNarrowArith(n, plan.smVersion)) {
      v = emitNarrowArith(*m, n->roundTo,
                          [&](const ExprNode *x) { return rowValue(x); });
      break;
    }
    llvm::SmallVector<Value, 3> args;
    for (const dsl::Expr &a : n->args)
      args.push_back(rowValue(a.get()));
    v = emitOp(n, args);
  }
  }
  rowMemo[n] = v;
  return v;
}

Value KernelBuilder::pieceAddr(int operand, const Access &acc, int start) {
  Value col =
      start ? arith::AddIOp::create(b, loc, acc.col, cIdx(start)) : acc.col;
  return LLVM::GEPOp::create(b, loc, ptrGlobal,
                             storageType(def.operands[operand].dtype),
                             base[operand], ValueRange{col});
}

std::vector<Value> &KernelBuilder::loadAccess(int operand, const Access &acc) {
  auto key = std::make_pair(operand, acc.id);
  auto it = loads.find(key);
  if (it != loads.end())
    return it->second;
  DType dt = def.operands[operand].dtype;
  Type elemTy = storageType(dt);
  int bytes = int(dsl::dtypeBytes(dt));
  int piece = pieceElems(operand, acc);
  std::vector<Value> out;
  for (int start = 0; start < acc.width; start += piece) {
    Value addr = pieceAddr(operand, acc, start);
    if (piece == 1) {
      out.push_back(LLVM::LoadOp::create(b, loc, elemTy, addr, bytes));
      continue;
    }
    if (dt == DType::BF16) {
      // bf16 pairs as 32-bit words; widening is then one shl (low half) or
      // one and (high half), where extracting the high half first costs a
      // prmt. Both are exact: the bf16 bits become the f32's upper half.
      auto wordsTy = VectorType::get({piece / 2}, i32);
      Value words = LLVM::LoadOp::create(b, loc, wordsTy, addr, piece * bytes);
      for (int e = 0; e < piece; ++e) {
        Value w = LLVM::ExtractElementOp::create(b, loc, words, cI32(e / 2));
        Value hi16 = w;
        if (e % 2)
          hi16 = arith::ShRUIOp::create(b, loc, w, cI32(16));
        Value v = arith::BitcastOp::create(
            b, loc, elemTy,
            arith::TruncIOp::create(b, loc, b.getI16Type(), hi16));
        Value wide;
        if (e % 2)
          wide = arith::AndIOp::create(b, loc, w, cI32(int32_t(0xffff0000u)));
        else
          wide = arith::ShLIOp::create(b, loc, w, cI32(16));
        widened[v] = arith::BitcastOp::create(b, loc, f32, wide);
        out.push_back(v);
      }
      continue;
    }
    auto vecTy = VectorType::get({piece}, elemTy);
    Value vec = LLVM::LoadOp::create(b, loc, vecTy, addr, piece * bytes);
    for (int e = 0; e < piece; ++e)
      out.push_back(LLVM::ExtractElementOp::create(b, loc, vec, cI32(e)));
  }
  return loads[key] = std::move(out);
}

Value KernelBuilder::elemValue(const ExprNode *n, const Access &acc, int e) {
  if (!isElem(n))
    return rowValue(n);
  auto slot = [&](int el) { return std::make_pair(n, int64_t(acc.id) * 64 + el); };
  auto key = slot(e);
  auto it = elemValues.find(key);
  if (it != elemValues.end())
    return it->second;
  Value v;
  if (n->op == DOp::Load) {
    v = loadAccess(n->index, acc)[e];
  } else if (std::optional<NarrowArith> m = matchNarrowArith(n, plan.smVersion)) {
    v = emitNarrowArith(*m, n->roundTo, [&](const ExprNode *x) {
      return elemValue(x, acc, e);
    });
  } else if (n->op == DOp::Round && e % 2 == 0 && e + 1 < acc.width) {
    // Elements e and e+1 in one cvt.rn.{bf16,f16}x2.f32 (the same rounding
    // per element), so bf16x2/f16x2 consumers get both halves of one
    // register without a repack.
    Value lo = elemValue(n->args[0].get(), acc, e);
    Value hi = elemValue(n->args[0].get(), acc, e + 1);
    Type ty = storageType(n->roundTo);
    Value pair = intrinsic(n->roundTo == DType::BF16 ? "llvm.nvvm.ff2bf16x2.rn"
                                                      : "llvm.nvvm.ff2f16x2.rn",
                           {hi, lo}, VectorType::get({2}, ty));
    v = LLVM::ExtractElementOp::create(b, loc, pair, cI32(0));
    elemValues[slot(e + 1)] =
        LLVM::ExtractElementOp::create(b, loc, pair, cI32(1));
  } else {
    llvm::SmallVector<Value, 3> args;
    for (const dsl::Expr &a : n->args)
      args.push_back(elemValue(a.get(), acc, e));
    v = emitOp(n, args);
  }
  elemValues[key] = v;
  return v;
}

std::vector<Value> KernelBuilder::evalBody(const dsl::State &body,
                                           llvm::ArrayRef<Value> args) {
  llvm::DenseMap<const ExprNode *, Value> memo;
  std::function<Value(const ExprNode *)> eval = [&](const ExprNode *n) {
    auto it = memo.find(n);
    if (it != memo.end())
      return it->second;
    Value v;
    if (n->op == DOp::Placeholder) {
      v = args[n->index];
    } else {
      llvm::SmallVector<Value, 3> a;
      for (const dsl::Expr &e : n->args)
        a.push_back(eval(e.get()));
      v = emitOp(n, a);
    }
    memo[n] = v;
    return v;
  };
  std::vector<Value> out;
  for (const dsl::Expr &e : body.fields)
    out.push_back(eval(e.get()));
  return out;
}

// ---------------------------------------------------------------------------
// Structure.

Value KernelBuilder::sharedBuffer(StringRef name, int64_t floats) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(module.getBody());
  auto arrTy = LLVM::LLVMArrayType::get(f32, floats);
  LLVM::GlobalOp::create(b, loc, arrTy, /*isConstant=*/false,
                         LLVM::Linkage::Internal, name, Attribute(),
                         /*alignment=*/16, /*addrSpace=*/3);
  return Value();
}

Value KernelBuilder::sharedAddr(Value buf, Value index) {
  return LLVM::GEPOp::create(b, loc, ptrShared, f32, buf, ValueRange{index});
}

void KernelBuilder::newPhase() {
  elemValues.clear();
  loads.clear();
  // Keep the re-read: an empty asm that clobbers memory stops LLVM from
  // forwarding the first pass's loads into the second.
  LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{}, "",
                            "~{memory}", /*has_side_effects=*/true,
                            /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

void KernelBuilder::setupRow(LLVM::LLVMFuncOp fn) {
  Block *entry = &fn.getBody().front();
  const int G = def.groups, N = int(def.operands.size());
  const TileConfig &c = plan.config;
  auto arg = [&](int i) { return entry->getArgument(i); };
  const spec::KernelABI abi = spec::KernelABI::of(def);

  tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value cta = NVVM::BlockIdXOp::create(b, loc, i32);
  int logP = std::countr_zero(unsigned(c.threadsPerRow));
  laneInRow = arith::AndIOp::create(b, loc, tid, cI32(c.threadsPerRow - 1));
  rowInCta = arith::ShRUIOp::create(b, loc, tid, cI32(logP));
  pIdx = toIdx(laneInRow);
  Value row = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i64, cta),
                            cI64(c.rowsPerCta)),
      arith::ExtUIOp::create(b, loc, i64, rowInCta));

  // Groups: rows of group 0 first.
  std::vector<Value> groupStart{cI64(0)};
  Value total = arg(abi.groupRows(0));
  for (int g = 1; g < G; ++g) {
    groupStart.push_back(total);
    total = arith::AddIOp::create(b, loc, total, arg(abi.groupRows(g)));
  }
  rowValid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, row, total);
  // Rows past the end compute on the last row (never stored), so every
  // thread reaches every barrier and shuffle.
  Value last = arith::SubIOp::create(b, loc, total, cI64(1));
  Value rowC = sel(rowValid, row, last);
  std::vector<Value> inGroup(G);
  for (int g = 1; g < G; ++g)
    inGroup[g] = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, rowC,
                                       groupStart[g]);
  auto pick = [&](auto valueOf) {
    Value v = valueOf(0);
    for (int g = 1; g < G; ++g)
      v = sel(inGroup[g], valueOf(g), v);
    return v;
  };
  Value start = pick([&](int g) { return groupStart[g]; });
  Value local = arith::SubIOp::create(b, loc, rowC, start);
  groupRowsF = pick([&](int g) { return arg(abi.groupRows(g)); });
  for (size_t d = 0; d < def.dims.size(); ++d)
    dimValues.push_back(arg(abi.dim(int(d))));
  for (size_t s = 0; s < def.scalars.size(); ++s)
    scalarValues.push_back(arg(abi.scalar(int(s))));

  for (int i = 0; i < N; ++i) {
    const dsl::OperandDecl &o = def.operands[i];
    Value ptr = pick([&](int g) { return arg(abi.pointer(g, i)); });
    Value stride = pick([&](int g) { return arg(abi.rowStride(g, i)); });
    Value g1 = LLVM::AddrSpaceCastOp::create(b, loc, ptrGlobal, ptr);
    Value rowOff;
    switch (o.map) {
    case dsl::IndexMap::PerElement:
      rowOff = arith::MulIOp::create(b, loc, toIdx(local), toIdx(stride));
      break;
    case dsl::IndexMap::PerBatch: {
      Value batch =
          arith::DivUIOp::create(b, loc, local, dimValues[o.batchDim]);
      rowOff = arith::MulIOp::create(b, loc, toIdx(batch), toIdx(stride));
      break;
    }
    case dsl::IndexMap::PerColumn: rowOff = cIdx(0); break;
    }
    base.push_back(LLVM::GEPOp::create(b, loc, ptrGlobal,
                                       storageType(o.dtype), g1,
                                       ValueRange{rowOff}));
  }
}

Access KernelBuilder::makeAccess(int id, int width, Value col, int64_t minCol,
                                 int64_t maxCol, bool threadsIdle,
                                 Value threadActive) {
  Access a;
  a.id = id;
  a.width = width;
  const int64_t D = plan.cols;
  if (maxCol < D && !threadsIdle) {
    a.col = col;
    return a;
  }
  Value in = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, col,
                                   cIdx(D));
  if (threadsIdle)
    in = andI(in, threadActive);
  (void)minCol;
  a.inRange = in;
  a.col = sel(in, col, cIdx(0));
  return a;
}

std::vector<Access> KernelBuilder::foldAccesses(const FoldPlan &fp) {
  // Chunk (hi, m): columns (A * (p + Pf * hi) + T * m) * V + [0, A * V).
  std::vector<Access> accs;
  const int64_t D = plan.cols;
  const int chunk = fp.A * fp.V, perChunk = chunk / fp.access;
  bool idle = plan.config.threadsPerRow > fp.Pf;
  Value active;
  if (idle)
    active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, pIdx,
                                   cIdx(fp.Pf));
  Value pCol = arith::MulIOp::create(b, loc, pIdx, cIdx(chunk));
  for (int hi = 0; hi < fp.k / fp.A; ++hi)
    for (int64_t m = 0; m < fp.reps; ++m)
      for (int j = 0; j < perChunk; ++j) {
        int id = int((hi * fp.reps + m) * perChunk + j);
        int64_t cs = (int64_t(fp.A) * fp.Pf * hi + fp.T * m) * fp.V +
                     int64_t(j) * fp.access;
        if (cs >= D) {
          accs.push_back(Access{id, 0, Value(), Value()}); // never in range
          continue;
        }
        Value col = arith::AddIOp::create(b, loc, pCol, cIdx(cs));
        accs.push_back(makeAccess(id, fp.access, col, cs,
                                  cs + int64_t(chunk) * (fp.Pf - 1), idle,
                                  active));
      }
  return accs;
}

std::vector<Access> KernelBuilder::outputAccesses() {
  std::vector<Access> accs;
  const int64_t D = plan.cols;
  const int P = plan.config.threadsPerRow, W = plan.config.vectorElems;
  Value pCol = arith::MulIOp::create(b, loc, pIdx, cIdx(W));
  for (int64_t j = 0; j < plan.outChunks; ++j) {
    int64_t cs = int64_t(P) * W * j;
    if (cs >= D)
      continue;
    Value col = arith::AddIOp::create(b, loc, pCol, cIdx(cs));
    accs.push_back(makeAccess(int(j), W, col, cs, cs + int64_t(W) * (P - 1),
                              false, Value()));
  }
  return accs;
}

void KernelBuilder::emitFold(size_t f, const std::vector<Access> &accs) {
  const FoldPlan &fp = plan.folds[f];
  const dsl::FoldDecl &decl = def.folds[f];
  const dsl::Combiner &cb = *decl.combiner;
  const int F = int(cb.numFields());
  const int chunk = fp.A * fp.V, perChunk = chunk / fp.access;
  const int P = plan.config.threadsPerRow, R = plan.config.rowsPerCta;

  // Lane L = lo + A * hi of this thread; initial state: empty.
  std::vector<std::vector<Value>> st(fp.k);
  for (auto &s : st)
    for (float v : cb.emptyState())
      s.push_back(cF32(v));

  // Pushes: lane (lo, hi) pushes vectors m = 0, 1, ..., elements in order.
  for (int hi = 0; hi < fp.k / fp.A; ++hi)
    for (int lo = 0; lo < fp.A; ++lo) {
      std::vector<Value> &s = st[lo + fp.A * hi];
      for (int64_t m = 0; m < fp.reps; ++m)
        for (int e = 0; e < fp.V; ++e) {
          int off = lo * fp.V + e;
          const Access &a =
              accs[(hi * fp.reps + m) * perChunk + off / fp.access];
          if (!a.col)
            continue; // never in range
          Value x = elemValue(decl.input.get(), a, off % fp.access);
          std::vector<Value> args = s;
          args.push_back(x);
          std::vector<Value> next = evalBody(cb.pushBody(), args);
          if (a.inRange)
            for (int i = 0; i < F; ++i)
              next[i] = sel(a.inRange, next[i], s[i]);
          s = std::move(next);
        }
    }

  // Static knowledge per virtual lane (the interpreter's lane states where
  // the host can compute them exactly) and liveness: which lanes' states
  // still reach lane 0's final state. A register that holds, in every
  // thread where its lane is live, the same known value becomes that
  // constant (a Welford count): no shuffle, and its uses (n > 0, rcp(n))
  // depend on no data. Threads where the lane is dead compute a value
  // nobody reads, so nothing observable changes.
  const int T = fp.T;
  std::vector<Known> known(T);
  for (int t = 0; t < T; ++t) {
    for (float v : cb.emptyState())
      known[t].push_back(v);
    for (int64_t v = t; v * fp.V < plan.cols; v += T)
      for (int e = 0; e < fp.V && v * fp.V + e < plan.cols; ++e) {
        Known args = known[t];
        args.push_back(std::nullopt);
        known[t] = evalKnown(cb.pushBody(), args);
      }
  }
  const size_t nStages = fp.stages.size();
  auto updated = [&](int t, int o) { return !(t & o) && t + o < T; };
  // live[s]: lanes live before stage s (live[nStages]: after the last).
  std::vector<std::vector<bool>> live(nStages + 1, std::vector<bool>(T));
  live[nStages][0] = true;
  for (size_t si = nStages; si-- > 0;) {
    int o = fp.stages[si].offset;
    for (int t = 0; t < T; ++t)
      if (live[si + 1][t]) {
        live[si][t] = true;
        if (updated(t, o))
          live[si][t + o] = true;
      }
  }
  auto laneOf = [&](int p, int L) {
    int lo = L % fp.A, hi = L / fp.A;
    return lo + fp.A * (p + fp.Pf * hi);
  };
  auto substitute = [&](size_t point) {
    for (int L = 0; L < fp.k; ++L)
      for (int i = 0; i < F; ++i) {
        std::optional<uint32_t> bits;
        bool ok = true, any = false;
        for (int p = 0; p < fp.Pf && ok; ++p) {
          int t = laneOf(p, L);
          if (t >= T || !live[point][t])
            continue;
          any = true;
          if (!known[t][i]) {
            ok = false;
            break;
          }
          uint32_t bt = std::bit_cast<uint32_t>(*known[t][i]);
          if (bits && *bits != bt)
            ok = false;
          bits = bt;
        }
        if (ok && any)
          st[L][i] = cF32Bits(*bits);
      }
  };
  auto isConst = [](Value v) {
    return bool(v.getDefiningOp<arith::ConstantOp>());
  };
  // A stage's select keeps a thread's old state where its lane is not
  // updated; not needed when every such lane of the slot is dead after it.
  auto needKeep = [&](size_t si, int L, int q) {
    int o = fp.stages[si].offset;
    for (int p = 0; p < plan.config.threadsPerRow; ++p) {
      if (!(p & q))
        continue;
      if (p >= fp.Pf)
        continue; // idle threads hold no lane of the fold
      int t = laneOf(p, L);
      if (t < T && live[si + 1][t])
        return true;
    }
    (void)o;
    return false;
  };
  substitute(0);

  auto combineInto = [&](std::vector<Value> &self,
                         const std::vector<Value> &other, Value cond) {
    std::vector<Value> args = self;
    args.insert(args.end(), other.begin(), other.end());
    std::vector<Value> r = evalBody(cb.combineBody(), args);
    for (int i = 0; i < F; ++i)
      self[i] = cond ? sel(cond, r[i], self[i]) : r[i];
  };

  Value exchange;
  if (fp.needsShared()) {
    std::string name = "bf_exchange_" + std::to_string(f);
    sharedBuffer(name, int64_t(R) * P * fp.k * F);
    exchange = LLVM::AddressOfOp::create(b, loc, ptrShared, name);
  }
  Value rowI32 = rowInCta;
  auto slot = [&](Value thread, int L, int field) {
    // ((row * P + thread) * k + L) * F + field, in i32.
    Value v = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, rowI32, cI32(P)), thread);
    v = arith::MulIOp::create(b, loc, v, cI32(fp.k * F));
    return arith::AddIOp::create(b, loc, v, cI32(L * F + field));
  };

  for (size_t si = 0; si < nStages; ++si) {
    const StagePlan &sp = fp.stages[si];
    switch (sp.where) {
    case StagePlan::RegisterLo: {
      int o = sp.threadOffset;
      for (int hi = 0; hi < fp.k / fp.A; ++hi)
        for (int lo = 0; lo + o < fp.A; ++lo)
          if (!(lo & o))
            combineInto(st[lo + fp.A * hi], st[lo + o + fp.A * hi], Value());
      break;
    }
    case StagePlan::RegisterHi: {
      int m = sp.threadOffset;
      for (int hi = 0; hi + m < fp.k / fp.A; ++hi)
        if (!(hi & m))
          for (int lo = 0; lo < fp.A; ++lo)
            combineInto(st[lo + fp.A * hi], st[lo + fp.A * (hi + m)], Value());
      break;
    }
    case StagePlan::Shuffle: {
      int q = sp.threadOffset;
      Value clear = arith::CmpIOp::create(
          b, loc, arith::CmpIPredicate::eq,
          arith::AndIOp::create(b, loc, laneInRow, cI32(q)), cI32(0));
      for (int L = 0; L < fp.k; ++L) {
        std::vector<Value> other;
        for (int i = 0; i < F; ++i)
          other.push_back(isConst(st[L][i])
                              ? st[L][i] // the same in every thread
                              : NVVM::ShflOp::create(
                                    b, loc, f32, cI32(-1), st[L][i], cI32(q),
                                    cI32(0x1f), NVVM::ShflKind::down,
                                    UnitAttr()));
        combineInto(st[L], other, needKeep(si, L, q) ? clear : Value());
      }
      break;
    }
    case StagePlan::Shared: {
      int q = sp.threadOffset;
      for (int L = 0; L < fp.k; ++L)
        for (int i = 0; i < F; ++i)
          LLVM::StoreOp::create(b, loc, st[L][i],
                                sharedAddr(exchange, slot(laneInRow, L, i)), 4);
      barrier();
      Value clear = arith::CmpIOp::create(
          b, loc, arith::CmpIPredicate::eq,
          arith::AndIOp::create(b, loc, laneInRow, cI32(q)), cI32(0));
      // Threads with the bit set read themselves (their result is unused).
      Value partner = sel(clear, arith::AddIOp::create(b, loc, laneInRow, cI32(q)),
                          laneInRow);
      for (int L = 0; L < fp.k; ++L) {
        std::vector<Value> other;
        for (int i = 0; i < F; ++i)
          other.push_back(LLVM::LoadOp::create(
              b, loc, f32, sharedAddr(exchange, slot(partner, L, i)), 4));
        combineInto(st[L], other, clear);
      }
      barrier();
      break;
    }
    }
    // The interpreter's stage on the static knowledge, then constants.
    std::vector<Known> next = known;
    for (int t = 0; t < T; ++t)
      if (updated(t, sp.offset)) {
        Known args = known[t];
        args.insert(args.end(), known[t + sp.offset].begin(),
                    known[t + sp.offset].end());
        next[t] = evalKnown(cb.combineBody(), args);
      }
    known = std::move(next);
    substitute(si + 1);
  }

  // Broadcast lane 0's state (thread 0 of the row, L = 0) to the row.
  std::vector<Value> state(F);
  if (P <= 32) {
    Value src = arith::AndIOp::create(
        b, loc, arith::AndIOp::create(b, loc, tid, cI32(31)), cI32(~(P - 1)));
    for (int i = 0; i < F; ++i)
      state[i] = isConst(st[0][i])
                     ? st[0][i]
                     : NVVM::ShflOp::create(b, loc, f32, cI32(-1), st[0][i],
                                            src, cI32(0x1f),
                                            NVVM::ShflKind::idx, UnitAttr());
  } else {
    std::string name = "bf_broadcast_" + std::to_string(f);
    sharedBuffer(name, int64_t(R) * F);
    Value buf = LLVM::AddressOfOp::create(b, loc, ptrShared, name);
    auto at = [&](int i) {
      return sharedAddr(buf, arith::AddIOp::create(
                                 b, loc,
                                 arith::MulIOp::create(b, loc, rowI32, cI32(F)),
                                 cI32(i)));
    };
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                        laneInRow, cI32(0));
    auto ifOp = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
      for (int i = 0; i < F; ++i)
        LLVM::StoreOp::create(b, loc, st[0][i], at(i), 4);
    }
    barrier();
    for (int i = 0; i < F; ++i)
      state[i] = isConst(st[0][i]) ? st[0][i]
                                   : LLVM::LoadOp::create(b, loc, f32, at(i), 4);
  }
  foldResults[f] = evalBody(cb.finishBody(), state);
}

void KernelBuilder::emitOutputs(const std::vector<Access> &accs) {
  // Operands the outputs load (not looking through folds).
  std::set<int> outLoads;
  {
    std::vector<const ExprNode *> stack;
    std::set<const ExprNode *> seen;
    for (const dsl::OperandDecl &o : def.operands)
      if (o.isOutput)
        stack.push_back(o.value.get());
    while (!stack.empty()) {
      const ExprNode *n = stack.back();
      stack.pop_back();
      if (!n || !seen.insert(n).second || n->op == DOp::FoldValue)
        continue;
      if (n->op == DOp::Load)
        outLoads.insert(n->index);
      for (const dsl::Expr &a : n->args)
        stack.push_back(a.get());
    }
  }
  // Accesses go in groups: first every value of the group (so all its loads
  // are issued together), then its stores. A store may alias a later load
  // (an output may be an input), so LLVM keeps loads behind earlier stores;
  // one access at a time left a thread with a single access's loads in
  // flight. The group is bounded by the bytes it loads (registers; 128
  // made ptxas spill a 64-bit address in residual_gate per_batch r2.t64).
  const int64_t budget = 192;
  size_t i = 0;
  while (i < accs.size()) {
    struct Pending {
      const Access *acc;
      std::vector<std::pair<int, std::vector<Value>>> values;
    };
    std::vector<Pending> group;
    int64_t bytes = 0;
    size_t j = i;
    for (; j < accs.size(); ++j) {
      const Access &a = accs[j];
      if (!a.col)
        continue;
      int64_t need = 0;
      for (int op : outLoads)
        if (!loads.count({op, a.id}))
          need += int64_t(a.width) * int64_t(dsl::dtypeBytes(def.operands[op].dtype));
      if (!group.empty() && bytes + need > budget)
        break;
      bytes += need;
      Pending pd{&a, {}};
      for (size_t o = 0; o < def.operands.size(); ++o) {
        const dsl::OperandDecl &od = def.operands[o];
        if (!od.isOutput)
          continue;
        std::vector<Value> v;
        for (int e = 0; e < a.width; ++e)
          v.push_back(elemValue(od.value.get(), a, e));
        pd.values.push_back({int(o), std::move(v)});
      }
      group.push_back(std::move(pd));
    }
    i = j;
    for (Pending &pd : group) {
      const Access &a = *pd.acc;
      Value cond = andI(rowValid, a.inRange);
      auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
      for (auto &[oi, v] : pd.values) {
        DType dt = def.operands[oi].dtype;
        Type elemTy = storageType(dt);
        int bytesPer = int(dsl::dtypeBytes(dt));
        int piece = pieceElems(oi, a);
        for (int start = 0; start < a.width; start += piece) {
          Value addr = pieceAddr(oi, a, start);
          if (piece == 1) {
            LLVM::StoreOp::create(b, loc, v[start], addr, bytesPer);
            continue;
          }
          auto vecTy = VectorType::get({piece}, elemTy);
          Value vec = LLVM::PoisonOp::create(b, loc, vecTy);
          for (int e = 0; e < piece; ++e)
            vec = LLVM::InsertElementOp::create(b, loc, vec, v[start + e],
                                                cI32(e));
          LLVM::StoreOp::create(b, loc, vec, addr, piece * bytesPer);
        }
      }
    }
  }
}

OwningOpRef<ModuleOp> KernelBuilder::build(StringRef entryName) {
  OwningOpRef<ModuleOp> owned = ModuleOp::create(loc);
  module = *owned;
  b.setInsertionPointToEnd(module.getBody());

  // The parameter list of spec/KernelABI.h.
  const spec::KernelABI abi = spec::KernelABI::of(def);
  llvm::SmallVector<Type> params;
  for (int p = 0; p < int(abi.paramCount()); ++p) {
    spec::KernelABI::Param kind = abi.kindOf(p);
    params.push_back(kind == spec::KernelABI::Param::Pointer  ? Type(ptrGen)
                     : kind == spec::KernelABI::Param::Scalar ? Type(f32)
                                                              : Type(i64));
  }
  auto fnTy = LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(&ctx), params);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, entryName, fnTy);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({plan.config.ctaThreads(), 1, 1}));
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);

  if (plan.gridDependencyControl && plan.smVersion >= 90) {
    // Programmatic dependent launch (sm_90+): launched that way, the kernel
    // may start while its predecessor on the stream finishes; it waits here,
    // before touching memory, for the predecessor to complete and flush,
    // then lets its own successor's CTAs be scheduled as SMs free up.
    // Launched normally, both are no-ops.
    NVVM::GriddepcontrolOp::create(b, loc, NVVM::GridDepActionKind::wait);
    NVVM::GriddepcontrolOp::create(b, loc,
                                   NVVM::GridDepActionKind::launch_dependents);
    stats.gridDependencyWait = true;
  }
  setupRow(fn);
  foldResults.resize(def.folds.size());
  std::vector<Access> mapping;
  for (size_t f = 0; f < def.folds.size(); ++f) {
    if (f == 0 || plan.config.twoPass) {
      if (f > 0)
        newPhase();
      mapping = foldAccesses(plan.folds[f]);
    }
    emitFold(f, mapping);
  }
  if (!plan.outputUsesFoldMapping) {
    if (!def.folds.empty())
      newPhase();
    mapping = outputAccesses();
  }
  emitOutputs(mapping);
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return owned;
}

} // namespace

OwningOpRef<ModuleOp> codegen::lowerToMLIR(MLIRContext &ctx,
                                           const dsl::KernelDef &def,
                                           const Plan &plan,
                                           StringRef entryName,
                                           LoweringStats &stats) {
  KernelBuilder kb(ctx, def, plan, stats);
  return kb.build(entryName);
}
