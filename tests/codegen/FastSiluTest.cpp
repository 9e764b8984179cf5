//===- tests/codegen/FastSiluTest.cpp - The SiLU fast path ----------------===//
//
// round_bf16(silu(x)) for bf16 x by ex2/rcp.approx and a midpoint test
// (codegen/ExactRewrites.h, docs/exact-silu.md): every one of the 2^16
// inputs, with the approximations anywhere within the PTX ISA's error
// bounds and with the H200's exact models; why the test is needed; what
// the matcher takes and what the lowering emits.
//
//===----------------------------------------------------------------------===//

#include "codegen/ExactRewrites.h"
#include "dsl/ApproxModels.h"
#include "dsl/ApproxTables.h"
#include "dsl/Interp.h"
#include "tests/codegen/CompileStock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;
using dsl::DType;
using dsl::Expr;

namespace {

constexpr DType kNarrow[] = {DType::BF16, DType::F16};

/// The value of t's bit pattern h, and a float's bits in t (RNE).
float widen(DType t, uint32_t h) {
  return t == DType::BF16 ? std::bit_cast<float>(h << 16)
                          : dsl::halfBitsToFloat(uint16_t(h));
}
uint16_t narrow(DType t, float f) {
  return t == DType::BF16 ? dsl::floatToBf16Bits(f) : dsl::floatToHalfBits(f);
}
const char *name(DType t) { return t == DType::BF16 ? "bf16" : "f16"; }

/// x + n units in the last place of x >= 0 (the ulp above x, the larger one
/// where x is a power of two), clamped at 0; n may be negative.
float plusUlps(float x, int n) {
  if (x == 0.0f || std::isinf(x))
    return x;
  double ulp = double(std::nextafter(x, INFINITY)) - double(x);
  return float(std::max(0.0, double(x) + n * ulp));
}

/// Every value ex2.approx.ftz(t) may return when it is within `n` ulps of
/// the correctly rounded 2^t (results below 2^-126 flush to 0).
struct Range {
  float lo, hi;
};
Range ex2Range(float t, int n) {
  float cr = dsl::correctlyRoundedApprox().ex2ApproxFtz(t);
  float hi = plusUlps(std::max(cr, 0x1p-126f), n);
  float lo = plusUlps(cr, -n);
  return {lo < 0x1p-126f ? 0.0f : lo, hi};
}

/// The fast path's possible s for input x (every step is monotone), ex2
/// within `ex2Ulps` and rcp within `rcpUlps` of correctly rounded.
Range fastRange(float x, int ex2Ulps, int rcpUlps) {
  Range e = ex2Range(x * -kFastSiluLog2e, ex2Ulps);
  float dLo = 1.0f + e.lo, dHi = 1.0f + e.hi;
  float rLo = plusUlps(1.0f / dHi, -rcpUlps),
        rHi = plusUlps(1.0f / dLo, rcpUlps);
  float a = x * rLo, b = x * rHi;
  return {std::min(a, b), std::max(a, b)};
}

/// The exact chain's possible values x / (1 + expf(-x)) when expf's ex2 is
/// within `ex2Ulps` (the chain runs on the same unknown hardware).
Range chainRange(float x, int ex2Ulps) {
  auto chain = [&](int n) {
    float e = dsl::approx::expfSequence(-x, [&](float r) {
      return n < 0 ? ex2Range(r, -n).lo : ex2Range(r, n).hi;
    });
    return x / (1.0f + e);
  };
  float a = chain(-ex2Ulps), b = chain(ex2Ulps);
  return {std::min(a, b), std::max(a, b)};
}

/// Inputs of type t where some s the bounds allow is accepted with another
/// t value than some value the chain may give; `accept` is the lowering's
/// test unless a test asks what happens without part of it.
int wrongDecisions(DType t, int ex2Ulps, int rcpUlps,
                   bool (*accept)(DType, float, float) = fastSiluAccepts,
                   bool report = true) {
  int wrong = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float x = widen(t, h);
    if (std::isnan(x) || x < kFastSiluMinX)
      continue; // never accepted: fastSiluAccepts tests x first.
    Range c = chainRange(x, ex2Ulps);
    bool chainKnown = narrow(t, c.lo) == narrow(t, c.hi);
    Range s = fastRange(x, ex2Ulps, rcpUlps);
    for (float v = s.lo;; v = std::nextafter(v, INFINITY)) {
      if (accept(t, x, v) && (!chainKnown || narrow(t, v) != narrow(t, c.lo))) {
        ++wrong;
        if (report)
          ADD_FAILURE() << name(t) << " x = " << x << " s = " << v
                        << " chain in [" << c.lo << ", " << c.hi << "]";
        break;
      }
      if (v == s.hi)
        break;
    }
  }
  return wrong;
}

