//===- tests/runtime/CApiTest.cpp - The C API's validation, no GPU --------===//
//
// Every validation path of bitfold_template / bitfold_launch with its exact
// message, and the no-driver error. The driver is pointed at a missing
// library ($BITFOLD_LIBCUDA) so a launch that passes validation fails with
// BITFOLD_ERROR_NO_DRIVER; device pointers are fake addresses that nothing
// may dereference. Codegen is the fake one (FakeCodegen.cpp).
//
//===----------------------------------------------------------------------===//

#include "capi/CApiInternal.h"
#include "keys/Errors.h"
#include "runtime/Status.h"
#include "runtime/bitfold.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

const char *kMissingDriver = "/nonexistent/bitfold-test/libcuda.so.1";

// Before any test runs: no driver in this process.
const bool driverHidden = [] {
  ::setenv("BITFOLD_LIBCUDA", kMissingDriver, 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

constexpr DLDataType kBF16{kDLBfloat, 16, 1};
constexpr DLDataType kF16{kDLFloat, 16, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};

/// A DLTensor with its own shape/stride storage; data is a fake address.
struct Tensor {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  Tensor(std::vector<int64_t> shp, uintptr_t addr, DLDataType dt = kBF16,
         std::vector<int64_t> str = {})
      : shape(std::move(shp)), strides(std::move(str)) {
    t.data = reinterpret_cast<void *>(addr);
    t.device = {kDLCUDA, 0};
    t.ndim = int(shape.size());
    t.dtype = dt;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = 0;
  }
  Tensor(const Tensor &o) : shape(o.shape), strides(o.strides), t(o.t) {
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
  Tensor &operator=(const Tensor &o) {
    shape = o.shape;
    strides = o.strides;
    t = o.t;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    return *this;
  }
};

class CApi : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(driverHidden);
    ASSERT_EQ(bitfold_runtime_create(nullptr, &rt), BITFOLD_SUCCESS)
        << bitfold_last_error();
  }
  void TearDown() override { bitfold_runtime_destroy(rt); }

  bitfold_kernel *kernel(const char *name, const char *params = nullptr) {
    bitfold_kernel *k = nullptr;
    EXPECT_EQ(bitfold_template(rt, name, params, &k), BITFOLD_SUCCESS)
        << bitfold_last_error();
    return k;
  }

  /// Launches; returns the status and leaves the message in `message`.
  bitfold_status launch(bitfold_kernel *k, std::vector<Tensor *> ts,
                        std::vector<float> scalars = {1e-6f}) {
    std::vector<const DLTensor *> ptrs;
    for (Tensor *t : ts)
      ptrs.push_back(t ? &t->t : nullptr);
    bitfold_status s = bitfold_launch(k, ptrs.data(), int(ptrs.size()),
                                      scalars.data(), int(scalars.size()),
                                      nullptr);
    message = bitfold_last_error();
    return s;
  }

  void expectMessage(std::initializer_list<const char *> parts) {
    for (const char *p : parts)
      EXPECT_NE(message.find(p), std::string::npos)
          << "missing '" << p << "' in: " << message;
  }

  bitfold_runtime *rt = nullptr;
  std::string message;
};

/// ln_modulate's operands for (B, S, D), valid and 16-byte aligned.
struct LnModulate {
  Tensor x, scale, shift, y;
  LnModulate(int64_t B, int64_t S, int64_t D)
      : x({B, S, D}, 0x10000000), scale({B, D}, 0x20000000),
        shift({B, D}, 0x30000000), y({B, S, D}, 0x40000000) {}
  std::vector<Tensor *> all() { return {&x, &scale, &shift, &y}; }
};

} // namespace

// ---- Runtime and template lookup -------------------------------------------

