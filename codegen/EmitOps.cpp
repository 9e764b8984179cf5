//===- codegen/EmitOps.cpp - One DSL op -> its exact lowering -------------===//
//
// The op table: one entry per dsl::Op. Every op becomes exactly one IEEE op
// or a fixed sequence that computes exactly the interpreter's function
// (dsl/Interp.cpp), with no fast-math flags anywhere. Leaves (loads,
// scalars, dims, fold values, placeholders) have no entry of their own:
// the value builders bind them (LowerToMLIR.cpp).
//
// MLIR 22's typed NVVM ops are used where they exist for the f32 forms
// and translate to the same intrinsic (nvvm.rcp.approx.ftz.f, and
// nvvm.convert.f32x2.to.{bf16,f16}x2 with rnd = rn for the paired cvt.rn;
// scripts/ptx-hashes.sh shows the PTX unchanged). The rest stay intrinsic
// calls by name because MLIR 22 has no typed op for them: sqrt.rn.f,
// div.rn.f, rsqrt.approx.ftz.f, ex2.approx.ftz.f32, fma.rm.f, and the
// single-value f2bf16.rn / f2h.rn. logf, tanhf and erff are calls to
// libdevice's __nv_* functions, whose bitcode the LLVM stage links.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"

#include <array>
#include <functional>

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;
using dsl::DType;
using dsl::ExprNode;
using DOp = dsl::Op;
using P = arith::CmpFPredicate;

struct KernelBuilder::OpLowering {
  DOp op;
  /// Null for leaves, which the value builders bind.
  Value (*emit)(KernelBuilder &kb, const ExprNode *n, ArrayRef<Value> a);
};

/// An entry whose lowering is one expression of `kb` and the arguments `a`.
#define EMIT(OP, CREATE)                                                       \
  {DOp::OP, [](KernelBuilder &kb, const ExprNode *, ArrayRef<Value> a) {        \
     return Value(CREATE);                                                     \
   }}
#define CMP(OP, PRED) EMIT(OP, kb.cmp(P::PRED, a[0], a[1]))

