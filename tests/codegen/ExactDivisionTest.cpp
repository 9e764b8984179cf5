//===- tests/codegen/ExactDivisionTest.cpp - The row division rewrite -----===//
//
// The per-row reciprocal with Markstein's correction (codegen/ExactRewrites.h,
// docs/exact-division.md): the exhaustive check the proof reduces to, the
// range argument on samples, why the fallback is needed, and what the
// lowering emits for the Wan norm.
//
//===----------------------------------------------------------------------===//

#include "codegen/ExactRewrites.h"
#include "dsl/Parser.h"
#include "tests/codegen/CompileStock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;

namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

/// Runs `work` on as many threads as the host has cores (at least two).
void onEveryCore(const std::function<void()> &work) {
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency());
       ++i)
    pool.emplace_back(work);
  for (std::thread &t : pool)
    t.join();
}

/// The rewrite for x / d as the lowering emits it: y = RN(1/d) per row.
float viaReciprocal(float x, float d) {
  return rowDivisionFast(x, d, 1.0f / d);
}

} // namespace

// The proof's remaining case (docs/exact-division.md): x a bf16 significand
// in [1, 2) (128 values), d every f32 significand in [1, 2) (2^23 values).
// The scaling argument extends each to every exponent and sign in range.
TEST(ExactDivision, EveryBf16SignificandOverEveryF32SignificandIsRoundToNearest) {
  constexpr uint32_t kDivisors = 1u << 23;
  std::atomic<uint64_t> bad{0}, firstBad{~uint64_t(0)};
  std::atomic<uint32_t> next{0};
  auto work = [&] {
    constexpr uint32_t kChunk = 1u << 14;
    for (uint32_t lo; (lo = next.fetch_add(kChunk)) < kDivisors;)
      for (uint32_t m = lo; m < lo + kChunk; ++m) {
        const float d = std::bit_cast<float>(0x3f800000u | m);
        const float y = 1.0f / d;
        for (uint32_t a = 0; a < 128; ++a) {
          const float x = std::bit_cast<float>(0x3f800000u | (a << 16));
          if (bits(rowDivisionFast(x, d, y)) != bits(x / d)) {
            ++bad;
            uint64_t key = (uint64_t(m) << 7) | a, cur = firstBad;
            while (key < cur && !firstBad.compare_exchange_weak(cur, key)) {
            }
          }
        }
      }
  };
  onEveryCore(work);
  EXPECT_EQ(bad.load(), 0u) << "first failure: d significand "
                            << (firstBad >> 7) << ", x significand "
                            << (firstBad & 127);
}

// The scaling argument on samples: random bf16 x and f32 d with every
// exponent and sign of the fast range, plus the range's ends.
TEST(ExactDivision, ScaledPairsInsideTheRangeAreRoundToNearest) {
  std::mt19937 rng(25);
  std::uniform_int_distribution<int> expo(-60, 59);
  std::uniform_int_distribution<uint32_t> sig(0, (1u << 23) - 1), sgn(0, 1);
  auto draw = [&](bool bf16) {
    uint32_t m = sig(rng);
    if (bf16)
      m &= 0x7f0000u;
    float v = std::ldexp(std::bit_cast<float>(0x3f800000u | m), expo(rng));
    return sgn(rng) ? -v : v;
  };
  for (int i = 0; i < 2000000; ++i) {
    float x = draw(true), d = draw(false);
    ASSERT_EQ(bits(viaReciprocal(x, d)), bits(x / d)) << x << " / " << d;
  }
  const float ends[] = {kRowDivMin, kRowDivMax, -kRowDivMin, -kRowDivMax};
  for (float x : ends)
    for (float d : ends)
      EXPECT_EQ(bits(viaReciprocal(x, d)), bits(x / d)) << x << " / " << d;
}