TEST(CApiBasics, StatusNamesAndVersion) {
  EXPECT_STREQ(bitfold_status_name(BITFOLD_ERROR_SHAPE), "BITFOLD_ERROR_SHAPE");
  EXPECT_STREQ(bitfold_status_name(BITFOLD_ERROR_NO_DRIVER),
               "BITFOLD_ERROR_NO_DRIVER");
  EXPECT_STRNE(bitfold_version(), "");
  EXPECT_GE(bitfold_num_templates(), 6);
  EXPECT_STREQ(bitfold_template_name(0), "ln_modulate");
  EXPECT_EQ(bitfold_template_name(-1), nullptr);
  EXPECT_EQ(bitfold_template_name(1000), nullptr);
}

TEST(CApiBasics, RegisteredKernelNamesMatchTheirOldTemplateAliases) {
  ASSERT_EQ(bitfold_num_registered_kernels(), bitfold_num_templates());
  for (int i = -1; i <= bitfold_num_registered_kernels(); ++i)
    EXPECT_EQ(bitfold_registered_kernel_name(i), bitfold_template_name(i)) << i;
  EXPECT_STREQ(bitfold_registered_kernel_name(0), "ln_modulate");
}

TEST(CApiStatusMap, EachErrorKindMapsToItsStatus) {
  using namespace bitfold;
  using keys::ErrorKind;
  const std::pair<ErrorKind, bitfold_status> expected[] = {
      {ErrorKind::Usage, BITFOLD_ERROR_INVALID_ARGUMENT},
      {ErrorKind::BitsDiffer, BITFOLD_ERROR_INTERNAL},
      {ErrorKind::Compile, BITFOLD_ERROR_COMPILE},
      {ErrorKind::Driver, BITFOLD_ERROR_CUDA},
      {ErrorKind::Cache, BITFOLD_ERROR_INTERNAL},
      {ErrorKind::Tune, BITFOLD_ERROR_INTERNAL}};
  for (auto [kind, status] : expected)
    EXPECT_EQ(runtime::statusFor(kind), status) << keys::errorKindName(kind);
  std::string msg;
  EXPECT_EQ(runtime::takeCStatus(keys::compileError("ptxas failed"), msg),
            BITFOLD_ERROR_COMPILE);
  EXPECT_EQ(msg, "ptxas failed");
  msg.clear();
  EXPECT_EQ(runtime::takeCStatus(keys::usageError("bad dtype"), msg),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  msg.clear();
  // The runtime's own errors keep their code; anything untyped is internal.
  EXPECT_EQ(runtime::takeCStatus(
                runtime::runtimeError(BITFOLD_ERROR_SHAPE, "bad shape"), msg),
            BITFOLD_ERROR_SHAPE);
  msg.clear();
  EXPECT_EQ(runtime::takeCStatus(llvm::createStringError("odd"), msg),
            BITFOLD_ERROR_INTERNAL);
  EXPECT_EQ(msg, "odd");
}

TEST(CApiBasics, CreateRejectsNullOut) {
  EXPECT_EQ(bitfold_runtime_create(nullptr, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(), "bitfold_runtime_create: out is NULL");
  bitfold_runtime_destroy(nullptr); // a no-op
}

TEST(CApiBasics, BadTuneDbIsWarnedAboutAndIgnored) {
  // A DB whose "format" is a number: it threw out of the loader and the
  // runtime creation returned INTERNAL; documented: warned about, ignored.
  char path[] = "/tmp/bitfold-bad-tune-db-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const char text[] = R"({"format": 1, "version": 1, "entries": []})";
  ASSERT_EQ(::write(fd, text, sizeof text - 1), ssize_t(sizeof text - 1));
  ::close(fd);
  std::vector<std::string> warnings;
  bitfold_runtime_options o;
  bitfold_runtime_options_init(&o);
  o.tune_db = path;
  o.warning_user = &warnings;
  o.warning = [](const char *msg, void *user) {
    static_cast<std::vector<std::string> *>(user)->push_back(msg);
  };
  bitfold_runtime *rt = nullptr;
  EXPECT_EQ(bitfold_runtime_create(&o, &rt), BITFOLD_SUCCESS)
      << bitfold_last_error();
  bitfold_runtime_destroy(rt);
  ::unlink(path);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("not used"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("not a bitfold tune DB"), std::string::npos)
      << warnings[0];
}

TEST_F(CApi, OldTemplateAliasGivesTheKernelOfTheRegistryName) {
  bitfold_kernel *byNewName = nullptr, *byOldName = nullptr;
  ASSERT_EQ(
      bitfold_kernel_from_registry(rt, "ln_modulate", "dtype=bf16", &byNewName),
      BITFOLD_SUCCESS)
      << bitfold_last_error();
  ASSERT_EQ(bitfold_template(rt, "ln_modulate", "dtype=bf16", &byOldName),
            BITFOLD_SUCCESS)
      << bitfold_last_error();
  EXPECT_EQ(byNewName, byOldName);
  // Each name reports errors under the function the caller called.
  bitfold_kernel *k = nullptr;
  EXPECT_EQ(bitfold_kernel_from_registry(rt, nullptr, nullptr, &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_kernel_from_registry: name is NULL");
}

TEST_F(CApi, TemplateLookupErrors) {
  bitfold_kernel *k = reinterpret_cast<bitfold_kernel *>(0x1);
  EXPECT_EQ(bitfold_template(rt, "layer_norm_9000", nullptr, &k),
            BITFOLD_ERROR_UNKNOWN_TEMPLATE);
  EXPECT_EQ(k, nullptr);
  message = bitfold_last_error();
  expectMessage({"no template 'layer_norm_9000'", "ln_modulate",
                 "qk_layernorm", "conv_bias"});

  EXPECT_EQ(bitfold_template(nullptr, "ln_modulate", nullptr, &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(), "bitfold_template: runtime is NULL");
  EXPECT_EQ(bitfold_template(rt, nullptr, nullptr, &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(), "bitfold_template: name is NULL");
  EXPECT_EQ(bitfold_template(rt, "ln_modulate", nullptr, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(), "bitfold_template: out is NULL");
}

TEST_F(CApi, TemplateParameterErrors) {
  bitfold_kernel *k = nullptr;
  EXPECT_EQ(bitfold_template(rt, "ln_modulate", "dtype=bf17", &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"dtype='bf17' is not a dtype (bf16, f16, f32)"});

  EXPECT_EQ(bitfold_template(rt, "ln_modulate", "residual=1", &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"unknown parameter 'residual' (ln_modulate takes: dtype)"});

  EXPECT_EQ(bitfold_template(rt, "conv_bias", "dtype", &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"'dtype' is not key=value"});

  EXPECT_EQ(bitfold_template(rt, "conv_bias", "dtype=f16 dtype=f32", &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"'dtype' given twice"});

  EXPECT_EQ(bitfold_template(rt, "residual_gate", "gate=sometimes", &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"gate='sometimes' is not full, per_batch or global"});

  // The template's own check: a bias dtype other than x's or f32.
  EXPECT_EQ(bitfold_template(rt, "conv_bias", "dtype=bf16,bias_dtype=f16", &k),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"conv_bias: bias must be bf16 (x's dtype) or f32, found f16"});
}

TEST_F(CApi, SameParametersGiveTheSameKernel) {
  bitfold_kernel *a = kernel("ln_modulate");
  bitfold_kernel *b = kernel("ln_modulate", "dtype=bf16");
  bitfold_kernel *c = kernel("ln_modulate", "dtype=f16");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_STREQ(bitfold_last_error(), "") << "a success clears the message";
}

TEST_F(CApi, KernelDescribesItsTensorsAndScalars) {
  bitfold_kernel *k = kernel("ln_modulate");
  ASSERT_EQ(bitfold_kernel_num_tensors(k), 4);
  const char *names[] = {"x", "scale", "shift", "y"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_STREQ(bitfold_kernel_tensor_name(k, i), names[i]);
    EXPECT_EQ(bitfold_kernel_tensor_is_output(k, i), i == 3);
  }
  EXPECT_EQ(bitfold_kernel_tensor_name(k, 4), nullptr);
  EXPECT_EQ(bitfold_kernel_num_scalars(k), 1);
  EXPECT_STREQ(bitfold_kernel_scalar_name(k, 0), "eps");
  EXPECT_EQ(bitfold_kernel_num_groups(k), 1);

  bitfold_kernel *qk = kernel("qk_layernorm");
  EXPECT_EQ(bitfold_kernel_num_groups(qk), 2);
  ASSERT_EQ(bitfold_kernel_num_tensors(qk), 4);
  EXPECT_STREQ(bitfold_kernel_tensor_name(qk, 0), "x[0]");
  EXPECT_STREQ(bitfold_kernel_tensor_name(qk, 3), "y[1]");

  bitfold_kernel *rms = kernel("rmsnorm_modulate");
  ASSERT_EQ(bitfold_kernel_num_tensors(rms), 5);
  EXPECT_STREQ(bitfold_kernel_tensor_name(rms, 1), "weight");
}

// ---- Launch: arguments -----------------------------------------------------

TEST_F(CApi, LaunchArgumentCounts) {
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(1, 8, 64);
  EXPECT_EQ(bitfold_launch(nullptr, nullptr, 0, nullptr, 0, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(), "bitfold_launch: kernel is NULL");

  float eps = 1e-6f;
  EXPECT_EQ(bitfold_launch(k, nullptr, 4, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "ln_modulate takes 4 tensors (x, scale, shift, y); tensors is "
               "NULL");

  EXPECT_EQ(launch(k, {&ln.x, &ln.scale, &ln.shift}),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "ln_modulate takes 4 tensors (x, scale, shift, y); 3 given");

  EXPECT_EQ(launch(k, {&ln.x, &ln.scale, nullptr, &ln.y}),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "ln_modulate: tensor 2 ('shift'): is NULL");

  EXPECT_EQ(launch(k, ln.all(), {}), BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "ln_modulate takes 1 scalar(s) (eps); 0 given");

  const DLTensor *ts[] = {&ln.x.t, &ln.scale.t, &ln.shift.t, &ln.y.t};
  EXPECT_EQ(bitfold_launch(k, ts, 4, nullptr, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "ln_modulate takes 1 scalar(s) (eps); scalars is NULL");
}

TEST_F(CApi, LaunchRejectsHostAndForeignMemory) {
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(1, 8, 64);
  ln.x.t.device = {kDLCPU, 0};
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DEVICE);
  EXPECT_EQ(message, "ln_modulate: tensor 0 ('x'): is in host memory "
                     "(kDLCPU); bitfold kernels read and write CUDA device "
                     "memory (kDLCUDA)");

  ln.x.t.device = {kDLCUDAHost, 0};
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DEVICE);
  expectMessage({"tensor 0 ('x'): is pinned host memory (kDLCUDAHost)"});

  ln.x.t.device = {kDLROCM, 0};
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DEVICE);
  expectMessage({"is on DLPack device type 10"});

  ln.x.t.device = {kDLCUDA, 0};
  ln.shift.t.device = {kDLCUDA, 1};
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DEVICE);
  EXPECT_EQ(message, "ln_modulate: tensor 2 ('shift'): is on cuda:1 but "
                     "tensor 0 ('x') is on cuda:0; all tensors of a launch "
                     "must be on one device");
}

TEST_F(CApi, LaunchRejectsWrongDtypes) {
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(1, 8, 64);
  ln.scale.t.dtype = kF32;
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DTYPE);
  EXPECT_EQ(message, "ln_modulate: tensor 1 ('scale'): expected bf16, found f32");
  ln.scale.t.dtype = kF16;
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DTYPE);
  EXPECT_EQ(message, "ln_modulate: tensor 1 ('scale'): expected bf16, found f16");
  ln.scale.t.dtype = DLDataType{kDLBfloat, 16, 2};
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DTYPE);
  expectMessage({"expected bf16, found bf16 x2 lanes"});
  ln.scale.t.dtype = DLDataType{kDLInt, 8, 1};
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_DTYPE);
  expectMessage({"expected bf16, found int8"});
}

TEST_F(CApi, LaunchRejectsShapeMismatches) {
  bitfold_kernel *k = kernel("ln_modulate");
  {
    LnModulate ln(1, 8, 64);
    ln.y.shape[2] = 60;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
    EXPECT_EQ(message, "ln_modulate: tensor 3 ('y'): is 8 rows x 60 columns "
                       "(shape (1, 8, 60)) but 'x' is 8 rows x 64 columns "
                       "(shape (1, 8, 64))");
  }
  {
    LnModulate ln(2, 4, 64); // 8 rows
    ln.scale.shape[0] = 3;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
    EXPECT_EQ(message, "ln_modulate: tensor 1 ('scale'): has 3 rows, one per "
                       "batch, which does not divide the 8 rows of 'x' (rows "
                       "= batches x S); shapes (3, 64) and (2, 4, 64)");
  }
  {
    LnModulate ln(2, 4, 64);
    ln.shift.shape[0] = 4; // S = 2, but scale says S = 4
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
    EXPECT_EQ(message, "ln_modulate: tensor 2 ('shift'): implies S = 2 rows "
                       "per batch (4 batches), but tensor 1 ('scale') implies "
                       "S = 4");
  }
  {
    LnModulate ln(2, 4, 64);
    ln.scale.shape[1] = 32;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
    expectMessage({"tensor 1 ('scale'): has 32 columns (shape (2, 32)) but "
                   "'x' has 64 (shape (2, 4, 64))"});
  }
  {
    LnModulate ln(1, 8, 64);
    ln.x.shape[1] = -3;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
    EXPECT_EQ(message,
              "ln_modulate: tensor 0 ('x'): dimension 1 has negative size -3");
  }
  {
    LnModulate ln(1, 8, 64);
    ln.x.t.ndim = 0;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
    expectMessage({"tensor 0 ('x'): is 0-dimensional"});
  }
}

TEST_F(CApi, LaunchEnforcesTheReferenceColumnGuard) {
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(1, 8, 66);
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
  EXPECT_EQ(message, "ln_modulate: the column count must be a multiple of 4 "
                     "in [4, 16777216], the conditions under which its "
                     "reference runs the kernel it reproduces; found 66 "
                     "columns (shape (1, 8, 66))");
  LnModulate big(1, 1, (int64_t(1) << 24) + 4);
  EXPECT_EQ(launch(k, big.all()), BITFOLD_ERROR_SHAPE);
  expectMessage({"found 16777220 columns"});

  bitfold_kernel *rms = kernel("rmsnorm_modulate");
  Tensor x({1, 4, 1000}, 0x10000000), w({1000}, 0x20000000),
      sc({1, 1000}, 0x30000000), sh({1, 1000}, 0x40000000),
      y({1, 4, 1000}, 0x50000000);
  EXPECT_EQ(launch(rms, {&x, &w, &sc, &sh, &y}), BITFOLD_ERROR_SHAPE);
  expectMessage({"flashinfer's order is defined here for D = 64 * threads per "
                 "row (2048 or 4096), found D = 1000"});
}

TEST_F(CApi, LaunchRejectsUnsupportedStrides) {
  bitfold_kernel *k = kernel("ln_modulate");
  {
    LnModulate ln(1, 8, 64);
    ln.x = Tensor({1, 8, 64}, 0x10000000, kBF16, {1024, 128, 2});
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_STRIDE);
    EXPECT_EQ(message, "ln_modulate: tensor 0 ('x'): the last dimension "
                       "(columns) must be packed (stride 1); shape (1, 8, "
                       "64), strides (1024, 128, 2)");
  }
  {
    LnModulate ln(2, 8, 64);
    // Batches 1000 elements apart but rows 64 apart: two row levels, yet
    // the scale (per batch) takes only one.
    ln.scale = Tensor({2, 2, 64}, 0x20000000, kBF16, {1000, 64, 1});
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_STRIDE);
    EXPECT_EQ(message, "ln_modulate: tensor 1 ('scale'): dimensions 0..1 "
                       "cannot be merged into one row dimension: stride[0] "
                       "is 1000, rows need 128; shape (2, 2, 64), strides "
                       "(1000, 64, 1)");
  }
  {
    LnModulate ln(2, 8, 64);
    // Three strides (batch, a group of 4 rows, rows): not two levels.
    ln.x = Tensor({2, 2, 4, 64}, 0x10000000, kBF16, {5000, 1000, 64, 1});
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_STRIDE);
    EXPECT_EQ(message, "ln_modulate: tensor 0 ('x'): dimensions 0..2 cannot "
                       "be merged into two row levels (rows one stride apart "
                       "in groups one stride apart): stride[0] is 5000, dims "
                       "1..2 need 2000; shape (2, 2, 4, 64), strides (5000, "
                       "1000, 64, 1)");
  }
  {
    LnModulate ln(1, 8, 64);
    ln.y = Tensor({1, 8, 64}, 0x40000000, kBF16, {512, 32, 1});
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_STRIDE);
    expectMessage({"tensor 3 ('y'): row stride 32 is smaller than the 64 "
                   "columns (rows would overlap)"});
  }
  {
    LnModulate ln(1, 8, 64);
    ln.x = Tensor({1, 8, 64}, 0x10000000, kBF16, {512, -64, 1});
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_STRIDE);
    expectMessage({"negative row stride -64 is not supported"});
  }
}

