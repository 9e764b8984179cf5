//===- autotune/ShapeClass.h - What a tuning result is keyed on --*- C++ -*-===//
//
// A tune DB entry is keyed on the kernel, its shape class (spec/ShapeSpec.h:
// the ShapeSpec plus a power-of-two bucket of the row count, e.g.
// "c4096.a16-16-16-16.o32/r4096"), the operand dtypes and the environment
// it was tuned in. tuneKeyFor() is the one place that builds that key: the
// tuner records under it and the policy (the runtime's config source) looks
// it up with it.
//
// See autotune/README.md for the policy.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_SHAPECLASS_H
#define BITFOLD_AUTOTUNE_SHAPECLASS_H

#include "autotune/TuneDB.h"

#include "spec/ShapeSpec.h"
#include "templates/Problem.h"

#include <string>

namespace bitfold::autotune {

/// "x:bf16,scale:bf16,...": the operands' dtypes in KernelDef order.
std::string dtypesText(const dsl::KernelDef &def);

/// The environment a DB entry is tuned under / looked up in on this build:
/// the GPU's name and arch, this bitfold and LLVM, `toolchain`
/// (codegen::toolchainVersion()). The tuner and the policy both build it
/// here, so they agree on what "the same environment" is.
TuneEnvironment currentEnvironment(llvm::StringRef gpuName,
                                   llvm::StringRef arch,
                                   llvm::StringRef toolchain);

/// The tune DB key of `def` in shape class `shapeClass`
/// (spec::ShapeClass::str(), rows bucketed) under `env`.
TuneKey tuneKeyFor(const dsl::KernelDef &def, llvm::StringRef shapeClass,
                   const TuneEnvironment &env);

/// The shape class `bitfold tune` times a problem of `shape` in: that of
/// dense, freshly allocated tensors (spec::denseShapeClass), rows bucketed,
/// which is what a launch on such tensors looks up.
spec::ShapeClass tunedShapeClass(const dsl::KernelDef &def,
                                 const templates::ProblemShape &shape);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_SHAPECLASS_H