/// The fast path on the H200, exactly (the sm_90 models of ex2 and rcp).
float fastSm90(float x, const dsl::ApproxUnit &unit) {
  float e = unit.ex2ApproxFtz(x * -kFastSiluLog2e);
  return x * unit.rcpApproxFtz(1.0f + e);
}

/// y = round_out(silu(x)) over x of type in, as a program.
std::shared_ptr<const dsl::KernelDef> siluProgram(DType in, DType out) {
  dsl::RowProgram p("silu_probe");
  Expr x = p.input("x", in, dsl::Layout::RowMajor).row();
  p.output("y", out, dsl::Layout::RowMajor, dsl::round(out, dsl::silu(x)));
  llvm::Expected<std::shared_ptr<const dsl::KernelDef>> def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

} // namespace

// The proof (docs/exact-silu.md): wherever the test accepts s, s rounds to
// the bf16 (f16) value of every chain the hardware may compute, for
// ex2.approx within 2 ulps and rcp.approx within 1 ulp of correctly
// rounded (PTX ISA), each widened by one ulp for the host's double
// reference, and again with both bounds doubled (the margin K leaves).
TEST(FastSilu, EveryBf16AndF16InputWithinTheIsaBoundsRoundsLikeTheChain) {
  for (DType t : kNarrow) {
    EXPECT_EQ(wrongDecisions(t, /*ex2Ulps=*/3, /*rcpUlps=*/2), 0) << name(t);
    EXPECT_EQ(wrongDecisions(t, /*ex2Ulps=*/6, /*rcpUlps=*/4), 0) << name(t);
  }
}

// On the H200's exact models of ex2/rcp.approx.ftz (docs/approx-models.md),
// the interpreter (which runs the exact chain) gives the accepted fast
// value's bits on every input; the fallback rate is printed for the doc.
TEST(FastSilu, EveryBf16AndF16InputOnTheSm90ModelsMatchesTheInterpreter) {
  llvm::Expected<const dsl::ApproxUnit &> unit = dsl::sm90Approx();
  ASSERT_TRUE(bool(unit)) << llvm::toString(unit.takeError());
  for (DType t : kNarrow) {
    std::shared_ptr<const dsl::KernelDef> def = siluProgram(t, t);
    ASSERT_TRUE(def);
    std::vector<uint16_t> in(0x10000), out(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h)
      in[h] = uint16_t(h);
    dsl::Binding b;
    b.cols = 256;
    b.groupRows = {256};
    b.tensors = {{{t, in.data(), 256, 256, 0}, {t, out.data(), 256, 256, 0}}};
    ASSERT_FALSE(bool(dsl::interpret(*def, b, *unit)));
    int slow = 0, slowNear = 0, near = 0, slowDomain = 0, domain = 0;
    // Typical inputs: f16 results below 2^-14 (|x| < 2^-13) always fall back.
    const float typicalMin = t == DType::BF16 ? 0x1p-16f : 0x1p-12f;
    for (uint32_t h = 0; h < 0x10000; ++h) {
      float x = widen(t, h);
      float chain = x / (1.0f + dsl::expLibdevice(-x, *unit));
      ASSERT_EQ(out[h], narrow(t, chain)) << name(t) << " " << x;
      float s = fastSm90(x, *unit);
      bool ok = fastSiluAcceptsOn(90, t, x, s);
      if (ok)
        ASSERT_EQ(narrow(t, s), out[h]) << name(t) << " " << x;
      slow += !ok;
      bool inDomain = x >= kFastSiluMinX;
      domain += inDomain;
      slowDomain += inDomain && !ok;
      bool typical = std::fabs(x) >= typicalMin && std::fabs(x) <= 16.0f;
      near += typical;
      slowNear += typical && !ok;
    }
    std::printf("fast SiLU fallback on the sm_90 models, %s: %d of 65536 "
                "inputs; %d of %d with x >= %g (NaN excluded); %d of %d with "
                "%g <= |x| <= 16\n",
                name(t), slow, slowDomain, domain, double(kFastSiluMinX),
                slowNear, near, double(typicalMin));
    // f16 also falls back where s is an f16 subnormal (x < -8 or so).
    EXPECT_LT(slowNear, near / (t == DType::BF16 ? 100 : 25)) << name(t);
  }
}