TEST_F(CApi, ChunksOfAWiderTensorAreAccepted) {
  // scale and shift: chunks 0 and 1 of one (B, 4D) projection; any row
  // stride >= D is fine, so validation passes and the launch reaches the
  // (missing) driver.
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(2, 8, 64);
  ln.scale = Tensor({2, 64}, 0x20000000, kBF16, {256, 1});
  ln.shift = Tensor({2, 64}, 0x20000000 + 64 * 2, kBF16, {256, 1});
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_NO_DRIVER) << message;
}

TEST_F(CApi, LaunchChecksAlignment) {
  bitfold_kernel *k = kernel("ln_modulate");
  {
    LnModulate ln(1, 8, 64);
    ln.x.t.data = reinterpret_cast<void *>(0x10000001);
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_ALIGNMENT);
    EXPECT_EQ(message, "ln_modulate: tensor 0 ('x'): address 0x10000001 "
                       "(data + byte_offset 0) is not aligned to its 2-byte "
                       "elements");
  }
  {
    LnModulate ln(1, 8, 64);
    ln.x.t.byte_offset = 2; // aten's condition: x and y 8-byte aligned
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_ALIGNMENT);
    EXPECT_EQ(message, "ln_modulate: tensor 0 ('x'): address 0x10000002 is "
                       "not 8-byte aligned; ln_modulate reproduces aten's "
                       "vectorized layer norm, which aten runs only when x "
                       "and y are 8-byte aligned (otherwise it takes another "
                       "kernel with different bits)");
  }
  {
    LnModulate ln(1, 8, 64);
    ln.y.t.data = reinterpret_cast<void *>(0x40000004);
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_ALIGNMENT);
    expectMessage({"tensor 3 ('y'): address 0x40000004 is not 8-byte aligned"});
  }
  {
    // f32: aten needs 16 bytes.
    bitfold_kernel *k32 = kernel("ln_modulate", "dtype=f32");
    Tensor x({1, 8, 64}, 0x10000008, kF32), sc({1, 64}, 0x20000000, kF32),
        sh({1, 64}, 0x30000000, kF32), y({1, 8, 64}, 0x40000000, kF32);
    EXPECT_EQ(launch(k32, {&x, &sc, &sh, &y}), BITFOLD_ERROR_ALIGNMENT);
    expectMessage({"is not 16-byte aligned"});
  }
  {
    // scale and shift need only their element size.
    LnModulate ln(1, 8, 64);
    ln.scale.t.byte_offset = 2;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_NO_DRIVER) << message;
  }
}

