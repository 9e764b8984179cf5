//===- codegen/ExactRewrites.h - Exact rewrites of the lowering -*- C++ -*-===//
//
// The rewrites the lowering applies instead of a DSL op's plain lowering,
// each proven exact in docs/design-notes.md ("Exact rewrites in codegen").
// Pattern matching on the DSL DAG only (no MLIR), so the list of rewrites a
// program gets can be computed and dumped before any IR is built.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_EXACTREWRITES_H
#define BITFOLD_CODEGEN_EXACTREWRITES_H

#include "dsl/IR.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>

namespace bitfold::codegen {

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
  dsl::Op op;
  const dsl::ExprNode *lhs, *rhs; ///< t-typed nodes, or t-exact f32 constants.
};
std::optional<NarrowArith> matchNarrowArith(const dsl::ExprNode *n,
                                            int smVersion);

/// nvcc's reciprocal `r = rcp.approx.ftz(x); fma(r, sub.ftz(-0, fma(x, r,
/// -1)), r)` of a compile-time integer 1 <= x < 2^21 is RN(1/x): rcp.approx
/// is within 1 ulp (PTX ISA), the Newton step's exact value is within 2^-46
/// of 1/x relatively, and 1/x is at least 2^-25/x away from every rounding
/// midpoint. Returns x's node where `n` has that shape; whether x is such a
/// constant is known only once its value is built (a folded constant, the
/// column count), see `nvccReciprocalValue`.
const dsl::ExprNode *matchNvccReciprocal(const dsl::ExprNode *n);
/// RN(1/x) when x is an integer in [1, 2^21), else nothing.
std::optional<float> nvccReciprocalValue(float x);

/// `div_rn(x, d)` with x a widened bf16 value and d one value per row (no
/// load below it outside a fold): per row y = RN(1/d) once, per element
/// q0 = RN(x y), r = fma(-q0, d, x), q = fma(r, y, q0) (Markstein's
/// correction), which is RN(x/d) whenever kRowDivMin <= |x|, |d| <=
/// kRowDivMax (docs/exact-division.md: a scaling argument reduces it to
/// x, d in [1, 2), and a CPU test runs every bf16 significand against
/// every f32 one). Elsewhere (zeros, tiny or huge values, Inf, NaN) the
/// lowering keeps div.rn: d's range is checked once per row, the x of a
/// vector access together, under one branch per access.
bool matchRowDivision(const dsl::ExprNode *n,
                      llvm::function_ref<bool(const dsl::ExprNode *)> perElement);
inline constexpr float kRowDivMin = 0x1p-60f, kRowDivMax = 0x1p60f;
/// On by default (the H200 oracle and Wan bench have run it: equal bits,
/// 14% faster); BITFOLD_ROW_DIVISION=0 (recorded in the cache key, like
/// every code-changing variable: keys::codegenEnvVars) turns it off.
bool rowDivisionEnabled();
/// The rewrite's per-element arithmetic given y = RN(1/d), on the host.
float rowDivisionFast(float x, float d, float y);

/// A row division (matchRowDivision) whose d is the row's clamped 2-norm
/// of x itself: d = rho(max_nan(rho(sqrt_rn(S)), c)), rho a chain of at
/// most 8 roundings to bf16 or f32 (and widenings), S the result of a fold
/// of x that sums squares (empty +0, push fma(x, x, acc), combine add). S
/// is at least RN(x_i^2) for every x_i of the row, so d <= kRowBoundMax
/// (false for NaN) proves |x_i| <= 2^60 for all of them: the lowering then
/// tests only |x_i| >= kRowDivMin per element (docs/exact-division.md,
/// "A bound from the row").
bool matchRowBound(const dsl::ExprNode *div, const dsl::KernelDef &def);
inline constexpr float kRowBoundMax = 0x1p59f;
/// On unless BITFOLD_ROW_BOUND=0 (recorded in the cache key).
bool rowBoundEnabled();

