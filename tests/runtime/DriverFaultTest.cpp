//===- tests/runtime/DriverFaultTest.cpp - Driver faults on a fake driver -===//
//
// The runtime facing a failing driver (FakeCuda.cpp's knobs): a GPU below
// the minimum compute capability, cuModuleLoadData out of memory, a launch
// error, a context gone bad. Each returns a precise status and message; the
// runtime stays usable for other kernels and nothing from a failed step is
// remembered (the next launch loads again).
//
//===----------------------------------------------------------------------===//

#include "FakeCodegen.h"
#include "FakeCuda.h"

#include "cuda/Driver.h"
#include "runtime/Runtime.h"
#include "runtime/Status.h"

#include "llvm/Support/ErrorHandling.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;
using namespace bitfold::policy;

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

int fakeCount(const char *what) {
  void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  auto fn = lib ? (FakeCountFn)dlsym(lib, "fake_cuda_count") : nullptr;
  return fn ? fn(what) : -1;
}

/// Four (4, 64) bf16 tensors for residual_gate on `device`.
struct GateTensors {
  std::vector<int64_t> shape{4, 64};
  DLTensor t[4]{};
  const DLTensor *ptrs[4];
  explicit GateTensors(int device = 0, int64_t cols = 64) {
    shape[1] = cols;
    for (int i = 0; i < 4; ++i) {
      t[i].data = reinterpret_cast<void *>(uintptr_t(0x10000000) * (i + 1));
      t[i].device = {kDLCUDA, device};
      t[i].ndim = 2;
      t[i].dtype = {kDLBfloat, 16, 1};
      t[i].shape = shape.data();
      ptrs[i] = &t[i];
    }
  }
};

/// Sets an environment knob of the fake driver for its lifetime.
struct Knob {
  const char *name;
  Knob(const char *name, const char *value) : name(name) {
    ::setenv(name, value, 1);
  }
  ~Knob() { ::unsetenv(name); }
};

class DriverFault : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(fakeDriver);
    ASSERT_TRUE(bool(driver()));
    RuntimeOptions o;
    o.compiler = fake::fakeCompiler();
    o.cache.disk = false;
    rt = std::make_unique<Runtime>(std::move(o));
  }
  /// Launches residual_gate; returns the status, with the message in `msg`.
  bitfold_status gate(const GateTensors &g, std::string &msg) {
    auto k = rt->findKernel("residual_gate", "");
    if (!k)
      return takeStatus(k.takeError(), msg);
    return takeStatus((*k)->launch(g.ptrs, 4, nullptr, 0, nullptr), msg);
  }
  std::unique_ptr<Runtime> rt;
};

} // namespace

TEST_F(DriverFault, GpuBelowTheMinimumIsRefusedBeforeCodegen) {
  Knob cc("FAKE_CUDA_CC1", "61");
  int compiles = fake::fakeCompiles;
  std::string msg;
  EXPECT_EQ(gate(GateTensors(/*device=*/1), msg), BITFOLD_ERROR_DEVICE) << msg;
  EXPECT_NE(msg.find("cuda:1 ('Fake GTX 1080 #1') has compute capability "
                     "6.1; bitfold needs 8.0 (sm_80) or newer"),
            std::string::npos)
      << msg;
  EXPECT_EQ(fake::fakeCompiles, compiles) << "codegen was reached";
  // The other device still works.
  EXPECT_EQ(gate(GateTensors(0), msg), BITFOLD_SUCCESS) << msg;
}