TEST_F(CApi, LaunchRejectsNullDataButAcceptsEmptyTensors) {
  bitfold_kernel *k = kernel("ln_modulate");
  {
    LnModulate ln(1, 8, 64);
    ln.shift.t.data = nullptr;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(message, "ln_modulate: tensor 2 ('shift'): data pointer is NULL "
                       "for shape (1, 64)");
  }
  {
    // Zero rows: nothing to launch, so no driver is needed.
    LnModulate ln(1, 0, 64);
    ln.x.t.data = nullptr;
    ln.y.t.data = nullptr;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_SUCCESS) << message;
    EXPECT_EQ(message, "");
  }
}

TEST_F(CApi, LaunchRejectsOverlappingOutputs) {
  bitfold_kernel *k = kernel("ln_modulate");
  {
    LnModulate ln(1, 8, 64);
    ln.y.t.data = ln.x.t.data;
    EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_UNSUPPORTED);
    EXPECT_EQ(message, "ln_modulate: tensor 3 ('y'): overlaps tensor 0 ('x') "
                       "in memory; ln_modulate reads whole rows before "
                       "writing; it runs in place only where the program "
                       "declares it (output y ... aliases x)");
  }
  bitfold_kernel *gate = kernel("residual_gate");
  Tensor r({1, 8, 64}, 0x10000000), u({1, 8, 64}, 0x20000000),
      g({1, 8, 64}, 0x30000000);
  {
    Tensor y = r; // exactly in place: fine for an elementwise kernel
    EXPECT_EQ(launch(gate, {&r, &u, &g, &y}, {}), BITFOLD_ERROR_NO_DRIVER)
        << message;
  }
  {
    Tensor y = r;
    y.t.byte_offset = 4; // shifted by two elements: not allowed
    EXPECT_EQ(launch(gate, {&r, &u, &g, &y}, {}), BITFOLD_ERROR_UNSUPPORTED);
    expectMessage({"tensor 3 ('y'): overlaps tensor 0 ('residual') in memory; "
                   "residual_gate can write over an input only exactly"});
  }
}

