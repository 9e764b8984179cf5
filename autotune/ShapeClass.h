//===- autotune/ShapeClass.h - What a tuning result is keyed on --*- C++ -*-===//
//
// A shape class is what the tuner keys a result on: everything a kernel is
// specialised on (codegen::ShapeSpec: the column count D, per-operand
// alignment, 32/64-bit indexing) plus a power-of-two bucket of the row
// count. Rows are a launch argument and never change the code, but they do
// change which config is fastest (grid size vs. SM count), so timings are
// kept per bucket: rows in [2^k, 2^(k+1)) share bucket 2^k.
//
//   "c4096.a16-16-16-16.o32/r4096"
//
// See autotune/README.md for the policy.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_SHAPECLASS_H
#define BITFOLD_AUTOTUNE_SHAPECLASS_H

#include "autotune/TuneDB.h"

#include "codegen/Codegen.h"
#include "templates/Problem.h"

#include <cstdint>
#include <string>

namespace bitfold::autotune {

/// Largest power of two <= rows (1 for rows <= 1).
int64_t rowBucket(int64_t rows);

/// "<ShapeSpec text>/r<rowBucket(rows)>".
std::string shapeClass(llvm::StringRef shapeSpecText, int64_t rows);

/// "x:bf16,scale:bf16,...": the operands' dtypes in KernelDef order.
std::string dtypesText(const dsl::KernelDef &def);

/// The environment a DB entry is tuned under / looked up in on this build:
/// the GPU's name and arch, this bitfold and LLVM, `toolchain`
/// (codegen::toolchainVersion()). The tuner and the runtime both build it
/// here, so they agree on what "the same environment" is.
TuneEnvironment currentEnvironment(llvm::StringRef gpuName,
                                   llvm::StringRef arch,
                                   llvm::StringRef toolchain);

/// The tune DB key of `def` specialised on `shapeSpecText` (ShapeSpec::str())
/// for `rows` rows, under `env`: what `bitfold tune` records and what the
/// runtime looks up.
TuneKey tuneKeyFor(const dsl::KernelDef &def, llvm::StringRef shapeSpecText,
                   int64_t rows, const TuneEnvironment &env);

/// The ShapeSpec the runtime derives for dense, freshly allocated tensors
/// of `shape` (what the tuner allocates): base addresses 256-byte aligned,
/// rows packed, so each operand's alignment is the largest of 16/8/4/2/1
/// dividing its row bytes; the index width as a class (as the runtime
/// does), not the exact offset.
codegen::ShapeSpec denseShapeSpec(const dsl::KernelDef &def,
                                  const templates::ProblemShape &shape);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_SHAPECLASS_H
