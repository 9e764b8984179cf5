//===- tests/runtime/SourceKernelTest.cpp - bitfold_kernel_from_source ----===//
//
// A kernel created from program text goes through the registry and then the
// very path a template's kernel takes: the handle's metadata, a launch on
// the fake driver (FakeCuda.cpp) with the fake compiler, one compile per
// shape class, the disk cache across runtimes. Bad programs: line:column
// errors, the verifier's message, name clashes, and nothing registered.
//
//===----------------------------------------------------------------------===//

#include "FakeCodegen.h"
#include "FakeCuda.h"

#include "dsl/Parser.h"
#include "runtime/bitfold.hpp"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

using namespace bitfold::runtime;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::setenv("BITFOLD_QUIET", "1", 1);
  return true;
}();

const char *kScale = R"(# a user program: y = x * a
bitfold.row_program src_user_scale v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16777216
input x : bf16 row_major per_element
scalar a : f32 default 2
body:
  %x = load x : bf16
  %xf = extend %x : f32
  %a = scalar a : f32
  %p = mul %xf, %a : f32
  %y = round to bf16 %p : bf16
  output y : bf16 row_major = %y
)";

std::string replaced(std::string text, const std::string &from,
                     const std::string &to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

struct Tensor {
  std::vector<int64_t> shape;
  DLTensor t{};
  Tensor(std::vector<int64_t> shp, uintptr_t addr) : shape(std::move(shp)) {
    t.data = reinterpret_cast<void *>(addr);
    t.device = {kDLCUDA, 0};
    t.ndim = int(shape.size());
    t.dtype = {kDLBfloat, 16, 1};
    t.shape = shape.data();
  }
};

int driverCount(const char *what) {
  void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  auto count = lib ? (FakeCountFn)dlsym(lib, "fake_cuda_count") : nullptr;
  return count ? count(what) : -1;
}

class SourceKernel : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(fakeDriver);
    ASSERT_FALSE(bool(llvm::sys::fs::createUniqueDirectory("bitfold-src",
                                                           cacheDir)));
    rt = create();
  }
  void TearDown() override {
    bitfold_runtime_destroy(rt);
    llvm::sys::fs::remove_directories(cacheDir);
  }
  bitfold_runtime *create() {
    bitfold_runtime_options o;
    bitfold_runtime_options_init(&o);
    std::string dir = cacheDir.str().str();
    o.cache_dir = dir.c_str();
    o.disk_cache = 1;
    bitfold_runtime *r = nullptr;
    EXPECT_EQ(bitfold_runtime_create(&o, &r), BITFOLD_SUCCESS)
        << bitfold_last_error();
    return r;
  }
  bitfold_status fromSource(const std::string &text, bitfold_kernel **k,
                            bitfold_runtime *on = nullptr) {
    return bitfold_kernel_from_source(on ? on : rt, text.data(), text.size(),
                                      k);
  }
  bitfold_status launch(bitfold_kernel *k, int64_t rows, int64_t cols) {
    Tensor x({rows, cols}, 0x10000000), y({rows, cols}, 0x20000000);
    const DLTensor *ts[] = {&x.t, &y.t};
    float a = 3.0f;
    return bitfold_launch(k, ts, 2, &a, 1, nullptr);
  }
  llvm::SmallString<128> cacheDir;
  bitfold_runtime *rt = nullptr;
};

} // namespace

TEST_F(SourceKernel, LaunchesThroughTheTemplatePathWithItsOperands) {
  bitfold_kernel *k = nullptr;
  ASSERT_EQ(fromSource(kScale, &k), BITFOLD_SUCCESS) << bitfold_last_error();
  ASSERT_EQ(bitfold_kernel_num_tensors(k), 2);
  EXPECT_STREQ(bitfold_kernel_tensor_name(k, 0), "x");
  EXPECT_STREQ(bitfold_kernel_tensor_name(k, 1), "y");
  EXPECT_TRUE(bitfold_kernel_tensor_is_output(k, 1));
  ASSERT_EQ(bitfold_kernel_num_scalars(k), 1);
  EXPECT_STREQ(bitfold_kernel_scalar_name(k, 0), "a");

  int compiles = fake::fakeCompiles;
  ASSERT_EQ(launch(k, 4, 64), BITFOLD_SUCCESS) << bitfold_last_error();
  int launches = driverCount("cuLaunchKernel"); // the driver is loaded now
  ASSERT_EQ(launch(k, 9, 64), BITFOLD_SUCCESS) << bitfold_last_error();
  EXPECT_EQ(fake::fakeCompiles, compiles + 1) << "one shape class, one compile";
  ASSERT_EQ(launch(k, 4, 128), BITFOLD_SUCCESS) << bitfold_last_error();
  EXPECT_EQ(fake::fakeCompiles, compiles + 2) << "a new column count compiles";
  EXPECT_EQ(driverCount("cuLaunchKernel"), launches + 2);

  // The same text again, and the name through bitfold_template: one kernel.
  bitfold_kernel *again = nullptr, *byName = nullptr;
  ASSERT_EQ(fromSource(kScale, &again), BITFOLD_SUCCESS) << bitfold_last_error();
  EXPECT_EQ(again, k);
  ASSERT_EQ(bitfold_template(rt, "src_user_scale", nullptr, &byName),
            BITFOLD_SUCCESS)
      << bitfold_last_error();
  EXPECT_EQ(byName, k);
}