// An output of a wider dtype placed right after its input (a bf16 x, then
// the f32 y of an f32-gamma Wan norm) does not overlap it: each operand's
// extent is measured with its own element size.
TEST_F(CApi, OutputsOfAnotherDtypeRightAfterTheInputDoNotOverlap) {
  bitfold_kernel *k = kernel("wan_rmsnorm_silu", "gamma=f32,bias=0");
  // [1, 96, 1, 4, 4]: 16 pixels of 96 channels, dense channels-last.
  std::vector<int64_t> cl = {96 * 16, 1, 96 * 16, 96 * 4, 96};
  const uint64_t xBytes = 96 * 16 * 2;
  Tensor x({1, 96, 1, 4, 4}, 0x10000000, kBF16, cl);
  Tensor gamma({96}, 0x20000000, kF32);
  Tensor y({1, 96, 1, 4, 4}, 0x10000000 + xBytes, kF32, cl);
  EXPECT_EQ(launch(k, {&x, &gamma, &y}, {9.797959f}), BITFOLD_ERROR_NO_DRIVER)
      << message;
  Tensor y2({1, 96, 1, 4, 4}, 0x10000000 + xBytes - 4, kF32, cl);
  EXPECT_EQ(launch(k, {&x, &gamma, &y2}, {9.797959f}),
            BITFOLD_ERROR_UNSUPPORTED);
}