// On sm_90 the bf16 lowering drops the midpoint test: on the exact models
// the fast value of every bf16 x >= kFastSiluMinX rounds as the chain does
// (the interpreter runs the chain), so only x's range decides. f16 keeps
// it (and needs it on these models too).
TEST(FastSilu, OnSm90EveryBf16InputInRangeRoundsRightWithoutTheMidpointTest) {
  llvm::Expected<const dsl::ApproxUnit &> unit = dsl::sm90Approx();
  ASSERT_TRUE(bool(unit)) << llvm::toString(unit.takeError());
  EXPECT_FALSE(fastSiluNeedsMidpointTest(DType::BF16, 90));
  EXPECT_TRUE(fastSiluNeedsMidpointTest(DType::F16, 90));
  for (int sm : {80, 89, 100, 120})
    EXPECT_TRUE(fastSiluNeedsMidpointTest(DType::BF16, sm)) << sm;
  int inRange = 0, f16Wrong = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float x = widen(DType::BF16, h);
    if (std::isnan(x) || x < kFastSiluMinX)
      continue;
    ++inRange;
    float chain = x / (1.0f + dsl::expLibdevice(-x, *unit));
    ASSERT_EQ(narrow(DType::BF16, fastSm90(x, *unit)), narrow(DType::BF16, chain))
        << "bf16 x = " << x;
    float xh = widen(DType::F16, h), sh = fastSm90(xh, *unit);
    if (!std::isnan(xh) && xh >= kFastSiluMinX && std::fabs(sh) >= 0x1p-14f)
      f16Wrong += narrow(DType::F16, sh) !=
                  narrow(DType::F16, xh / (1.0f + dsl::expLibdevice(-xh, *unit)));
  }
  EXPECT_EQ(inRange, 49698);
  EXPECT_GT(f16Wrong, 0);
}

// The range test is needed on the H200 itself: below it the fast value
// gives other bits (1 + 2^(x * -log2e) nears the float range's end, the
// reciprocal flushes). Above it, on the sm_90 models, the fast value alone
// already rounds right; the midpoint test is what makes that hold on every
// GPU within the ISA's bounds: without it the bounds allow wrong values.
TEST(FastSilu, TheRangeAndMidpointTestsAreNeeded) {
  llvm::Expected<const dsl::ApproxUnit &> unit = dsl::sm90Approx();
  ASSERT_TRUE(bool(unit)) << llvm::toString(unit.takeError());
  int differBelowRange = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float x = widen(DType::BF16, h);
    if (std::isnan(x) || x >= kFastSiluMinX)
      continue;
    float chain = x / (1.0f + dsl::expLibdevice(-x, *unit));
    differBelowRange +=
        narrow(DType::BF16, fastSm90(x, *unit)) != narrow(DType::BF16, chain);
  }
  EXPECT_GT(differBelowRange, 0);
  auto rangeOnly = [](DType, float x, float) { return x >= kFastSiluMinX; };
  for (DType t : kNarrow)
    EXPECT_GT(wrongDecisions(t, 3, 2, rangeOnly, /*report=*/false), 0)
        << name(t);
}

// The matcher takes round_t(silu(x)) of an x of the same t (bf16 or f16)
// only: an f32 x, or a result rounded to another type, keep the chain.
TEST(FastSilu, OnlyOneNarrowTypeInAndOutMatches) {
  struct Case {
    DType in, out;
    bool match;
  } cases[] = {{DType::BF16, DType::BF16, true},
               {DType::F16, DType::F16, true},
               {DType::F16, DType::BF16, false},
               {DType::F32, DType::BF16, false},
               {DType::BF16, DType::F16, false}};
  for (const Case &c : cases) {
    std::shared_ptr<const dsl::KernelDef> def = siluProgram(c.in, c.out);
    ASSERT_TRUE(def);
    int matched = 0;
    dsl::forEachNode(*def, [&](const dsl::ExprNode &n) {
      matched += matchFastSilu(&n) != nullptr;
    });
    EXPECT_EQ(matched, c.match ? 1 : 0)
        << dsl::dtypeName(c.in).str() << " -> " << dsl::dtypeName(c.out).str();
  }
}

namespace {

llvm::Expected<CompiledKernel> compileWan(const char *params,
                                          const char *arch = "sm_90") {
  return bitfold::testing::compileStock("wan_rmsnorm_silu", params,
                                        "1,96,4,480,832", arch);
}

using bitfold::testing::countOf;

} // namespace

// By default (and with BITFOLD_FAST_SILU=1) the Wan kernel (bf16 and f16,
// both forms) takes the fast path: rcp.approx per element, the chain's
// div.rn kept for the fallback; =0 gives the kernel without it.
TEST(FastSilu, WanKernelTakesTheFastPathByDefaultAndNotWhenTurnedOff) {
  for (const char *value : {"", "1"}) {
    if (*value)
      ::setenv("BITFOLD_FAST_SILU", value, 1);
    else
      ::unsetenv("BITFOLD_FAST_SILU");
    for (const char *opts : {"", "form=f32", "dtype=f16"}) {
      llvm::Expected<CompiledKernel> k = compileWan(opts);
      ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
      EXPECT_GT(countOf(k->ptx, "rcp.approx.ftz.f32"), 0u) << opts << value;
      EXPECT_GT(countOf(k->ptx, "div.rn.f32"), 0u) << opts << value;
    }
  }
  ::setenv("BITFOLD_FAST_SILU", "0", 1);
  llvm::Expected<CompiledKernel> off = compileWan("");
  ASSERT_TRUE(bool(off)) << llvm::toString(off.takeError());
  EXPECT_EQ(countOf(off->ptx, "rcp.approx.ftz.f32"), 0u);
  ::unsetenv("BITFOLD_FAST_SILU");
}