namespace {

/// RN_bf16 of a finite float, ties to even, as cvt.rn.bf16.f32.
uint32_t bf16Bits(float f) {
  uint32_t u = bits(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/// The rounded rewrite: RN_bf16(RN(x * RN(1/d))), no correction step.
uint32_t viaReciprocalRounded(float x, float d) {
  return bf16Bits(x * (1.0f / d));
}

} // namespace

// The rounded rewrite's remaining case (docs/exact-division.md, "Rounded
// to bf16"): x and d both bf16 significands in [1, 2), all 2^14 pairs; the
// scaling argument extends it to every exponent and sign in range.
TEST(ExactDivision, EveryBf16PairRoundsToBf16WithoutTheCorrection) {
  int bad = 0;
  for (uint32_t m = 0; m < 128; ++m)
    for (uint32_t a = 0; a < 128; ++a) {
      const float x = std::bit_cast<float>(0x3f800000u | (a << 16));
      const float d = std::bit_cast<float>(0x3f800000u | (m << 16));
      if (viaReciprocalRounded(x, d) != bf16Bits(x / d))
        ++bad;
    }
  EXPECT_EQ(bad, 0);
}

// Below the range the rounded rewrite needs no scaling argument: every
// bf16 x with |x| < 2^-60 (zeros and subnormals included) over every bf16
// d in [2^-60, 2^60], both signs of x, with the host's IEEE subnormals
// (no flush), as mul.rn and cvt.rn.bf16x2 have them on the GPU.
TEST(ExactDivision, EveryBf16BelowTheRangeRoundsToBf16Alike) {
  std::atomic<uint64_t> bad{0};
  std::atomic<uint32_t> next{0};
  // d: exponents -60..60 (biased 67..187), every significand.
  constexpr uint32_t kDivisors = (187 - 67 + 1) * 128;
  auto work = [&] {
    for (uint32_t i; (i = next.fetch_add(1)) < kDivisors;) {
      const float d = std::bit_cast<float>(((67 + i / 128) << 23) |
                                           ((i % 128) << 16));
      const float y = 1.0f / d;
      // x: biased exponents 0..66 (below 2^-60), every significand.
      for (uint32_t xb = 0; xb < (67u << 7); ++xb)
        for (uint32_t sign : {0u, 0x8000u}) {
          const float x = std::bit_cast<float>((xb | sign) << 16);
          if (bf16Bits(x * y) != bf16Bits(x / d))
            ++bad;
        }
    }
  };
  onEveryCore(work);
  EXPECT_EQ(bad.load(), 0u);
}

// The scaling argument on samples, and the range's ends.
TEST(ExactDivision, ScaledBf16PairsInsideTheRangeRoundToBf16Alike) {
  std::mt19937 rng(2512);
  std::uniform_int_distribution<int> expo(-60, 59);
  std::uniform_int_distribution<uint32_t> sig(0, 127), sgn(0, 1);
  auto draw = [&] {
    float v = std::ldexp(std::bit_cast<float>(0x3f800000u | (sig(rng) << 16)),
                         expo(rng));
    return sgn(rng) ? -v : v;
  };
  for (int i = 0; i < 2000000; ++i) {
    float x = draw(), d = draw();
    ASSERT_EQ(viaReciprocalRounded(x, d), bf16Bits(x / d)) << x << " / " << d;
  }
  const float ends[] = {kRowDivMin, kRowDivMax, -kRowDivMin, -kRowDivMax};
  for (float x : ends)
    for (float d : ends)
      EXPECT_EQ(viaReciprocalRounded(x, d), bf16Bits(x / d))
          << x << " / " << d;
}

// Without a bf16 d the uncorrected product alone is not enough: some bf16 x
// over an f32 d round to another bf16 value (so the f32 form needs the
// window below).
TEST(ExactDivision, AnF32DivisorNeedsTheCorrectionBeforeRounding) {
  int bad = 0;
  for (uint32_t m = 0; m < (1u << 23) && !bad; m += 97)
    for (uint32_t a = 0; a < 128; ++a) {
      const float x = std::bit_cast<float>(0x3f800000u | (a << 16));
      const float d = std::bit_cast<float>(0x3f800000u | m);
      bad += viaReciprocalRounded(x, d) != bf16Bits(x / d);
    }
  EXPECT_GT(bad, 0);
}

namespace {

/// A float's bits as a signed integer, monotone in its value (both zeros 0).
int64_t ordinal(float f) {
  const int64_t m = bits(f) & 0x7fffffffu;
  return bits(f) >> 31 ? -m : m;
}

/// What the windowed rewrite checks per pair: q0 = RN(x RN(1/d)) lies
/// within two patterns of RN(x/d) (the proof's claim), and where the window
/// takes q0 it rounds to RN(x/d)'s bf16 value. Counts failures of each.
struct WindowCheck {
  uint64_t far = 0, wrong = 0, rejected = 0;
  int64_t farthest = 0;
  void add(float x, float d, float y) {
    const float q0 = x * y, q = x / d;
    const int64_t dist = std::llabs(ordinal(q0) - ordinal(q));
    farthest = std::max(farthest, dist);
    far += dist > 2;
    if (!roundedQuotientAccepts(q0))
      ++rejected;
    else if (bf16Bits(q0) != bf16Bits(q))
      ++wrong;
  }
  void merge(const WindowCheck &o) {
    far += o.far, wrong += o.wrong, rejected += o.rejected;
    farthest = std::max(farthest, o.farthest);
  }
};

/// `work(lo, hi, check)` over [0, n) in chunks on every core, merged.
template <typename Work> WindowCheck inChunks(uint32_t n, Work work) {
  std::atomic<uint32_t> next{0};
  std::mutex m;
  WindowCheck all;
  auto run = [&] {
    WindowCheck mine;
    constexpr uint32_t kChunk = 1u << 10;
    for (uint32_t lo; (lo = next.fetch_add(kChunk)) < n;)
      work(lo, std::min(n, lo + kChunk), mine);
    std::lock_guard<std::mutex> lock(m);
    all.merge(mine);
  };
  onEveryCore(run);
  return all;
}

} // namespace

// The window's test: q0's dropped 16 bits more than kRowDivWindow patterns
// from the midpoint 0x8000, whatever the sign and the kept bits.
TEST(ExactDivision, TheWindowRejectsExactlyTheBitsNearAMidpoint) {
  const uint32_t k = kRowDivWindow;
  for (uint32_t high : {0x3f80u, 0x0000u, 0xbf80u, 0x7f7fu})
    for (uint32_t low = 0; low < 0x10000u; ++low) {
      const bool near = low >= 0x8000u - k && low <= 0x8000u + k;
      EXPECT_EQ(roundedQuotientAccepts(std::bit_cast<float>(high << 16 | low)),
                !near)
          << std::hex << high << " " << low;
    }
}

// The windowed rewrite on every bf16 significand over every f32 one in
// [1, 2) (docs/exact-division.md, "Rounded to bf16 by an f32 divisor"):
// q0 within two patterns of RN(x/d), and every q0 the window takes has
// RN(x/d)'s bf16 bits. The proof needs no scaling argument; this is its
// check where the quotients are densest.
TEST(ExactDivision, EveryBf16SignificandOverEveryF32SignificandRoundsInTheWindow) {
  WindowCheck c = inChunks(1u << 23, [](uint32_t lo, uint32_t hi,
                                           WindowCheck &mine) {
    for (uint32_t m = lo; m < hi; ++m) {
      const float d = std::bit_cast<float>(0x3f800000u | m);
      const float y = 1.0f / d;
      for (uint32_t a = 0; a < 128; ++a)
        mine.add(std::bit_cast<float>(0x3f800000u | (a << 16)), d, y);
    }
  });
  EXPECT_EQ(c.far, 0u) << "farthest: " << c.farthest;
  EXPECT_EQ(c.wrong, 0u);
  // The window does reject some (the pairs the plain rounding gets wrong
  // among them), and few: about 9 in 2^16.
  EXPECT_GT(c.rejected, 0u);
  EXPECT_LT(c.rejected, (uint64_t(1) << 30) / 2000);
}

// Every bf16 x with |x| <= 2^60, zeros and subnormals included, both signs,
// over f32 divisors of every exponent and sign in [2^-60, 2^60] (random
// significands, and the range's ends): where quotients underflow the bound
// is absolute, and zeros keep their sign (x y and x / d both carry it).
TEST(ExactDivision, EveryBf16OverF32DivisorsInRangeRoundsInTheWindow) {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> expo(-60, 59);
  std::uniform_int_distribution<uint32_t> sig(0, (1u << 23) - 1), sgn(0, 1);
  std::vector<float> ds = {kRowDivMin, kRowDivMax, -kRowDivMin, -kRowDivMax};
  for (int i = 0; i < 1024; ++i) {
    float v = std::ldexp(std::bit_cast<float>(0x3f800000u | sig(rng)),
                         expo(rng));
    ds.push_back(sgn(rng) ? -v : v);
  }
  WindowCheck c = inChunks(uint32_t(ds.size()), [&](uint32_t lo,
                                                        uint32_t hi,
                                                        WindowCheck &mine) {
    for (uint32_t i = lo; i < hi; ++i) {
      const float d = ds[i], y = 1.0f / d;
      for (uint32_t xb = 0; xb <= 0x5d80u; ++xb) // up to 2^60
        for (uint32_t sign : {0u, 0x8000u})
          mine.add(std::bit_cast<float>((xb | sign) << 16), d, y);
    }
  });
  EXPECT_EQ(c.far, 0u) << "farthest: " << c.farthest;
  EXPECT_EQ(c.wrong, 0u);
}

// Outside the range the correction does give other bits, so the lowering's
// div.rn fallback is needed there: -0 / d comes out +0, Inf / d NaN.
TEST(ExactDivision, ZerosAndInfinitiesNeedTheFallback) {
  EXPECT_NE(bits(viaReciprocal(-0.0f, 3.0f)), bits(-0.0f / 3.0f));
  EXPECT_TRUE(std::isnan(viaReciprocal(INFINITY, 3.0f)));
  EXPECT_FALSE(std::isnan(INFINITY / 3.0f));
}

namespace {

llvm::Expected<CompiledKernel> compileWan(const char *params,
                                          const char *shape) {
  return bitfold::testing::compileStock("wan_rmsnorm_silu", params, shape);
}

using bitfold::testing::countOf;

} // namespace

/// The rewrite as the environment leaves it by default (on), for one test.
struct RowDivisionOn {
  RowDivisionOn() { ::unsetenv("BITFOLD_ROW_DIVISION"); }
};

// BITFOLD_ROW_DIVISION=0 turns the rewrite off: the Wan kernel keeps div.rn.
TEST(ExactDivision, TheRewriteIsOffWhenAskedTo) {
  ::setenv("BITFOLD_ROW_DIVISION", "0", 1);
  llvm::Expected<CompiledKernel> k = compileWan("", "1,96,4,480,832");
  ::unsetenv("BITFOLD_ROW_DIVISION");
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(countOf(k->ptx, "rcp.rn.f32"), 0u);
}

// Wan's x / norm over bf16 x takes the per-row reciprocal: one rcp.rn per
// row, and div.rn only on the fallback path; SiLU's division stays div.rn.
TEST(ExactDivision, WanNormDividesByAPerRowReciprocal) {
  RowDivisionOn on;
  for (const char *opts : {"", "form=f32,gamma=f32"}) {
    llvm::Expected<CompiledKernel> k = compileWan(opts, "1,96,4,480,832");
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ(countOf(k->ptx, "rcp.rn.f32"), 1u) << opts;
    EXPECT_GE(countOf(k->ptx, "div.rn.f32"), 2u) << opts;
  }
}

// The rewrite is proven for bf16 numerators only: an f32 or f16 x keeps
// div.rn (no reciprocal in the PTX).
TEST(ExactDivision, OtherNumeratorsKeepDivRn) {
  RowDivisionOn on;
  for (const char *opts : {"dtype=f32", "dtype=f16"}) {
    llvm::Expected<CompiledKernel> k = compileWan(opts, "1,96,1,60,104");
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ(countOf(k->ptx, "rcp.rn.f32"), 0u) << opts;
  }
}

namespace {

/// Sets (or, with null, unsets) one variable for a scope.
struct EnvVar {
  EnvVar(const char *name, const char *value) : name(name) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvVar() { ::unsetenv(name); }
  const char *name;
};

} // namespace

// Both forms round the quotient to bf16: the correction's two fmas per
// element go (24 elements a thread at the first config, r8.t4.v8), form x
// by its bf16 divisor, form f32 under the window. =0 brings them back.
TEST(ExactDivision, BothFormsRoundTheUncorrectedQuotientToBf16) {
  RowDivisionOn on;
  for (const char *opts : {"", "form=f32"}) {
    llvm::Expected<CompiledKernel> with = compileWan(opts, "1,96,4,480,832");
    ASSERT_TRUE(bool(with)) << llvm::toString(with.takeError());
    EnvVar off("BITFOLD_ROUNDED_DIVISION", "0");
    llvm::Expected<CompiledKernel> without = compileWan(opts, "1,96,4,480,832");
    ASSERT_TRUE(bool(without)) << llvm::toString(without.takeError());
    size_t saved = countOf(without->ptx, "fma.rn.f32") -
                   countOf(with->ptx, "fma.rn.f32");
    EXPECT_EQ(saved, 48u) << opts;
    EXPECT_EQ(countOf(with->ptx, "rcp.rn.f32"), 1u) << opts;
  }
}

// The division's fallback is one loop per access (8 elements) holding one
// div.rn, instead of a div.rn per element; =0 gives the per-element code.
TEST(ExactDivision, TheFallbackIsOneLoopPerAccess) {
  RowDivisionOn on;
  EnvVar noSilu("BITFOLD_FAST_SILU", "0"); // only the division's fallback
  llvm::Expected<CompiledKernel> loops = compileWan("", "1,96,4,480,832");
  ASSERT_TRUE(bool(loops)) << llvm::toString(loops.takeError());
  EnvVar off("BITFOLD_FALLBACK_LOOPS", "0");
  llvm::Expected<CompiledKernel> unrolled = compileWan("", "1,96,4,480,832");
  ASSERT_TRUE(bool(unrolled)) << llvm::toString(unrolled.takeError());
  // SiLU's chain keeps one div.rn per element in both.
  EXPECT_EQ(countOf(loops->ptx, "div.rn.f32"), 24u + 3u);
  EXPECT_EQ(countOf(unrolled->ptx, "div.rn.f32"), 24u + 24u);
  EXPECT_EQ(countOf(loops->ptx, ".pragma \"nounroll\""), 3u);
  EXPECT_EQ(countOf(unrolled->ptx, ".pragma \"nounroll\""), 0u);
}

namespace {

/// The Wan kernel's canonical text at the seed shape, with `from` replaced
/// by `to` (once), read back; how many row divisions take the row bound.
size_t rowBoundsOf(const char *params, llvm::StringRef from = "",
                   llvm::StringRef to = "") {
  llvm::Expected<templates::Problem> p =
      templates::makeProblem("wan_rmsnorm_silu", params, "1,96,4,480,832");
  EXPECT_TRUE(bool(p)) << llvm::toString(p.takeError());
  if (!p)
    return ~size_t(0);
  std::string text = dsl::printCanonical(*tools::shapeProblem(*p).def);
  if (!from.empty()) {
    size_t at = text.find(from.str());
    EXPECT_NE(at, std::string::npos) << from.str();
    text.replace(at, from.size(), to.str());
  }
  auto def = dsl::parseKernel(text);
  EXPECT_TRUE(bool(def)) << llvm::toString(def.takeError());
  if (!def)
    return ~size_t(0);
  return findRewrites(**def, 90).rowBound.size();
}

} // namespace

// Both forms divide by the clamped norm of the numerator itself: the row
// bound applies (per element only |x| >= 2^-60 in the PTX).
TEST(ExactDivision, TheWanNormsDivisorBoundsItsRow) {
  ::unsetenv("BITFOLD_ROW_BOUND");
  EXPECT_EQ(rowBoundsOf(""), 1u);
  EXPECT_EQ(rowBoundsOf("form=f32"), 1u);
  ::setenv("BITFOLD_ROW_BOUND", "0", 1);
  EXPECT_EQ(rowBoundsOf(""), 0u);
  ::unsetenv("BITFOLD_ROW_BOUND");
}

// What the bound relies on, each broken once: max_num forgets a NaN norm
// (d would be the clamp), a push that is not x*x + acc, a combine that
// subtracts, a fold that starts elsewhere than +0.
TEST(ExactDivision, TheRowBoundNeedsTheNormOfTheNumerator) {
  ::unsetenv("BITFOLD_ROW_BOUND");
  EXPECT_EQ(rowBoundsOf("", "max_nan", "max_num"), 0u);
  EXPECT_EQ(rowBoundsOf("", "fma_rn %0, %0, %1", "fma_rn %0, %1, %1"), 0u);
  EXPECT_EQ(rowBoundsOf("", "%2 = add %0, %1", "%2 = sub %0, %1"), 0u);
  EXPECT_EQ(rowBoundsOf("", "empty (0x00000000)", "empty (0x3f800000)"), 0u);
}

// The bound itself on rows at the top of the range: with d <= 2^59 every
// |x| is below 2^60, whatever the order of the sum; the largest bf16 row
// values that still pass come within a factor 1.01 of d.
TEST(ExactDivision, ARowWhoseNormPassesHoldsNoElementAbove2To60) {
  std::mt19937 rng(59);
  std::uniform_int_distribution<int> expo(50, 61), len(1, 64);
  std::uniform_int_distribution<uint32_t> sig(0, 127);
  auto bf16 = [](float v) {
    return std::bit_cast<float>(bf16Bits(v) << 16);
  };
  int passed = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<float> x(len(rng));
    float s = 0.0f, big = 0.0f;
    for (float &v : x) {
      v = std::ldexp(std::bit_cast<float>(0x3f800000u | (sig(rng) << 16)),
                     expo(rng) - (rng() % 8 ? 20 : 0));
      s = std::fma(v, v, s);
      big = std::max(big, v);
    }
    float d = bf16(std::max(bf16(std::sqrt(s)), 1e-12f));
    if (d <= kRowBoundMax) {
      ++passed;
      ASSERT_LE(big, kRowDivMax) << "row " << i;
      ASSERT_LE(big, 1.01f * d) << "row " << i;
    }
  }
  EXPECT_GT(passed, 1000);
}

// Form x, rounded and bounded by its row, tests no element: the fast path
// is decided by d alone (2^-60, 0f21800000, appears once: the row's test).
// Form f32 tests no range per element either, only each product's window
// (the shift-add's constant as LLVM folds it, 0x7ffbffff: 24 at r8.t4.v8).
TEST(ExactDivision, FormXDecidesTheFastPathOncePerRow) {
  RowDivisionOn on;
  ::unsetenv("BITFOLD_ROW_BOUND");
  ::unsetenv("BITFOLD_ROUNDED_DIVISION");
  llvm::Expected<CompiledKernel> x = compileWan("", "1,96,4,480,832");
  ASSERT_TRUE(bool(x)) << llvm::toString(x.takeError());
  EXPECT_EQ(countOf(x->ptx, "0f21800000"), 1u);
  llvm::Expected<CompiledKernel> f = compileWan("form=f32", "1,96,4,480,832");
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  EXPECT_EQ(countOf(f->ptx, "0f21800000"), 1u);
  EXPECT_EQ(countOf(f->ptx, "2147221503"), 24u);
  EXPECT_EQ(countOf(x->ptx, "2147221503"), 0u);
}