TEST_F(DriverFault, ModuleLoadOutOfMemoryIsReportedAndRetriedLater) {
  std::string msg;
  int loads = fakeCount("cuModuleLoadData");
  {
    Knob oom("FAKE_CUDA_LOAD_RESULT", "2");
    EXPECT_EQ(gate(GateTensors(), msg), BITFOLD_ERROR_CUDA);
    EXPECT_NE(msg.find("cuModuleLoadData"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << msg;
  }
  // Nothing of the failed load is kept: the next launch loads again and
  // works, without compiling again.
  int compiles = fake::fakeCompiles;
  EXPECT_EQ(gate(GateTensors(), msg), BITFOLD_SUCCESS) << msg;
  EXPECT_EQ(fakeCount("cuModuleLoadData"), loads + 2);
  EXPECT_EQ(fake::fakeCompiles, compiles);
  // And another kernel (another shape class) too.
  EXPECT_EQ(gate(GateTensors(0, 128), msg), BITFOLD_SUCCESS) << msg;
}

TEST_F(DriverFault, LaunchErrorLeavesTheRuntimeUsable) {
  std::string msg;
  ASSERT_EQ(gate(GateTensors(), msg), BITFOLD_SUCCESS) << msg;
  {
    Knob bad("FAKE_CUDA_LAUNCH_RESULT", "700");
    EXPECT_EQ(gate(GateTensors(), msg), BITFOLD_ERROR_CUDA);
    EXPECT_NE(msg.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << msg;
  }
  EXPECT_EQ(gate(GateTensors(), msg), BITFOLD_SUCCESS) << msg;
  EXPECT_EQ(gate(GateTensors(0, 128), msg), BITFOLD_SUCCESS) << msg;
}

TEST_F(DriverFault, InvalidContextIsReportedAndNotRemembered) {
  std::string msg;
  int loads = fakeCount("cuModuleLoadData");
  {
    Knob dead("FAKE_CUDA_CTX_RESULT", "709");
    bitfold_status s = gate(GateTensors(), msg);
    EXPECT_TRUE(s == BITFOLD_ERROR_CUDA || s == BITFOLD_ERROR_DEVICE)
        << bitfold_status_name(s) << ": " << msg;
    EXPECT_NE(msg.find("CUDA_ERROR_CONTEXT_IS_DESTROYED"), std::string::npos)
        << msg;
  }
  {
    // A launch in a destroyed context (the warm path) fails the same way.
    ASSERT_EQ(gate(GateTensors(), msg), BITFOLD_SUCCESS) << msg;
    Knob dead("FAKE_CUDA_LAUNCH_RESULT", "709");
    EXPECT_EQ(gate(GateTensors(), msg), BITFOLD_ERROR_CUDA);
    EXPECT_NE(msg.find("CUDA_ERROR_CONTEXT_IS_DESTROYED"), std::string::npos)
        << msg;
  }
  EXPECT_EQ(gate(GateTensors(), msg), BITFOLD_SUCCESS) << msg;
  EXPECT_EQ(fakeCount("cuModuleLoadData"), loads + 1);
}

namespace {

/// Runs `body` in a forked child with the handlers installed; returns its
/// wait status and what it wrote to stderr.
template <typename Body> std::pair<int, std::string> inChild(Body body) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  EXPECT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fds[1], 2);
    installLlvmErrorHandlers();
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0)
    text.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {status, text};
}

} // namespace

TEST(LlvmErrorHandlers, FatalErrorNamesBitfoldInsteadOfABareAbort) {
  // LLVM exits after the handler returns (no recovery is possible): check
  // the message and the exit in a child.
  auto [status, text] = inChild([] {
    llvm::report_fatal_error("Cannot select: intrinsic %llvm.nvvm.fake",
                             /*gen_crash_diag=*/false);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(text.find("bitfold: fatal error in LLVM: Cannot select: intrinsic "
                      "%llvm.nvvm.fake"),
            std::string::npos)
      << text;
}

TEST(LlvmErrorHandlers, AllocationFailureNamesBitfoldAndAborts) {
  // LLVM must not get control back from the bad-alloc handler (it traps
  // there): the handler aborts, as LLVM would without one.
  auto [status, text] = inChild([] {
    llvm::report_bad_alloc_error("Allocation failed", false);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)
      << "wait status " << status << " (SIGTRAP is " << SIGTRAP << ")";
  EXPECT_NE(text.find("bitfold: out of memory in LLVM: Allocation failed"),
            std::string::npos)
      << text;
}