const KernelBuilder::OpLowering KernelBuilder::opTable[] = {
    {DOp::Const,
     [](KernelBuilder &kb, const ExprNode *n, ArrayRef<Value>) {
       return kb.cF32Bits(n->bits);
     }},
    {DOp::Scalar, nullptr},
    {DOp::Dim, nullptr},
    {DOp::Load, nullptr},
    {DOp::FoldValue, nullptr},
    {DOp::Placeholder, nullptr},
    {DOp::Invalid, nullptr}, // never verifies
    EMIT(Neg, arith::NegFOp::create(kb.b, kb.loc, a[0])),
    EMIT(Abs, LLVM::FAbsOp::create(kb.b, kb.loc, a[0])),
    EMIT(Sqrt, kb.intrinsic("llvm.nvvm.sqrt.rn.f", {a[0]})),
    EMIT(RcpApproxFtz, NVVM::RcpApproxFtzF32Op::create(kb.b, kb.loc, kb.f32,
                                                         a[0])),
    EMIT(RsqrtApproxFtz,
           kb.intrinsic("llvm.nvvm.rsqrt.approx.ftz.f", {a[0]})),
    EMIT(Ex2ApproxFtz, kb.intrinsic("llvm.nvvm.ex2.approx.ftz.f32", {a[0]})),
    EMIT(ExpLibdevice, kb.expLibdevice(a[0])),
    EMIT(LogLibdevice, kb.libdeviceCall("__nv_logf", a[0])),
    EMIT(TanhLibdevice, kb.libdeviceCall("__nv_tanhf", a[0])),
    EMIT(ErfLibdevice, kb.libdeviceCall("__nv_erff", a[0])),
    EMIT(Saturate, kb.saturate(a[0])),
    {DOp::Round,
     [](KernelBuilder &kb, const ExprNode *n, ArrayRef<Value> a) {
       return dsl::isByteDType(n->roundTo) ? kb.roundByte(n->roundTo, a[0])
                                           : kb.emitRound(n, a[0]);
     }},
    {DOp::Extend,
     [](KernelBuilder &kb, const ExprNode *n, ArrayRef<Value> a) {
       DType from = n->args[0].dtype();
       return dsl::isByteDType(from) ? kb.extendByte(from, a[0])
                                     : kb.emitExtend(a[0]);
     }},
    // Folded where both operands are constants (APFloat, round to nearest
    // even: the IEEE result), so exact rewrites can see constant arguments.
    EMIT(Add, kb.b.createOrFold<arith::AddFOp>(kb.loc, a[0], a[1])),
    EMIT(Sub, kb.b.createOrFold<arith::SubFOp>(kb.loc, a[0], a[1])),
    EMIT(Mul, kb.b.createOrFold<arith::MulFOp>(kb.loc, a[0], a[1])),
    EMIT(SubFtz, kb.subFtz(a[0], a[1])),
    EMIT(Div, kb.intrinsic("llvm.nvvm.div.rn.f", {a[0], a[1]})),
    EMIT(MinNum, kb.minMax(DOp::MinNum, a[0], a[1])),
    EMIT(MaxNum, kb.minMax(DOp::MaxNum, a[0], a[1])),
    EMIT(MinNaN, kb.minMax(DOp::MinNaN, a[0], a[1])),
    EMIT(MaxNaN, kb.minMax(DOp::MaxNaN, a[0], a[1])),
    CMP(CmpLT, OLT),
    CMP(CmpLE, OLE),
    CMP(CmpGT, OGT),
    CMP(CmpGE, OGE),
    CMP(CmpEQ, OEQ),
    CMP(CmpNE, UNE), // unordered: true on NaN, as the interpreter
    EMIT(And, arith::AndIOp::create(kb.b, kb.loc, a[0], a[1])),
    EMIT(Or, arith::OrIOp::create(kb.b, kb.loc, a[0], a[1])),
    EMIT(Not, arith::XOrIOp::create(kb.b, kb.loc, a[0], kb.cBool(true))),
    {DOp::Fma,
     [](KernelBuilder &kb, const ExprNode *n, ArrayRef<Value> a) {
       return kb.emitFma(n, a);
     }},
    EMIT(Select, kb.sel(a[0], a[1], a[2])),
    {DOp::RowIndex, nullptr},
    {DOp::ColIndex, nullptr},
    {DOp::IConst,
     [](KernelBuilder &kb, const ExprNode *n, ArrayRef<Value>) {
       return kb.cI32(int32_t(n->bits));
     }},
    EMIT(IAdd, arith::AddIOp::create(kb.b, kb.loc, a[0], a[1])),
    EMIT(ISub, arith::SubIOp::create(kb.b, kb.loc, a[0], a[1])),
    EMIT(IMul, arith::MulIOp::create(kb.b, kb.loc, a[0], a[1])),
    EMIT(IDiv, kb.intDivRem(false, a[0], a[1])),
    EMIT(IRem, kb.intDivRem(true, a[0], a[1])),
    EMIT(ICmpLT, kb.cmpI(arith::CmpIPredicate::slt, a[0], a[1])),
    EMIT(ICmpLE, kb.cmpI(arith::CmpIPredicate::sle, a[0], a[1])),
    EMIT(ICmpGT, kb.cmpI(arith::CmpIPredicate::sgt, a[0], a[1])),
    EMIT(ICmpGE, kb.cmpI(arith::CmpIPredicate::sge, a[0], a[1])),
    EMIT(ICmpEQ, kb.cmpI(arith::CmpIPredicate::eq, a[0], a[1])),
    EMIT(ICmpNE, kb.cmpI(arith::CmpIPredicate::ne, a[0], a[1])),
    EMIT(ISelect, kb.sel(a[0], a[1], a[2])),
    // sitofp is cvt.rn.f32.s32: round to nearest even, as the interpreter.
    EMIT(IToF, arith::SIToFPOp::create(kb.b, kb.loc, kb.f32, a[0])),
    {DOp::Gather,
     [](KernelBuilder &kb, const ExprNode *n, ArrayRef<Value> a) {
       return kb.emitGather(n, a[0]);
     }},
};

