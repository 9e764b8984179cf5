//===- codegen/Codegen.h - Row program + shape + TileConfig -> cubin -*- C++ -*-===//
//
// Public contract of codegen. A verified KernelDef, specialised for one
// ShapeSpec and run under one TileConfig, is lowered DSL -> MLIR -> LLVM IR
// -> PTX (LLVM's NVPTX backend, in process) -> cubin.
//
// Guarantee: every legal TileConfig of a shape evaluates exactly the DAG the
// program wrote (same fold DAG, no contraction, no FTZ unless written, IEEE
// div/sqrt, cvt.rn to bf16/fp16), so all configs give identical bits.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_CODEGEN_H
#define BITFOLD_CODEGEN_CODEGEN_H

#include "dsl/IR.h"
#include "keys/CompileOptions.h"
#include "keys/KernelABI.h"
#include "keys/ShapeSpec.h"
#include "keys/TileConfig.h"

#include <optional>
#include <string>
#include <vector>

namespace bitfold::codegen {

struct StageTime {
  std::string stage;
  double ms;
};

struct CompiledKernel {
  std::string entryName;
  std::string ptx;
  std::vector<char> cubin; ///< empty when emitCubin was false.
  std::string cubinTool;   ///< "nvJitLink", "driver" or "ptxas".
  keys::TileConfig config;
  keys::KernelABI abi;
  unsigned sharedBytes = 0; ///< static shared memory the kernel declares.
  /// The kernel waits (griddepcontrol.wait) before its first memory access
  /// for the grids it depends on, so it may be launched with programmatic
  /// stream serialization (PDL). sm_90 and later.
  bool gridDependencyWait = false;
  std::vector<StageTime> times;
  std::string assemblerLog; ///< ptxas -v output (registers, spills).
  /// Facts for the PTX audit (codegen/PtxAudit.h).
  struct IRFacts {
    int64_t fmaWritten = 0;     ///< fmas the lowering emitted for Op::Fma
                                ///< (and exp_libdevice), all sites.
    int64_t fmaBeforeOpt = 0;   ///< llvm.fma calls after translation.
    int64_t fmaAfterOpt = 0;    ///< llvm.fma calls after O3.
    int64_t fmaFoldable = 0;    ///< of those, with >= 2 constant operands.
    bool contractionAllowed = false; ///< any fast-math flag or fmuladd.
    int64_t narrowArith = 0; ///< round(add/sub/mul) written as bf16/f16 ops.
  } ir;
};

/// Legal configs of a shape (the autotuner's space), in a stable order.
std::vector<keys::TileConfig> enumerateConfigs(const dsl::KernelDef &def,
                                         const keys::ShapeSpec &shape);
/// A sensible default (no tuning).
keys::TileConfig defaultConfig(const dsl::KernelDef &def, const keys::ShapeSpec &shape);
/// The legal config whose kernel compiles fastest (the fewest accesses of
/// a row spelled out in its code): what a caller that must not wait runs
/// while the chosen config compiles (every config gives the same bits).
keys::TileConfig quickConfig(const dsl::KernelDef &def,
                             const keys::ShapeSpec &shape);
/// Why `config` is not legal for `shape`, or success.
llvm::Error checkConfig(const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                        const keys::TileConfig &config);

/// Oldest target codegen supports: sm_80. The lowering rounds to bf16 with
/// cvt.rn.bf16{,x2}.f32, which PTX has from sm_80; CUDA 13's ptxas (and
/// nvJitLink) start at sm_75, where that instruction is missing.
inline constexpr int kMinSmVersion = 80;

/// Whether `arch` ("sm_80", "sm_90a", "sm_100f" ...) is a target codegen can
/// compile for: the spelling, at least sm_80, and known to LLVM's NVPTX
/// backend. Errors name the arch and the minimum. compile() checks it first;
/// the runtime calls it for a device before compiling.
llvm::Error checkTargetArch(llvm::StringRef arch);

/// Lower and assemble. Errors name the failing stage; with dumpDir set, the
/// failing IR is kept there for a repro.
llvm::Expected<CompiledKernel> compile(const dsl::KernelDef &def,
                                       const keys::ShapeSpec &shape,
                                       const keys::TileConfig &config,
                                       const keys::CompileOptions &options);

/// Versions that belong in a cache key: LLVM, and the PTX -> cubin tool.
std::string toolchainVersion();

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_CODEGEN_H
