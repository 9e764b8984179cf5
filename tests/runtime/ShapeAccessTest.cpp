//===- tests/runtime/ShapeAccessTest.cpp - No shape read before ndim check -===//
//
// A kernel whose definition depends on D (rmsnorm_modulate) reads D from
// the first tensor before binding: that read must wait until ndim is known
// to be sane, so a huge ndim is an error, not a read past the shape array.
// No driver, fake codegen (FakeCodegen.cpp).
//
//===----------------------------------------------------------------------===//

#include "runtime/bitfold.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

const bool driverHidden = [] {
  ::setenv("BITFOLD_LIBCUDA", "/nonexistent/bitfold-test/libcuda.so.1", 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

TEST(ShapeAccess, HugeNdimOnAColumnDependentKernelIsAnError) {
  ASSERT_TRUE(driverHidden);
  bitfold_runtime *rt = nullptr;
  ASSERT_EQ(bitfold_runtime_create(nullptr, &rt), BITFOLD_SUCCESS)
      << bitfold_last_error();
  bitfold_kernel *k = nullptr;
  ASSERT_EQ(bitfold_template(rt, "rmsnorm_modulate", "", &k), BITFOLD_SUCCESS)
      << bitfold_last_error();
  int64_t shape[3] = {1, 8, 2048};
  DLTensor t{};
  t.data = reinterpret_cast<void *>(uintptr_t(1) << 40);
  t.device = {kDLCUDA, 0};
  t.dtype = {kDLBfloat, 16, 1};
  t.shape = shape;
  for (int ndim : {1 << 30, -1, 9}) {
    t.ndim = ndim;
    const DLTensor *ts[5] = {&t, &t, &t, &t, &t};
    float eps = 1e-6f;
    EXPECT_EQ(bitfold_launch(k, ts, 5, &eps, 1, nullptr),
              BITFOLD_ERROR_SHAPE)
        << "ndim " << ndim << ": " << bitfold_last_error();
    EXPECT_NE(std::string(bitfold_last_error()).find("dimensions; at most 8"),
              std::string::npos)
        << "ndim " << ndim << ": " << bitfold_last_error();
  }
  bitfold_runtime_destroy(rt);
}

} // namespace
