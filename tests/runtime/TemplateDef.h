//===- tests/runtime/TemplateDef.h - A stock template's KernelDef -*- C++ -*-===//
//
// The binding tests' one way to build a registered template at a column
// count (failures reported as test failures, nullptr returned).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_RUNTIME_TEMPLATEDEF_H
#define BITFOLD_TESTS_RUNTIME_TEMPLATEDEF_H

#include "templates/Registry.h"

#include <gtest/gtest.h>

#include <memory>

namespace bitfold::testutil {

inline std::shared_ptr<const dsl::KernelDef>
buildTemplate(const char *name, const char *params, int64_t C) {
  auto desc = templates::Registry::global().lookup(name);
  EXPECT_TRUE(bool(desc));
  if (!desc) {
    llvm::consumeError(desc.takeError());
    return nullptr;
  }
  auto values = (*desc)->parseParams(params);
  EXPECT_TRUE(bool(values)) << llvm::toString(values.takeError());
  auto def = (*desc)->build(*values, C);
  EXPECT_TRUE(bool(def)) << llvm::toString(def.takeError());
  return def ? *def : nullptr;
}

} // namespace bitfold::testutil

#endif // BITFOLD_TESTS_RUNTIME_TEMPLATEDEF_H
