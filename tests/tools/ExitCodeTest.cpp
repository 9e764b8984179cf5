//===- tests/tools/ExitCodeTest.cpp - Error kinds to exit codes -----------===//
//
// The CLI's one map from keys/Errors.h's kinds to exit codes, and that a
// reported error exits with its kind's code whatever its message says.
//
//===----------------------------------------------------------------------===//

#include "tools/Commands.h"

#include "keys/Errors.h"

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::tools;

namespace {

TEST(ExitCodes, EachErrorKindMapsToItsExitCode) {
  using keys::ErrorKind;
  EXPECT_EQ(exitCodeFor(ErrorKind::Usage), kUsage);
  EXPECT_EQ(exitCodeFor(ErrorKind::BitsDiffer), kDiffer);
  EXPECT_EQ(exitCodeFor(ErrorKind::Compile), kFailed);
  EXPECT_EQ(exitCodeFor(ErrorKind::Driver), kFailed);
  EXPECT_EQ(exitCodeFor(ErrorKind::Cache), kFailed);
  EXPECT_EQ(exitCodeFor(ErrorKind::Tune), kFailed);
}

TEST(ExitCodes, ReportedErrorExitsWithItsKindsCodeNotItsText) {
  std::string err;
  llvm::raw_string_ostream es(err);
  // A message that reads like another kind changes nothing.
  EXPECT_EQ(report(es, "tune", keys::bitsDifferError("usage: bad option")),
            kDiffer);
  EXPECT_EQ(report(es, "tune",
                   keys::usageError("configs give different output bytes")),
            kUsage);
  EXPECT_EQ(report(es, "tune", keys::driverError("no CUDA device")), kFailed);
  EXPECT_EQ(report(es, "tune", llvm::createStringError("untyped")), kFailed);
  EXPECT_NE(err.find("bitfold tune: error: untyped\n"), std::string::npos)
      << err;
}

TEST(ExitCodes, FirstTypedErrorOfAListDecides) {
  std::string message;
  llvm::Error e = llvm::joinErrors(llvm::createStringError("first, untyped"),
                                   keys::bitsDifferError("then bits"));
  EXPECT_EQ(exitCodeFor(std::move(e), message), kDiffer);
  EXPECT_EQ(message, "first, untyped\nthen bits");
}

} // namespace