#undef CMP
#undef EMIT

Value KernelBuilder::emitOp(const ExprNode *n, ArrayRef<Value> a) {
  constexpr size_t numOps = dsl::kNumOps;
  // Op -> entry, checked once: every op has exactly one entry.
  static const std::array<const OpLowering *, numOps> byOp = [] {
    std::array<const OpLowering *, numOps> m{};
    for (const OpLowering &l : opTable) {
      if (size_t(l.op) >= numOps || m[size_t(l.op)])
        llvm::report_fatal_error("codegen op table: duplicate or unknown op");
      m[size_t(l.op)] = &l;
    }
    for (const OpLowering *l : m)
      if (!l)
        llvm::report_fatal_error("codegen op table: an op has no entry");
    return m;
  }();
  const OpLowering *l = byOp[size_t(n->op)];
  if (!l->emit)
    llvm_unreachable("leaf op reached emitOp");
  return l->emit(*this, n, a);
}

Value KernelBuilder::emitRound(const ExprNode *n, Value x) {
  // cvt.rn through the NVVM intrinsics, not fptrunc: LLVM would fold
  // fptrunc(fmul(fpext, fpext)) into bf16 arithmetic (exact, but then the
  // PTX no longer shows the program's f32 ops and cvt.rn).
  if (n->roundTo == DType::BF16)
    return intrinsic("llvm.nvvm.f2bf16.rn", {x}, b.getBF16Type());
  return arith::BitcastOp::create(
      b, loc, b.getF16Type(), intrinsic("llvm.nvvm.f2h.rn", {x}, b.getI16Type()));
}

Value KernelBuilder::emitExtend(Value x) {
  if (x.getType() == f32)
    return x;
  if (auto it = widened.find(x); it != widened.end())
    return it->second;
  if (auto call = x.getDefiningOp<LLVM::CallIntrinsicOp>();
      call && call.getIntrin() == "llvm.nvvm.f2bf16.rn") {
    // extend(round_bf16(v)) in one instruction: cvt.rn.bf16x2.f32 d, v, 0
    // puts rnd(v) in the upper half and +0 in the lower one, which are the
    // bits of the widened value. Same rounding (cvt.rn) as f2bf16.rn;
    // ptxas emits both as F2FP (it already packs pairs of f2bf16.rn).
    Value pair = cvtRnPair(DType::BF16, call.getOperand(0), cF32(0.0f));
    return LLVM::BitcastOp::create(b, loc, f32, pair);
  }
  if (Value w = widenPairHalf(x))
    return w;
  return arith::ExtFOp::create(b, loc, f32, x);
}

Value KernelBuilder::cvtRnPair(DType t, Value hi, Value lo) {
  // cvt.rn.{bf16,f16}x2.f32 d, hi, lo: hi in the upper half (element 1).
  Type ty = VectorType::get({2}, storageType(t));
  if (t == DType::BF16)
    return NVVM::ConvertF32x2ToBF16x2Op::create(b, loc, ty, hi, lo, Value(),
                                                NVVM::FPRoundingMode::RN);
  return NVVM::ConvertF32x2ToF16x2Op::create(b, loc, ty, hi, lo, Value(),
                                             NVVM::FPRoundingMode::RN);
}