// aten's reduction order holds for a row range: fewer rows are refused
// before any launch, naming the order.
// Every row count from 1 on has its row class's definition; past 2^31
// bytes of x aten splits the launch, which no definition reproduces.
TEST_F(CApi, RowCountsOutsideTheFoldOrdersRangeAreRefused) {
  bitfold_kernel *k = kernel("wan_rmsnorm_silu", "bias=0");
  const int64_t hw = 4096;
  std::vector<int64_t> cl = {96 * hw * hw, 1, 96 * hw * hw, 96 * hw, 96};
  Tensor x({1, 96, 1, hw, hw}, 0x10000000, kBF16, cl);
  Tensor gamma({96}, 0x20000000);
  Tensor y({1, 96, 1, hw, hw}, 0x10000000, kBF16, cl);
  EXPECT_EQ(launch(k, {&x, &gamma, &y}, {9.797959f}), BITFOLD_ERROR_SHAPE);
  expectMessage({"operand 'x' has 16777216 rows; fold order 'aten_reduce_c96"});
}

TEST_F(CApi, ChannelsLastOperands) {
  bitfold_kernel *k = kernel("conv_bias");
  // [N, C, D, H, W] = [1, 96, 4, 8, 8], dense channels-last strides.
  std::vector<int64_t> cl = {96 * 4 * 8 * 8, 1, 96 * 8 * 8, 96 * 8, 96};
  Tensor x({1, 96, 4, 8, 8}, 0x10000000, kBF16, cl);
  Tensor bias({96}, 0x20000000);
  Tensor y({1, 96, 4, 8, 8}, 0x30000000, kBF16, cl);
  EXPECT_EQ(launch(k, {&x, &bias, &y}, {}), BITFOLD_ERROR_NO_DRIVER) << message;

  Tensor nchw({1, 96, 4, 8, 8}, 0x10000000); // compact NCDHW
  EXPECT_EQ(launch(k, {&nchw, &bias, &y}, {}), BITFOLD_ERROR_STRIDE);
  EXPECT_EQ(message, "conv_bias: tensor 0 ('x'): is not dense channels-last: "
                     "shape (1, 96, 4, 8, 8) has strides (24576, 256, 64, 8, "
                     "1), channels-last needs (24576, 1, 6144, 768, 96) (e.g. "
                     "torch's .contiguous(memory_format="
                     "torch.channels_last_3d)");

  Tensor threeD({96, 8, 8}, 0x10000000);
  EXPECT_EQ(launch(k, {&threeD, &bias, &y}, {}), BITFOLD_ERROR_SHAPE);
  expectMessage({"a channels-last operand needs 4 (N, C, H, W) or 5 (N, C, D, "
                 "H, W) dimensions; found shape (96, 8, 8)"});

  Tensor shortBias({95}, 0x20000000);
  EXPECT_EQ(launch(k, {&x, &shortBias, &y}, {}), BITFOLD_ERROR_SHAPE);
  EXPECT_EQ(message, "conv_bias: tensor 1 ('bias'): must hold one value per "
                     "column, 96 values (shape (96,)); found shape (95,)");

  // 4-D NHWC, and C = 1 (the reference needs C > 1).
  Tensor x4({2, 1, 9, 7}, 0x10000000, kBF16, {63, 1, 7, 1});
  Tensor b1({1}, 0x20000000), y4({2, 1, 9, 7}, 0x30000000, kBF16, {63, 1, 7, 1});
  EXPECT_EQ(launch(k, {&x4, &b1, &y4}, {}), BITFOLD_ERROR_SHAPE);
  expectMessage({"the column count must be a multiple of 1 in [2, "});
}

