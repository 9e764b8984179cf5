//===- tests/dsl/LibdeviceOpsTest.cpp - logf/tanhf/erff in the interpreter -===//
//
// The interpreter's log/tanh/erf_libdevice are transcriptions of
// libdevice's __nv_logf/__nv_tanhf/__nv_erff (dsl/LibdeviceSequences.h).
// A wrong coefficient, branch bound or operand order shows up as an error
// far beyond libdevice's documented bounds (logf 1 ulp, tanhf and erff 2
// ulp) against a double-precision reference, on a dense sample of all
// finite floats with the sm_90 unit; IEEE special values are checked one
// by one. Bit equality with the GPU: on a sample captured on an H200 by
// tests/gpu/test_libdevice_ops.py (golden-sm90/libdevice-*.bin), and on
// every input in that GPU test itself.
// The GELU helpers are checked against ATen's formulas written out, and
// the GPU test's program texts (tests/gpu/libdevice) against the helpers.
//
//===----------------------------------------------------------------------===//

#include "dsl/ApproxModels.h"
#include "dsl/Interp.h"
#include "dsl/LibdeviceSequences.h"
#include "dsl/Parser.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <numbers>

using namespace bitfold;
using namespace bitfold::dsl;

namespace {

const ApproxUnit &sm90() {
  llvm::Expected<const ApproxUnit &> unit = sm90Approx();
  if (!unit) {
    ADD_FAILURE() << llvm::toString(unit.takeError());
    return correctlyRoundedApprox();
  }
  return *unit;
}

/// The interpreter's value of `op` applied to x (the op table's hook).
float eval(Op op, float x, const ApproxUnit &unit) {
  Expr in = Expr(0.0f);
  Expr node = makeOp(op, {in});
  return evaluateOp(*node.get(), {x}, unit);
}

/// Distance in ulps of the f32 `got` from the double `want` (the spacing
/// of floats at want's magnitude; subnormal spacing below 2^-126).
double ulpError(float got, double want) {
  double mag = std::fabs(want);
  int e = mag >= 0x1p-126 ? std::ilogb(mag) : -126;
  return std::fabs(double(got) - want) / std::ldexp(1.0, e - 23);
}

struct OpCase {
  Op op;
  const char *name;
  double (*reference)(double);
  double maxUlps;
};

const OpCase kCases[] = {
    {Op::LogLibdevice, "logf", [](double x) { return std::log(x); }, 1.0},
    {Op::TanhLibdevice, "tanhf", [](double x) { return std::tanh(x); }, 2.0},
    {Op::ErfLibdevice, "erff", [](double x) { return std::erf(x); }, 2.0},
};

TEST(LibdeviceOps, StayWithinLibdevicesErrorBoundsOnADenseSample) {
  const ApproxUnit &unit = sm90();
  for (const OpCase &c : kCases) {
    double worst = 0;
    uint32_t worstAt = 0;
    // Every 509th bit pattern: about 8.4 million floats of both signs.
    for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 2039) {
      float x = std::bit_cast<float>(uint32_t(b));
      if (!std::isfinite(x) || (c.op == Op::LogLibdevice && x <= 0.0f))
        continue;
      double want = c.reference(double(x));
      if (std::fabs(want) > 0x1.fffffep127)
        continue;
      double err = ulpError(eval(c.op, x, unit), want);
      if (err > worst) {
        worst = err;
        worstAt = uint32_t(b);
      }
    }
    std::cout << "[ max err  ] " << c.name << ": " << worst << " ulp\n";
    EXPECT_LE(worst, c.maxUlps)
        << c.name << ": " << worst << " ulp at x = "
        << llvm::formatv("{0:x8} ({1})", worstAt,
                         std::bit_cast<float>(worstAt))
               .str()
        << " (sample: every 2039th bit pattern, sm_90 unit)";
  }
}