Value KernelBuilder::emitFma(const ExprNode *n, ArrayRef<Value> a) {
  // nvcc's reciprocal of a constant integer (ExactRewrites.h): the divisor
  // is a constant once built (a folded constant or the column count).
  if (rewrites.nvccReciprocal.count(n))
    if (auto rcp = a[0].getDefiningOp<NVVM::RcpApproxFtzF32Op>())
      if (auto cst = rcp.getArg().getDefiningOp<arith::ConstantOp>())
        if (std::optional<float> r = nvccReciprocalValue(
                llvm::cast<FloatAttr>(cst.getValue()).getValue().convertToFloat()))
          return cF32(*r);
  ++stats.fmaWritten;
  return LLVM::FMAOp::create(b, loc, a[0], a[1], a[2]);
}

Value KernelBuilder::rowDivInRange(Value v, float max) {
  Value a = LLVM::FAbsOp::create(b, loc, v);
  return andI(cmp(P::OGE, a, cF32(kRowDivMin)), cmp(P::OLE, a, cF32(max)));
}

KernelBuilder::RowDivisors
KernelBuilder::rowDivisors(const ExprNode *n, const Access &acc) {
  // Per pixel of an interleaved group (Access::pixels), else the current
  // copy's: the divisor d, RN(1/d) and d's fast-range test; element e uses
  // pixel e % pixels's. With a row bound (matchRowBound) d <= 2^59.
  const ExprNode *dn = n->args[1].get();
  RowDivisors r;
  for (int q = 0; q < acc.pixels; ++q)
    r.d.push_back(inCopy(acc.copyOf(q), [&] { return rowValue(dn); }));
  AtLoc at(*this, nodeLoc(n));
  for (int q = 0; q < acc.pixels; ++q) {
    Value d = r.d[q], dFast;
    inCopy(acc.copyOf(q), [&] {
      auto [it, fresh] = rowReciprocals.try_emplace(dn);
      if (fresh)
        it->second = {intrinsic("llvm.nvvm.rcp.rn.f", {d}),
                      rowDivInRange(d, kRowDivMax)};
      r.y.push_back(it->second.first);
      dFast = it->second.second;
      return Value();
    });
    if (rewrites.rowBound.count(n))
      dFast = rowDivInRange(d, kRowBoundMax);
    r.fast = andI(r.fast, dFast);
  }
  return r;
}

std::vector<Value> KernelBuilder::emitRowDivision(const ExprNode *n,
                                                  const Access &acc,
                                                  RoundedDivision rounded) {
  // ExactRewrites.h: RN(x/d) by a per-row reciprocal and Markstein's
  // correction where x and d lie in the proven range, div.rn elsewhere. One
  // branch per access (not per element), so ptxas schedules the elements'
  // following chains (SiLU) together. Where the quotient is rounded to bf16
  // (matchRoundedRowDivision) the fast values are RN(x y) only, Windowed
  // ones where each lies far enough from a bf16 rounding midpoint.
  const bool corrected = rounded == RoundedDivision::No;
  std::vector<Value> xs;
  for (int e = 0; e < acc.width; ++e)
    xs.push_back(elemValue(n->args[0].get(), acc, e));
  const int px = acc.pixels;
  RowDivisors r = rowDivisors(n, acc);
  AtLoc at(*this, nodeLoc(n));
  // Per element: |x| <= 2^60 unless d bounds the row (matchRowBound, then
  // d <= 2^59 per row); |x| >= 2^-60 unless rounded to bf16 without the
  // correction, which is exact below the range too (exact-division.md).
  const bool bounded = rewrites.rowBound.count(n);
  Value fast = r.fast;
  for (Value x : xs) {
    if (corrected && !bounded) {
      fast = andI(fast, rowDivInRange(x, kRowDivMax));
      continue;
    }
    if (bounded && !corrected)
      continue;
    Value a = LLVM::FAbsOp::create(b, loc, x);
    fast = andI(fast, bounded ? cmp(P::OGE, a, cF32(kRowDivMin))
                              : cmp(P::OLE, a, cF32(kRowDivMax)));
  }
  // The windowed products come first: their bits decide the branch.
  std::vector<Value> q0;
  if (rounded == RoundedDivision::Windowed)
    for (size_t e = 0; e < xs.size(); ++e) {
      q0.push_back(arith::MulFOp::create(b, loc, xs[e], r.y[e % px]));
      fast = andI(fast, farFromMidpointTest(q0.back(), 16, kRowDivWindow));
    }
  llvm::SmallVector<Type> types(xs.size(), f32);
  auto ifOp = scf::IfOp::create(b, loc, types, fast, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    llvm::SmallVector<Value> q(q0.begin(), q0.end());
    for (size_t e = q.size(); e < xs.size(); ++e) {
      Value x = xs[e], y = r.y[e % px], d = r.d[e % px];
      Value p = arith::MulFOp::create(b, loc, x, y);
      if (!corrected) {
        q.push_back(p);
        continue;
      }
      Value rem = LLVM::FMAOp::create(
          b, loc, arith::NegFOp::create(b, loc, p), d, x);
      q.push_back(LLVM::FMAOp::create(b, loc, rem, y, p));
      stats.fmaWritten += 2;
    }
    scf::YieldOp::create(b, loc, q);
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, rowDivisionSlow(xs, r.d));
  }
  return std::vector<Value>(ifOp.getResults().begin(), ifOp.getResults().end());
}