/// How `round_bf16(div_rn(x, d))` of a row division (matchRowDivision)
/// skips the correction step (docs/exact-division.md, "Rounded to bf16"):
///  - Plain: d is a widened bf16 value too. In the same range
///    RN_bf16(RN(x y)) is the result (a quotient of two 8-bit significands
///    lies far enough from every bf16 rounding midpoint; a CPU test runs all
///    2^14 significand pairs, and every bf16 x below the range).
///  - Windowed: any other (f32) d. q0 = RN(x y) is within two bit patterns
///    of RN(x/d) for every x with |x| <= 2^60 (zeros and subnormals too), so
///    RN_bf16(q0) is the result wherever q0's dropped 16 bits lie more than
///    kRowDivWindow patterns from the rounding midpoint
///    (roundedQuotientAccepts); elsewhere the access takes div.rn.
enum class RoundedDivision { No, Plain, Windowed };
RoundedDivision matchRoundedRowDivision(
    const dsl::ExprNode *n,
    const llvm::DenseSet<const dsl::ExprNode *> &rowDivision);
/// Whether f32 bits keep more than k patterns from a rounding midpoint of
/// their `dropped` low bits: |dropped - half| > k as (bits << shift) + C
/// compared unsigned (ptxas: one LEA and one ISETP).
inline bool farFromMidpoint(uint32_t bits, int dropped, uint32_t k) {
  const int shift = 32 - dropped;
  const uint32_t half = 1u << (dropped - 1);
  return (bits << shift) + ((k - half) << shift) > (2 * k) << shift;
}
/// The windowed form's margin in f32 bit patterns: the proof needs 2.
inline constexpr uint32_t kRowDivWindow = 4;
/// Whether the windowed form takes q0 = RN(x RN(1/d)) (the lowering's test).
inline bool roundedQuotientAccepts(float q0) {
  return farFromMidpoint(std::bit_cast<uint32_t>(q0), 16, kRowDivWindow);
}
/// On unless BITFOLD_ROUNDED_DIVISION=0 (recorded in the cache key).
bool roundedDivisionEnabled();

/// `round_t(silu(x))` (dsl::silu: `div_rn(x, 1 + exp_libdevice(-x))`)
/// with x a widened value of t (bf16 or f16): the output is a function of
/// x's 2^16 bit patterns. Per element the fast path s = RN(x *
/// rcp.approx(RN(1 + ex2.approx(RN(x * -log2e))))) and, where x >=
/// kFastSiluMinX (false for NaN), s's f32 bits lie more than
/// fastSiluMargin(t) units of the last place from a rounding midpoint of t
/// and (f16) |s| is in f16's normal range, RN_t(s); elsewhere the exact
/// chain. docs/exact-silu.md proves that this is the chain's t value for
/// every input (a CPU test runs all 2^16 of each type with the ISA's error
/// bounds and the sm_90 models). Returns x's Extend node where `n` has
/// that shape.
const dsl::ExprNode *matchFastSilu(const dsl::ExprNode *n);
inline constexpr float kFastSiluMinX = -80.0f;
/// K, in f32 units of the last place: what the CPU proof needs with the
/// ISA's error bounds doubled (f16's 53506 inputs come closer to their
/// midpoints than bf16's 49698 do).
inline constexpr uint32_t fastSiluMargin(dsl::DType t) {
  return t == dsl::DType::BF16 ? 12 : 24;
}
/// RN(log2(e)) in binary32.
inline constexpr float kFastSiluLog2e = 0x1.715476p+0f;
/// The f32 bits below t's significand (16 for bf16, 13 for f16).
inline constexpr int fastSiluDroppedBits(dsl::DType t) {
  return t == dsl::DType::BF16 ? 16 : 13;
}
/// Whether the fast path's s is taken for input x (the lowering's test).
inline bool fastSiluAccepts(dsl::DType t, float x, float s) {
  bool normal = t == dsl::DType::BF16 || std::fabs(s) >= 0x1p-14f;
  return x >= kFastSiluMinX && normal &&
         farFromMidpoint(std::bit_cast<uint32_t>(s), fastSiluDroppedBits(t),
                         fastSiluMargin(t));
}
/// Whether the fast path needs the midpoint test on target sm_`smVersion`.
/// Not for bf16 on sm_90: every sm_90 part is one die (GH100), whose
/// ex2/rcp.approx.ftz the exact models reproduce on all 2^32 inputs
/// (docs/approx-models.md), and on them the fast value of every bf16 x >=
/// kFastSiluMinX rounds as the chain does (FastSiluTest checks all 2^16;
/// tests/gpu/test_silu_exhaustive.py runs them on the H200). Elsewhere,
/// and with sm90Models off (BITFOLD_SM90_SILU=0), the ISA's bounds need it
/// (docs/exact-silu.md).
inline constexpr bool fastSiluNeedsMidpointTest(dsl::DType t, int smVersion,
                                                bool sm90Models = true) {
  return !(sm90Models && t == dsl::DType::BF16 && smVersion == 90);
}
/// fastSiluAccepts as the lowering decides it on target sm_`smVersion`.
inline bool fastSiluAcceptsOn(int smVersion, dsl::DType t, float x, float s) {
  if (fastSiluNeedsMidpointTest(t, smVersion))
    return fastSiluAccepts(t, x, s);
  return x >= kFastSiluMinX; // bf16: |s| needs no range test
}
/// On unless BITFOLD_FAST_SILU=0 (recorded in the cache key); the H200
/// oracle (tests/gpu/test_silu_exhaustive.py) ran it. Channels-first
/// programs take it only with a pixel's lanes on several threads (one
/// thread a pixel was slower with it; findRewrites).
bool fastSiluEnabled();
/// Whether bf16's fast SiLU on sm_90 relies on the exact models
/// (fastSiluNeedsMidpointTest): on unless BITFOLD_SM90_SILU=0 (recorded
/// in the cache key), which keeps the midpoint test there too.
bool sm90SiluModelsEnabled();