TEST(LibdeviceOps, SpecialValuesFollowIeee) {
  const ApproxUnit &unit = sm90();
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  const float inf = INFINITY, nan = NAN;
  // log: ±0 -> -inf, negative -> NaN, +inf -> +inf, 1 -> +0, subnormals
  // scaled (log(2^-149) = -149 ln 2).
  EXPECT_EQ(eval(Op::LogLibdevice, 0.0f, unit), -inf);
  EXPECT_EQ(eval(Op::LogLibdevice, -0.0f, unit), -inf);
  EXPECT_TRUE(std::isnan(eval(Op::LogLibdevice, -1.0f, unit)));
  EXPECT_TRUE(std::isnan(eval(Op::LogLibdevice, -inf, unit)));
  EXPECT_TRUE(std::isnan(eval(Op::LogLibdevice, nan, unit)));
  EXPECT_EQ(eval(Op::LogLibdevice, inf, unit), inf);
  EXPECT_EQ(bits(eval(Op::LogLibdevice, 1.0f, unit)), 0u);
  EXPECT_LE(ulpError(eval(Op::LogLibdevice, 0x1p-149f, unit),
                     -149 * std::numbers::ln2),
            1.0);
  // NaN results are the GPU's one NaN, whatever the input.
  for (Op op : {Op::LogLibdevice, Op::TanhLibdevice, Op::ErfLibdevice})
    for (float x : {-1.0f, -inf, nan, -nan, std::bit_cast<float>(0x7f800001u)})
      if (std::isnan(eval(op, x, unit)))
        EXPECT_EQ(bits(eval(op, x, unit)), 0x7fffffffu) << "at " << x;
  // tanh and erf: odd, ±0 kept, ±inf -> ±1, NaN -> NaN.
  for (Op op : {Op::TanhLibdevice, Op::ErfLibdevice}) {
    EXPECT_EQ(bits(eval(op, 0.0f, unit)), bits(0.0f));
    EXPECT_EQ(bits(eval(op, -0.0f, unit)), bits(-0.0f));
    EXPECT_EQ(eval(op, inf, unit), 1.0f);
    EXPECT_EQ(eval(op, -inf, unit), -1.0f);
    EXPECT_TRUE(std::isnan(eval(op, nan, unit)));
    for (float x : {1e-30f, 0.3f, 0.6f, 1.0f, 1.003f, 2.5f, 9.5f, 1e10f})
      EXPECT_EQ(bits(eval(op, -x, unit)), bits(-eval(op, x, unit)))
          << "odd symmetry at " << x;
  }
}

/// Interprets `f(x)` for one f32 element.
float interpretOne(Expr (*f)(const Expr &), float x, const ApproxUnit &unit) {
  RowProgram p("one");
  Expr in = p.input("x", DType::F32, Layout::RowMajor).row();
  p.output("y", DType::F32, Layout::RowMajor, f(in));
  llvm::Expected<std::shared_ptr<const KernelDef>> def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return NAN;
  }
  float y = NAN;
  Binding b;
  b.cols = 1;
  b.groupRows = {1};
  b.tensors = {{HostTensor{DType::F32, &x, 1, 1},
                HostTensor{DType::F32, &y, 1, 1}}};
  if (llvm::Error e = interpret(**def, b, unit))
    ADD_FAILURE() << llvm::toString(std::move(e));
  return y;
}