std::vector<Value> KernelBuilder::rowDivisionSlow(ArrayRef<Value> xs,
                                                  ArrayRef<Value> ds) {
  // div.rn for every element: where x is in range it equals the corrected
  // quotient (the proof), so no element's test is needed here. Element e
  // divides by ds[e % ds.size()] (its pixel's divisor).
  if (ds.size() == 1)
    return fallback({xs}, [&](ArrayRef<Value> h) {
      return intrinsic("llvm.nvvm.div.rn.f", {h[0], ds[0]});
    });
  std::vector<Value> de;
  for (size_t e = 0; e < xs.size(); ++e)
    de.push_back(ds[e % ds.size()]);
  return fallback({xs, de}, [&](ArrayRef<Value> h) {
    return intrinsic("llvm.nvvm.div.rn.f", {h[0], h[1]});
  });
}

std::vector<Value> KernelBuilder::emitFastSilu(const ExprNode *n,
                                               const Access &acc) {
  // ExactRewrites.h (docs/exact-silu.md): s = RN(x * rcp.approx(RN(1 +
  // ex2.approx(RN(x * -log2e))))) where x >= kFastSiluMinX and s is far
  // from a rounding midpoint of t, the exact chain elsewhere. The whole
  // access's fast values come first (independent MUFU chains side by
  // side), then the rarely taken fallback, then the paired cvt.rn.
  const ExprNode *xNode = rewrites.fastSilu.lookup(n);
  const DType t = n->roundTo;
  std::vector<Value> xs;
  for (int e = 0; e < acc.width; ++e)
    xs.push_back(elemValue(xNode, acc, e));
  AtLoc at(*this, nodeLoc(n));
  std::vector<Value> fast, ok;
  const std::vector<Value> geMin = pairedSiluMinTests(xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    Value x = xs[i];
    Value arg = arith::MulFOp::create(b, loc, x, cF32(-kFastSiluLog2e));
    Value d = arith::AddFOp::create(
        b, loc, intrinsic("llvm.nvvm.ex2.approx.ftz.f32", {arg}), cF32(1.0f));
    Value s = arith::MulFOp::create(
        b, loc, x, NVVM::RcpApproxFtzF32Op::create(b, loc, f32, d));
    fast.push_back(s);
    ok.push_back(fastSiluTest(t, x, s, geMin[i]));
  }
  // One branch per access on the common path; where some element fails,
  // one more per element, so only the failing ones run the chain.
  Value all;
  for (Value v : ok)
    all = andI(all, v);
  llvm::SmallVector<Type> types(xs.size(), f32);
  auto access = scf::IfOp::create(b, loc, types, all, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(access.thenBlock());
    scf::YieldOp::create(b, loc, fast);
    b.setInsertionPointToStart(access.elseBlock());
    // Each element again: its own test (recomputed, so the hot path keeps
    // no per-element predicate alive), the chain only where it fails.
    auto pick = [&](Value x, Value s, Value accept) {
      auto elem = scf::IfOp::create(b, loc, TypeRange{f32}, accept,
                                    /*withElseRegion=*/true);
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(elem.thenBlock());
      scf::YieldOp::create(b, loc, s);
      b.setInsertionPointToStart(elem.elseBlock());
      scf::YieldOp::create(b, loc, exactSilu(n->args[0].get(), xNode, x));
      return elem.getResult(0);
    };
    std::vector<Value> some;
    if (rewrites.fallbackLoops) {
      some = fallback({xs, fast}, [&](ArrayRef<Value> h) {
        return pick(h[0], h[1], fastSiluTest(t, h[0], h[1]));
      });
    } else {
      for (size_t i = 0; i < xs.size(); ++i)
        some.push_back(pick(xs[i], fast[i], ok[i]));
    }
    scf::YieldOp::create(b, loc, some);
  }
  return roundElements(
      n, std::vector<Value>(access.getResults().begin(),
                            access.getResults().end()));
}