TEST(FastSilu, ChannelsFirstKernelsKeepTheChain) {
  // Measured slower there on the H200 (docs/exact-silu.md): never taken.
  ::unsetenv("BITFOLD_FAST_SILU");
  llvm::Expected<CompiledKernel> k = compileWan("layout=channels_first");
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(countOf(k->ptx, "rcp.approx.ftz.f32"), 0u);
}

// The midpoint test in the PTX: `(bits << 16) + C >u (2K << 16)`, which
// LLVM turns into an unsigned `<` of -(2K << 16) - 1 (bf16, K = 12). The
// bf16 kernel has none on sm_90 and one per element elsewhere; the f16
// kernel keeps its own (K = 24, 13 dropped bits) on sm_90.
TEST(FastSilu, TheBf16KernelTestsMidpointsOnlyOffSm90) {
  ::unsetenv("BITFOLD_FAST_SILU");
  const std::string bf16Bound = std::to_string(-int64_t(24u << 16) - 1);
  const std::string f16Bound = std::to_string(-int64_t(48u << 19) - 1);
  for (const char *form : {"", "form=f32"}) {
    llvm::Expected<CompiledKernel> sm90 = compileWan(form);
    ASSERT_TRUE(bool(sm90)) << llvm::toString(sm90.takeError());
    llvm::Expected<CompiledKernel> sm80 = compileWan(form, "sm_80");
    ASSERT_TRUE(bool(sm80)) << llvm::toString(sm80.takeError());
    EXPECT_GT(countOf(sm90->ptx, "rcp.approx.ftz.f32"), 0u) << form;
    EXPECT_EQ(countOf(sm90->ptx, bf16Bound), 0u) << form;
    EXPECT_GE(countOf(sm80->ptx, bf16Bound), 24u) << form;
  }
  llvm::Expected<CompiledKernel> f16 = compileWan("dtype=f16");
  ASSERT_TRUE(bool(f16)) << llvm::toString(f16.takeError());
  EXPECT_GE(countOf(f16->ptx, f16Bound), 24u);
  ::setenv("BITFOLD_SM90_SILU", "0", 1); // the ISA's bounds on sm_90 too
  llvm::Expected<CompiledKernel> bounds = compileWan("");
  ::unsetenv("BITFOLD_SM90_SILU");
  ASSERT_TRUE(bool(bounds)) << llvm::toString(bounds.takeError());
  EXPECT_GE(countOf(bounds->ptx, bf16Bound), 24u);
}

// The fallback of an access (8 elements at the first config, r8.t4.v8;
// 3 accesses a thread) is one loop with one copy of the exact chain (one
// fma.rm, libdevice expf's) and of the midpoint test, next to the
// division's loop; =0 gives one chain per element (24).
TEST(FastSilu, TheFallbackIsOneLoopPerAccessWithOneChain) {
  ::unsetenv("BITFOLD_FAST_SILU");
  for (const char *opts : {"", "form=f32", "dtype=f16"}) {
    ::unsetenv("BITFOLD_FALLBACK_LOOPS");
    llvm::Expected<CompiledKernel> loops = compileWan(opts);
    ASSERT_TRUE(bool(loops)) << llvm::toString(loops.takeError());
    ::setenv("BITFOLD_FALLBACK_LOOPS", "0", 1);
    llvm::Expected<CompiledKernel> unrolled = compileWan(opts);
    ::unsetenv("BITFOLD_FALLBACK_LOOPS");
    ASSERT_TRUE(bool(unrolled)) << llvm::toString(unrolled.takeError());
    EXPECT_EQ(countOf(loops->ptx, "fma.rm.f32"), 3u) << opts;
    EXPECT_EQ(countOf(unrolled->ptx, "fma.rm.f32"), 24u) << opts;
    // f16 has no row division (bf16 numerators only): SiLU's loops alone.
    size_t loopsPerAccess = std::string_view(opts) == "dtype=f16" ? 1 : 2;
    EXPECT_EQ(countOf(loops->ptx, ".pragma \"nounroll\""), 3 * loopsPerAccess)
        << opts;
    EXPECT_LT(loops->ptx.size(), unrolled->ptx.size()) << opts;
  }
}
