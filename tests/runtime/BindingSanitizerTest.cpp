//===- tests/runtime/BindingSanitizerTest.cpp - Binding under UBSan -------===//
//
// TensorBinding.cpp is compiled into this test with -fsanitize=enum and no
// recovery: reading a caller's DLDeviceType outside the enum's values as the
// enum (undefined behaviour) would abort the test instead of passing.
//
//===----------------------------------------------------------------------===//

#include "runtime/Status.h"
#include "runtime/TensorBinding.h"

#include "templates/Templates.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace bitfold;
using namespace bitfold::runtime;

TEST(BindingUnderUBSan, DeviceTypesOutsideTheEnumAreAnErrorNotUndefined) {
  auto def = templates::lnModulate();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  std::vector<int64_t> rows{1, 8, 64}, vec{1, 64};
  std::vector<DLTensor> t(4);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i].data = reinterpret_cast<void *>(uintptr_t(0x10000000) * (i + 1));
    t[i].device = {kDLCUDA, 0};
    t[i].dtype = {kDLBfloat, 16, 1};
    t[i].ndim = i == 1 || i == 2 ? 2 : 3;
    t[i].shape = i == 1 || i == 2 ? vec.data() : rows.data();
  }
  for (int32_t bogus : {0, 5, 14, 1000, -1}) {
    std::memcpy(&t[2].device.device_type, &bogus, sizeof bogus);
    const DLTensor *ts[] = {&t[0], &t[1], &t[2], &t[3]};
    LaunchBinding b;
    std::string msg;
    EXPECT_EQ(takeStatus(bindTensors(**def, ts, 4, b), msg),
              BITFOLD_ERROR_DEVICE)
        << "device type " << bogus;
    EXPECT_NE(msg.find("device type " + std::to_string(bogus)),
              std::string::npos)
        << msg;
  }
}