TEST_F(CApi, LaunchWithoutADriverSaysWhy) {
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(1, 8, 64);
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_NO_DRIVER);
  expectMessage({"cannot launch ln_modulate: cannot load the CUDA driver: "
                 "dlopen(\"/nonexistent/bitfold-test/libcuda.so.1\") failed: ",
                 "No such file or directory"});
}

TEST_F(CApi, LastErrorIsPerThread) {
  bitfold_kernel *k = kernel("ln_modulate");
  LnModulate ln(1, 8, 66);
  EXPECT_EQ(launch(k, ln.all()), BITFOLD_ERROR_SHAPE);
  std::string other = "unset";
  std::thread([&] { other = bitfold_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(bitfold_last_error()), "");
}

TEST_F(CApi, SetConfigValidatesText) {
  bitfold_kernel *k = kernel("ln_modulate");
  EXPECT_EQ(bitfold_kernel_set_config(k, "fast please"),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  message = bitfold_last_error();
  expectMessage({"ln_modulate: bad config 'fast please'"});
  EXPECT_EQ(bitfold_kernel_set_config(k, "r1.t128.v8.p1"), BITFOLD_SUCCESS);
  EXPECT_EQ(bitfold_kernel_set_config(k, nullptr), BITFOLD_SUCCESS);
  EXPECT_EQ(bitfold_kernel_set_config(nullptr, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
}