std::vector<Value> KernelBuilder::roundElements(const ExprNode *n,
                                                ArrayRef<Value> y) {
  // Pairs in one cvt.rn.{bf16,f16}x2.f32, as roundPair.
  std::vector<Value> out;
  for (size_t i = 0; i < y.size(); i += 2) {
    if (i + 1 == y.size()) {
      out.push_back(emitRound(n, y[i]));
      break;
    }
    Value pair = cvtRnPair(n->roundTo, y[i + 1], y[i]);
    out.push_back(LLVM::ExtractElementOp::create(b, loc, pair, cI32(0)));
    out.push_back(LLVM::ExtractElementOp::create(b, loc, pair, cI32(1)));
  }
  return out;
}

std::vector<Value> KernelBuilder::pairedSiluMinTests(ArrayRef<Value> xs) {
  // x is a bf16 value (widened exactly), and so is kFastSiluMinX (-80 =
  // bf16 0xc2a0): comparing the bf16 halves decides x >= kFastSiluMinX as
  // the f32 compare does, NaN false. setp.ge.bf16x2 is sm_90+.
  std::vector<Value> out(xs.size());
  if (plan.smVersion < 90)
    return out;
  for (size_t i = 0; i + 1 < xs.size(); i += 2) {
    int lo = -1, hi = -1;
    Value pair = widenedPair(xs[i], lo);
    if (!pair || lo != 0 || widenedPair(xs[i + 1], hi) != pair || hi != 1)
      continue;
    auto vecTy = llvm::cast<VectorType>(pair.getType());
    auto min = arith::ConstantOp::create(
        b, loc, vecTy,
        DenseElementsAttr::get(
            vecTy, b.getFloatAttr(b.getBF16Type(), kFastSiluMinX)));
    Value ge = arith::CmpFOp::create(b, loc, P::OGE, pair, min);
    out[i] = LLVM::ExtractElementOp::create(b, loc, ge, cI32(0));
    out[i + 1] = LLVM::ExtractElementOp::create(b, loc, ge, cI32(1));
  }
  return out;
}

Value KernelBuilder::farFromMidpointTest(Value v, int dropped, uint32_t k) {
  // farFromMidpoint (ExactRewrites.h) on v's bits.
  const int shift = 32 - dropped;
  const uint32_t half = 1u << (dropped - 1);
  Value low = arith::AddIOp::create(
      b, loc,
      arith::ShLIOp::create(b, loc, arith::BitcastOp::create(b, loc, i32, v),
                            cI32(shift)),
      cI32(int32_t((k - half) << shift)));
  return cmpI(arith::CmpIPredicate::ugt, low, cI32(int32_t((2 * k) << shift)));
}

