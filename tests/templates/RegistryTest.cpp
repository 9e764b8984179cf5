//===- tests/templates/RegistryTest.cpp - Kernels by name -----------------===//
//
// The registry: one parser for parameters (dtype spellings agree
// everywhere), scalar defaults from the DSL, the shape rule read from the
// definition (not the name), overflow and size checks, and a user kernel
// registered at run time.
//
//===----------------------------------------------------------------------===//

#include "templates/Problem.h"
#include "templates/Templates.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace bitfold;
using namespace bitfold::templates;

namespace {

DescriptorRef stock(llvm::StringRef name) {
  DescriptorRef d = Registry::global().find(name);
  EXPECT_TRUE(d) << name.str();
  return d;
}

std::string paramsOf(llvm::StringRef kernel, llvm::StringRef text) {
  auto v = stock(kernel)->parseParams(text);
  if (!v)
    return "error: " + llvm::toString(v.takeError());
  return v->str();
}

TEST(Registry, EveryDtypeSpellingMeansTheSameEverywhere) {
  for (const char *f16 : {"f16", "fp16", "float16", "half"})
    EXPECT_EQ(paramsOf("ln_modulate", std::string("dtype=") + f16), "dtype=f16")
        << f16;
  for (const char *bf16 : {"bf16", "bfloat16"})
    EXPECT_EQ(paramsOf("ln_modulate", std::string("dtype=") + bf16),
              "dtype=bf16");
  EXPECT_EQ(paramsOf("ln_modulate", ""), "dtype=bf16");
  EXPECT_EQ(paramsOf("conv_bias", "dtype=f16"),
            "bias_dtype=f16,dtype=f16,layout=channels_last,residual=0,"
            "residual_layout=same");
  EXPECT_EQ(paramsOf("conv_bias", "residual=true bias_dtype=float"),
            "bias_dtype=f32,dtype=bf16,layout=channels_last,residual=1,"
            "residual_layout=same");
  EXPECT_NE(paramsOf("residual_gate", "gate=sideways")
                .find("gate='sideways' is not full, per_batch or global"),
            std::string::npos);
  EXPECT_NE(paramsOf("conv_bias", "residual=2").find("is not 0 or 1"),
            std::string::npos);
  EXPECT_NE(paramsOf("ln_modulate", "dtype=f16,dtype=f32").find("given twice"),
            std::string::npos);
}

TEST(Registry, ScalarDefaultsComeFromTheDefinition) {
  auto p = makeProblem("ln_modulate", "", "1,4,128");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  ASSERT_EQ(p->def->scalars.size(), 1u);
  EXPECT_EQ(p->def->scalars[0].defaultValue, std::optional<float>(1e-6f));
  EXPECT_EQ(p->scalars, std::vector<float>{1e-6f});
  auto wan = makeProblem("wan_rmsnorm_silu", "", "1,96,1,4,4");
  ASSERT_TRUE(bool(wan)) << llvm::toString(wan.takeError());
  EXPECT_EQ(wan->scalars, std::vector<float>{float(std::sqrt(96.0))});
  llvm::Error e = p->setScalar("scale", 2.0f);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("has no scalar 'scale' "
                                               "(scalars: eps)"),
            std::string::npos);
}

TEST(Registry, ShapeRuleIsReadFromLayoutsAndGroups) {
  // A user kernel named like nothing stock, channels-last: N,C,H,W.
  dsl::RowProgram p("my_bias");
  dsl::Expr x = p.input("x", dsl::DType::BF16, dsl::Layout::ChannelsLast).row();
  p.output("y", dsl::DType::BF16, dsl::Layout::ChannelsLast,
           dsl::round(dsl::DType::BF16, x + dsl::Expr(1.0f)));
  auto def = p.build();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  auto s = shapeFromDims(**def, {2, 32, 4, 8});
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->cols, 32);
  EXPECT_EQ(s->groupRows, std::vector<int64_t>{2 * 4 * 8});
  auto qk = makeProblem("qk_layernorm", "", "1,10,4,128");
  ASSERT_TRUE(bool(qk));
  EXPECT_EQ(qk->shape.groupRows, (std::vector<int64_t>{40, 40}));
  auto ln = makeProblem("ln_modulate", "", "2,10,128");
  ASSERT_TRUE(bool(ln));
  EXPECT_EQ(ln->shape.rowsPerBatch, 10);
}

TEST(Registry, RowProductOverflowIsAnError) {
  for (const char *shape : {"4294967296,4294967296,128", "1,9223372036854775807,2"}) {
    auto p = makeProblem("ln_modulate", "", shape);
    ASSERT_FALSE(bool(p)) << shape;
    EXPECT_NE(llvm::toString(p.takeError()).find("overflows 64 bits"),
              std::string::npos)
        << shape;
  }
  auto tooMany = parseDims("1,1,1,1,1,1,1,1,1");
  EXPECT_FALSE(bool(tooMany));
  llvm::consumeError(tooMany.takeError());
}

TEST(Registry, HostProblemsAreCapped) {
  auto p = makeProblem("ln_modulate", "", "1,8589934592,128");
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  auto h = HostProblem::make(*p, 0);
  ASSERT_FALSE(bool(h));
  EXPECT_NE(llvm::toString(h.takeError()).find("exceed 32 GiB"),
            std::string::npos);
}

TEST(Registry, EverySeedShapeOfEveryKernelMakesAProblem) {
  for (const DescriptorRef &d : Registry::global().all())
    for (const std::string &s : d->seedShapes) {
      auto p = makeProblem(d->name, "", s);
      EXPECT_TRUE(bool(p)) << d->name << " " << s << ": "
                           << (p ? "" : llvm::toString(p.takeError()));
    }
}

TEST(Registry, UserKernelsRegisterAtRunTime) {
  dsl::RowProgram p("user_scale");
  dsl::Expr x = p.input("x", dsl::DType::F32, dsl::Layout::RowMajor).row();
  dsl::Expr a = p.scalar("alpha", 2.0f);
  p.output("y", dsl::DType::F32, dsl::Layout::RowMajor, x * a);
  auto def = p.build();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  ASSERT_FALSE(bool(Registry::global().add(userKernel(*def, "x * alpha", true))));
  auto again = Registry::global().add(userKernel(*def, "twice", true));
  ASSERT_TRUE(bool(again));
  EXPECT_NE(llvm::toString(std::move(again)).find("already registered"),
            std::string::npos);
  auto prob = makeProblem("user_scale", "", "3,16");
  ASSERT_TRUE(bool(prob)) << llvm::toString(prob.takeError());
  EXPECT_EQ(prob->scalars, std::vector<float>{2.0f});
  auto bad = makeProblem("user_scale", "dtype=f16", "3,16");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("user_scale takes: none"),
            std::string::npos);
}

} // namespace