TEST(LibdeviceOps, GeluHelpersAreAtensFormulasAsNvccCompilesThem) {
  const ApproxUnit &unit = sm90();
  auto ex2 = [&](float v) { return unit.ex2ApproxFtz(v); };
  auto rcp = [&](float v) { return unit.rcpApproxFtz(v); };
  // ActivationGeluKernel.cu, f32 opmath; nvcc contracts only
  // kKappa * x_cube + x.
  const float kAlpha = float(std::numbers::sqrt2 / 2);
  const float kBeta =
      float(std::numbers::sqrt2 * (2 * std::numbers::inv_sqrtpi) * 0.5);
  const float kKappa = float(0.044715);
  for (float x : {-5.0f, -1.5f, -0.3f, 0.0f, 1e-3f, 0.7f, 2.0f, 4.25f}) {
    float erfForm =
        (x * 0.5f) * (1.0f + libdevice::erffSequence(x * kAlpha, ex2));
    float cube = (x * x) * x;
    float inner = kBeta * std::fma(kKappa, cube, x);
    float tanhForm =
        (0.5f * x) * (1.0f + libdevice::tanhfSequence(inner, ex2, rcp));
    EXPECT_EQ(std::bit_cast<uint32_t>(interpretOne(gelu_erf, x, unit)),
              std::bit_cast<uint32_t>(erfForm))
        << "gelu_erf(" << x << ")";
    EXPECT_EQ(std::bit_cast<uint32_t>(interpretOne(gelu_tanh, x, unit)),
              std::bit_cast<uint32_t>(tanhForm))
        << "gelu_tanh(" << x << ")";
  }
}

TEST(LibdeviceOps, GpuTestProgramsAreTheHelpers) {
  // tests/gpu/test_libdevice_ops.py runs these texts; they must be the
  // programs the DSL helpers build (same canonical text, same hash).
  const std::pair<const char *, Expr (*)(const Expr &)> cases[] = {
      {"exp", exp_libdevice},   {"log", log_libdevice},
      {"tanh", tanh_libdevice}, {"erf", erf_libdevice},
      {"sigmoid", sigmoid},     {"silu", silu},
      {"gelu_erf", gelu_erf},   {"gelu_tanh", gelu_tanh}};
  for (auto [op, f] : cases) {
    std::string path =
        std::string(BITFOLD_SOURCE_DIR) + "/tests/gpu/libdevice/" + op + ".bfk";
    auto buf = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(bool(buf)) << path;
    llvm::Expected<std::shared_ptr<const KernelDef>> parsed =
        parseKernel((*buf)->getBuffer(), path);
    ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
    RowProgram p(std::string("ld_") + op);
    Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
    p.output("y", DType::F32, Layout::RowMajor, f(x));
    llvm::Expected<std::shared_ptr<const KernelDef>> built = p.build();
    ASSERT_TRUE(bool(built)) << llvm::toString(built.takeError());
    EXPECT_EQ((*parsed)->canonicalText, (*built)->canonicalText) << path;
    EXPECT_EQ((*parsed)->hash, (*built)->hash) << path;
  }
}

TEST(LibdeviceOps, InterpreterReproducesTheH200OnTheCapturedSample) {
  // tests/gpu/test_libdevice_ops.py's capture on an H200: the kernel's
  // output for x = k * 262147 mod 2^32, k < 16384 (u32, little-endian).
  const ApproxUnit &unit = sm90();
  const std::pair<const char *, Op> ops[] = {{"exp", Op::ExpLibdevice},
                                             {"log", Op::LogLibdevice},
                                             {"tanh", Op::TanhLibdevice},
                                             {"erf", Op::ErfLibdevice}};
  for (auto [name, op] : ops) {
    std::string path = std::string(BITFOLD_SOURCE_DIR) +
                       "/tests/dsl/golden-sm90/libdevice-" + name + ".bin";
    auto buf = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(bool(buf)) << path;
    llvm::StringRef bytes = (*buf)->getBuffer();
    ASSERT_EQ(bytes.size(), 16384u * 4) << path;
    int differ = 0;
    for (uint32_t k = 0; k < 16384; ++k) {
      uint32_t x = k * 262147u, want;
      std::memcpy(&want, bytes.data() + 4 * k, 4);
      uint32_t got = std::bit_cast<uint32_t>(eval(op, std::bit_cast<float>(x), unit));
      if (got != want && differ++ == 0)
        ADD_FAILURE() << name << ": first difference at k = " << k
                      << llvm::formatv(", x = {0:x8}: interpreter {1:x8}, "
                                       "H200 {2:x8}",
                                       x, got, want)
                             .str();
    }
    EXPECT_EQ(differ, 0) << name << ": of 16384 captured inputs (" << path
                         << ")";
  }
}

} // namespace