Value KernelBuilder::fastSiluTest(DType t, Value x, Value s, Value geMin) {
  // fastSiluAcceptsOn: x >= kFastSiluMinX (false for NaN); where the
  // target needs it, |dropped - half| > K as (bits << shift) + C compared
  // unsigned (ptxas: one LEA and one ISETP); for f16, s in f16's normal
  // range.
  Value mid;
  if (fastSiluNeedsMidpointTest(t, plan.smVersion, rewrites.sm90SiluModels))
    mid = farFromMidpointTest(s, fastSiluDroppedBits(t), fastSiluMargin(t));
  Value accept =
      andI(geMin ? geMin : cmp(P::OGE, x, cF32(kFastSiluMinX)), mid);
  if (t == DType::F16) // f16's subnormals round at another bit
    accept = andI(accept, cmp(P::OGE, LLVM::FAbsOp::create(b, loc, s),
                              cF32(0x1p-14f)));
  return accept;
}

std::vector<Value> KernelBuilder::fallback(
    ArrayRef<std::vector<Value>> lists,
    llvm::function_ref<Value(ArrayRef<Value>)> body) {
  // `body` of element i's values (lists[j][i] for every j), for every i.
  // With fallback loops: one copy of `body` in a loop of one trip per
  // element whose carried lists rotate by one each trip (a loop cannot
  // index registers); the result takes list 0's head's place, so after
  // the last trip list 0 holds the results in order. The loop carries
  // llvm.loop.unroll.disable: unrolled, it is the per-element code again.
  const size_t w = lists[0].size();
  if (!rewrites.fallbackLoops || w == 1) {
    std::vector<Value> out;
    for (size_t i = 0; i < w; ++i) {
      llvm::SmallVector<Value, 2> h;
      for (const std::vector<Value> &l : lists)
        h.push_back(l[i]);
      out.push_back(body(h));
    }
    return out;
  }
  llvm::SmallVector<Value> init;
  for (const std::vector<Value> &l : lists)
    init.append(l.begin(), l.end());
  auto loop = scf::ForOp::create(
      b, loc, cIdx(0), cIdx(int64_t(w)), cIdx(1), init,
      [&](OpBuilder &, Location, Value, ValueRange args) {
        llvm::SmallVector<Value, 2> h;
        for (size_t j = 0; j < lists.size(); ++j)
          h.push_back(args[j * w]);
        Value r = body(h);
        llvm::SmallVector<Value> next;
        for (size_t j = 0; j < lists.size(); ++j) {
          for (size_t i = 1; i < w; ++i)
            next.push_back(args[j * w + i]);
          next.push_back(j == 0 ? r : args[j * w]);
        }
        scf::YieldOp::create(b, loc, next);
      });
  auto noUnroll = LLVM::LoopUnrollAttr::get(&ctx, b.getBoolAttr(true), {}, {},
                                            {}, {}, {}, {});
  loop->setAttr("loop_annotation",
                LLVM::LoopAnnotationAttr::get(&ctx, {}, {}, {}, noUnroll, {},
                                              {}, {}, {}, {}, {}, {}, {}, {},
                                              {}, {}));
  return std::vector<Value>(loop.getResults().begin(),
                            loop.getResults().begin() + w);
}

Value KernelBuilder::exactSilu(const ExprNode *chain, const ExprNode *xNode,
                               Value x) {
  // The plain lowering of silu's nodes, op by op, inside the fallback's
  // region and without the element memo (nothing built here may serve code
  // outside it). Both widenings of x's narrow value are `x`.
  llvm::DenseMap<const ExprNode *, Value> memo;
  std::function<Value(const ExprNode *)> eval = [&](const ExprNode *m) {
    if (m == xNode ||
        (m->op == DOp::Extend && m->args[0].get() == xNode->args[0].get()))
      return x;
    if (auto it = memo.find(m); it != memo.end())
      return it->second;
    llvm::SmallVector<Value, 2> a;
    for (const dsl::Expr &arg : m->args)
      a.push_back(eval(arg.get()));
    AtLoc at(*this, nodeLoc(m));
    return memo[m] = emitOp(m, a);
  };
  return eval(chain);
}

