//===- tests/runtime/FakeCodegen.h - A compiler without codegen -*- C++ -*-===//
//
// runtime::Compiler that returns fixed bytes with the definition's ABI, so
// runtime tests run without codegen (or a GPU). Linking FakeCodegen.cpp also
// provides runtime::defaultCompiler(), so the C API itself uses it.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_RUNTIME_FAKECODEGEN_H
#define BITFOLD_TESTS_RUNTIME_FAKECODEGEN_H

#include "runtime/Runtime.h"

#include <atomic>

namespace bitfold::runtime::fake {

/// Compiles performed by fake compilers in this process.
extern std::atomic<int> fakeCompiles;

/// Fake codegen: default config r2.t64.v4.p1 (quick config r1.t32.v4.p1
/// from 4096 columns on), cubin = the key facts as bytes.
Compiler fakeCompiler();

} // namespace bitfold::runtime::fake

#endif
