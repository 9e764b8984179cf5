//===- runtime/CacheKey.h - How a launch keys its compiled kernel -*- C++ -*-===//
//
// The one place that turns (KernelDef, shape, config, options, toolchain)
// into a KernelCache key, and the row-count-independent offset class a
// launch specialises on. The runtime's launch path and the autotuner's
// offline cache build (`bitfold tune`) both call these, so a cubin the tuner
// writes is exactly the entry a later launch looks up: the two can never
// drift.
//
// Part of bitfold_kernel_cache, which depends on nothing else of the
// runtime (only codegen's and dsl's types), so that autotune's CPU-only
// core can use it without linking the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_CACHEKEY_H
#define BITFOLD_RUNTIME_CACHEKEY_H

#include "runtime/KernelCache.h"

#include "codegen/Codegen.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace bitfold::runtime {

/// The cache key of (def, shape, config) compiled with `options` by
/// `toolchain` (codegen::toolchainVersion()), exactly as a launch builds
/// it. `shapeText` / `configText`: ShapeSpec::str() / TileConfig::str().
/// Also covers the bitfold and LLVM versions and codegenEnvironment().
CacheKey makeCacheKey(const dsl::KernelDef &def, llvm::StringRef shapeText,
                      llvm::StringRef configText,
                      const codegen::CompileOptions &options,
                      llvm::StringRef toolchain);

/// The ShapeSpec::maxElementOffset a launch passes for a largest element
/// offset: a class (2^31-1, or 2^62 for 64-bit indexing), not the offset,
/// so that row counts never split the cache.
int64_t maxElementOffsetClass(int64_t maxElementOffset);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_CACHEKEY_H
