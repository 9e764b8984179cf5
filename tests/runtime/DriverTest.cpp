//===- tests/runtime/DriverTest.cpp - Loading the CUDA driver -------------===//
//
// Each scenario runs DriverProbe in its own process with $BITFOLD_LIBCUDA
// (and the fake driver's knobs) set, since a process loads the driver once.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>

namespace {

struct Probe {
  int status;
  std::string output;
};

Probe probe(const std::string &env) {
  std::string cmd = "env " + env + " " BITFOLD_DRIVER_PROBE " 2>&1";
  Probe p{-1, ""};
  FILE *f = ::popen(cmd.c_str(), "r");
  if (!f)
    return p;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f))
    p.output += buf;
  int st = ::pclose(f);
  p.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return p;
}

} // namespace

TEST(Driver, MissingLibraryNamesTheDlopenError) {
  Probe p = probe("BITFOLD_LIBCUDA=/nonexistent/dir/libcuda.so.1");
  EXPECT_EQ(p.status, 1);
  EXPECT_EQ(p.output, "error: cannot load the CUDA driver: "
                      "dlopen(\"/nonexistent/dir/libcuda.so.1\") failed: "
                      "/nonexistent/dir/libcuda.so.1: cannot open shared "
                      "object file: No such file or directory\n");
}

TEST(Driver, FakeDriverIsResolvedThroughCuGetProcAddress) {
  Probe p = probe("BITFOLD_LIBCUDA=" BITFOLD_FAKE_CUDA_PATH);
  EXPECT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("driver 12.8"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("cuda:1 Fake H200 #1 sm_90"), std::string::npos)
      << p.output;
}

TEST(Driver, FailingCuInitIsReported) {
  Probe p = probe("BITFOLD_LIBCUDA=" BITFOLD_FAKE_CUDA_PATH
                  " FAKE_CUDA_INIT_RESULT=100");
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.output.find("loaded but cuInit failed: CUDA_ERROR_NO_DEVICE (no "
                          "CUDA-capable device is detected)"),
            std::string::npos)
      << p.output;
}

TEST(Driver, MissingEntryPointIsReported) {
  Probe p = probe("BITFOLD_LIBCUDA=" BITFOLD_FAKE_CUDA_PATH
                  " FAKE_CUDA_MISSING=cuLinkComplete");
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.output.find("entry point cuLinkComplete (ABI of CUDA 12.0) not "
                          "found (resolved with cuGetProcAddress_v2); the "
                          "driver is too old"),
            std::string::npos)
      << p.output;
}

TEST(Driver, CudaToolkitStubLibraryIsNotADriver) {
  struct stat st;
  if (::stat(BITFOLD_CUDA_STUB, &st) != 0)
    GTEST_SKIP() << "no CUDA stub library at " BITFOLD_CUDA_STUB;
  Probe p = probe("BITFOLD_LIBCUDA=" BITFOLD_CUDA_STUB);
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.output.find("error: "), std::string::npos) << p.output;
  EXPECT_NE(p.output.find(BITFOLD_CUDA_STUB), std::string::npos) << p.output;
}