TEST_F(SourceKernel, ANewRuntimeReadsTheDiskCache) {
  std::string text = replaced(kScale, "src_user_scale", "src_user_disk");
  bitfold_kernel *k = nullptr;
  ASSERT_EQ(fromSource(text, &k), BITFOLD_SUCCESS) << bitfold_last_error();
  ASSERT_EQ(launch(k, 4, 64), BITFOLD_SUCCESS) << bitfold_last_error();

  bitfold_runtime *second = create();
  bitfold_kernel *k2 = nullptr;
  ASSERT_EQ(fromSource(text, &k2, second), BITFOLD_SUCCESS)
      << bitfold_last_error();
  int compiles = fake::fakeCompiles;
  ASSERT_EQ(launch(k2, 4, 64), BITFOLD_SUCCESS) << bitfold_last_error();
  bitfold_cache_stats s{};
  ASSERT_EQ(bitfold_runtime_cache_stats(second, &s), BITFOLD_SUCCESS);
  EXPECT_EQ(fake::fakeCompiles, compiles) << "cache dir " << cacheDir.str().str();
  EXPECT_EQ(s.disk_hits, 1u);
  bitfold_runtime_destroy(second);
}

TEST_F(SourceKernel, MalformedTextGivesLineAndColumnAndRegistersNothing) {
  std::string text = replaced(replaced(kScale, "src_user_scale", "src_bad"),
                              "groups 1", "groups x");
  bitfold_kernel *k = reinterpret_cast<bitfold_kernel *>(0x1);
  EXPECT_EQ(fromSource(text, &k), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(k, nullptr);
  std::string msg = bitfold_last_error();
  EXPECT_NE(msg.find("<source>:3:8: expected"), std::string::npos) << msg;
  EXPECT_EQ(bitfold_template(rt, "src_bad", nullptr, &k),
            BITFOLD_ERROR_UNKNOWN_TEMPLATE);
}

TEST_F(SourceKernel, ALiteralOfThirtyThousandDigitsIsAnErrorNotACrash) {
  std::string text =
      replaced(replaced(kScale, "src_user_scale", "src_long_literal"),
               "%a = scalar a : f32",
               "%a = const 0." + std::string(30000, '7') + " : f32");
  bitfold_kernel *k = nullptr;
  EXPECT_EQ(fromSource(text, &k), BITFOLD_ERROR_INVALID_ARGUMENT);
  std::string msg = bitfold_last_error();
  EXPECT_NE(msg.find("number literal of 30002 characters"), std::string::npos)
      << msg.substr(0, 300);
  EXPECT_EQ(bitfold_template(rt, "src_long_literal", nullptr, &k),
            BITFOLD_ERROR_UNKNOWN_TEMPLATE);
}

TEST_F(SourceKernel, InvalidProgramGivesTheVerifiersMessage) {
  // y is declared bf16 but its value is the unrounded f32 product.
  std::string text =
      replaced(replaced(kScale, "src_user_scale", "src_unverified"),
               "output y : bf16 row_major = %y", "output y : bf16 row_major = %p");
  bitfold_kernel *k = nullptr;
  EXPECT_EQ(fromSource(text, &k), BITFOLD_ERROR_INVALID_ARGUMENT);
  std::string msg = bitfold_last_error();
  EXPECT_NE(msg.find("y"), std::string::npos) << msg;
  EXPECT_EQ(bitfold_template(rt, "src_unverified", nullptr, &k),
            BITFOLD_ERROR_UNKNOWN_TEMPLATE);
}

TEST_F(SourceKernel, AStockNameOrATakenNameIsRefused) {
  bitfold_kernel *k = nullptr;
  EXPECT_EQ(fromSource(replaced(kScale, "src_user_scale", "ln_modulate"), &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  std::string msg = bitfold_last_error();
  EXPECT_NE(msg.find("stock kernel"), std::string::npos) << msg;

  std::string first = replaced(kScale, "src_user_scale", "src_taken");
  ASSERT_EQ(fromSource(first, &k), BITFOLD_SUCCESS) << bitfold_last_error();
  std::string other = replaced(first, "mul %xf, %a", "add %xf, %a");
  EXPECT_EQ(fromSource(other, &k), BITFOLD_ERROR_INVALID_ARGUMENT);
  msg = bitfold_last_error();
  EXPECT_NE(msg.find("a different program named 'src_taken'"),
            std::string::npos)
      << msg;
}

TEST_F(SourceKernel, NullArgumentsAreErrors) {
  bitfold_kernel *k = nullptr;
  EXPECT_EQ(bitfold_kernel_from_source(nullptr, kScale, 3, &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_kernel_from_source(rt, nullptr, 3, &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_kernel_from_source(rt, kScale, 3, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_kernel_from_source: out is NULL");
}

TEST_F(SourceKernel, CppKernelOfADefIsTheKernelOfItsText) {
  std::string text = replaced(kScale, "src_user_scale", "src_cpp_def");
  auto def = bitfold::dsl::parseKernel(text);
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  auto rtpp = bitfold::Runtime::create();
  ASSERT_TRUE(rtpp.ok()) << rtpp.status().message();
  auto byDef = rtpp->kernel(**def);
  ASSERT_TRUE(byDef.ok()) << byDef.status().message();
  auto byText = rtpp->kernelFromSource(text);
  ASSERT_TRUE(byText.ok()) << byText.status().message();
  EXPECT_EQ(byDef->get(), byText->get());
  EXPECT_EQ(byDef->tensorNames(), (std::vector<std::string>{"x", "y"}));
  auto bad = rtpp->kernelFromSource("bitfold.row_program");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), BITFOLD_ERROR_INVALID_ARGUMENT);
}