Value KernelBuilder::subFtz(Value x, Value y) {
  auto op = LLVM::InlineAsmOp::create(
      b, loc, f32, ValueRange{x, y}, "sub.rn.ftz.f32 $0, $1, $2;", "=f,f,f",
      /*has_side_effects=*/false, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
      ArrayAttr());
  return op.getResult(0);
}

Value KernelBuilder::saturate(Value x) {
  // x > 0 ? (x < 1 ? x : 1) : 0   (NaN -> 0, -0 -> +0), as the interpreter.
  Value inner = sel(cmp(P::OLT, x, cF32(1.0f)), x, cF32(1.0f));
  return sel(cmp(P::OGT, x, cF32(0.0f)), inner, cF32(0.0f));
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

Value KernelBuilder::libdeviceCall(StringRef fn, Value a) {
  // A call to libdevice's function, declared here; the LLVM stage links
  // its body from the embedded bitcode (codegen/LinkLibdevice.cpp).
  auto callee = module.lookupSymbol<LLVM::LLVMFuncOp>(fn);
  if (!callee) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    callee = LLVM::LLVMFuncOp::create(
        b, module.getLoc(), fn, LLVM::LLVMFunctionType::get(f32, {f32}));
  }
  return LLVM::CallOp::create(b, loc, callee, ValueRange{a}).getResult();
}

Value KernelBuilder::minMax(DOp op, Value x, Value y) {
  // The interpreter's minMax: NaN handling first, then -0 below +0, then <.
  bool isMax = op == DOp::MaxNum || op == DOp::MaxNaN;
  Value xNaN = cmp(P::UNO, x, x);
  Value yNaN = cmp(P::UNO, y, y);
  Value xNeg = cmpI(arith::CmpIPredicate::slt,
                    arith::BitcastOp::create(b, loc, i32, x), cI32(0));
  Value bothZero =
      andI(cmp(P::OEQ, x, cF32(0.0f)), cmp(P::OEQ, y, cF32(0.0f)));
  Value zeroPick = isMax ? sel(xNeg, y, x) : sel(xNeg, x, y);
  Value ordPick = isMax ? sel(cmp(P::OGT, x, y), x, y)
                        : sel(cmp(P::OLT, x, y), x, y);
  Value v = sel(bothZero, zeroPick, ordPick);
  if (op == DOp::MinNaN || op == DOp::MaxNaN) {
    Value anyNaN = arith::OrIOp::create(b, loc, xNaN, yNaN);
    return sel(anyNaN, cF32Bits(0x7fc00000u), v);
  }
  return sel(xNaN, y, sel(yNaN, x, v));
}

Value KernelBuilder::emitNarrowArith(
    const NarrowArith &m, DType t,
    llvm::function_ref<Value(const ExprNode *)> valueOf) {
  auto [l, r] = narrowOperands(m, t, valueOf);
  return narrowOp(m.op, l, r);
}

Value KernelBuilder::narrowOp(dsl::Op op, Value l, Value r) {
  ++stats.narrowArith;
  switch (op) {
  case DOp::Add: return arith::AddFOp::create(b, loc, l, r);
  case DOp::Sub: return arith::SubFOp::create(b, loc, l, r);
  default: return arith::MulFOp::create(b, loc, l, r);
  }
}

std::pair<Value, Value> KernelBuilder::narrowOperands(
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
  Value l = operand(m.lhs);
  return {l, operand(m.rhs)};
}