/// The exact fallbacks of the row division and the fast SiLU as one loop
/// over an access's elements (one copy of div.rn / the chain per access in
/// the PTX) instead of one copy per element; the loop computes exactly what
/// the per-element code selects (docs/exact-silu.md, "The fallback"). On
/// unless BITFOLD_FALLBACK_LOOPS=0 (recorded in the cache key).
bool fallbackLoopsEnabled();

/// The rewrite stage's result: the nodes the lowering rewrites.
struct Rewrites {
  llvm::DenseMap<const dsl::ExprNode *, NarrowArith> narrow;
  /// fma nodes of nvcc's reciprocal shape -> the divisor's node.
  llvm::DenseMap<const dsl::ExprNode *, const dsl::ExprNode *> nvccReciprocal;
  /// div_rn nodes by a per-row divisor (matchRowDivision).
  llvm::DenseSet<const dsl::ExprNode *> rowDivision;
  /// Row divisions whose d bounds every |x| of the row (matchRowBound).
  llvm::DenseSet<const dsl::ExprNode *> rowBound;
  /// round_bf16 nodes of such a division -> how they skip the correction
  /// (matchRoundedRowDivision: Plain or Windowed).
  llvm::DenseMap<const dsl::ExprNode *, RoundedDivision> roundedRowDivision;
  /// round_t(silu(x)) nodes -> x's Extend node (matchFastSilu).
  llvm::DenseMap<const dsl::ExprNode *, const dsl::ExprNode *> fastSilu;
  /// Their fallbacks as loops (fallbackLoopsEnabled).
  bool fallbackLoops = true;
  /// bf16's fast SiLU on sm_90 without the midpoint test
  /// (sm90SiluModelsEnabled).
  bool sm90SiluModels = true;
};
/// `pixelLanesOnThreads`: the plan holds a channels-first pixel's lanes on
/// several threads (a warp apart or in one warp, Plan.h); a channels-first
/// program takes the fast SiLU only then.
Rewrites findRewrites(const dsl::KernelDef &def, int smVersion,
                      bool pixelLanesOnThreads = false);

/// The stage's dump, by the canonical text's node names.
void printRewrites(llvm::raw_ostream &os, const dsl::KernelDef &def,
                   const Rewrites &rewrites);

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_EXACTREWRITES_H
