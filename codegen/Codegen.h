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

#include <optional>
#include <string>
#include <vector>

namespace bitfold::codegen {

/// How a row program runs. Never changes what it computes.
struct TileConfig {
  int rowsPerCta = 1;    ///< rows handled by one CTA.
  int threadsPerRow = 128;
  int vectorElems = 8;   ///< elements per thread per memory access.
  bool twoPass = false;  ///< re-read the row after a fold instead of
                         ///< keeping it in registers.
  int ctaThreads() const { return rowsPerCta * threadsPerRow; }
  /// "r1.t128.v8.p1": stable text, used in cache keys and file names.
  std::string str() const;
  static llvm::Expected<TileConfig> parse(llvm::StringRef text);
  bool operator==(const TileConfig &) const = default;
};

/// What a kernel is specialised on (the shape class). Row counts are
/// launch-time arguments; the column count and alignments are baked in.
struct ShapeSpec {
  int64_t cols = 0;
  /// Per operand (KernelDef order): base address and row stride (in bytes)
  /// are multiples of this many bytes (1, 2, 4, 8 or 16). Wider vectors are
  /// legal only where all operands allow them.
  std::vector<int> alignBytes;
  /// Largest element offset any operand can reach; above 2^31 the kernel
  /// indexes with 64-bit arithmetic.
  int64_t maxElementOffset = 0;
  std::string str() const; ///< stable text for keys.
};

struct CompileOptions {
  std::string arch = "sm_90"; ///< sm_80, sm_90, sm_100 ...
  bool emitCubin = true;      ///< false: stop at PTX.
  /// Set: write every stage's output there (created if missing). An
  /// empty path, a file, or a folder that cannot be written is an error.
  std::optional<std::string> dumpDir;
  /// PTX -> cubin tool: "" = automatic (see codegen/Assemble.h),
  /// "nvJitLink", "ptxas" or "driver".
  std::string cubinTool;
  /// sm_90+: begin with griddepcontrol.wait / launch_dependents so the
  /// kernel may be launched with programmatic dependent launch (PDL). Off
  /// by default: the two instructions cost kernels of many tiny CTAs
  /// (qk LN on an H200: 36 -> 43 us, bench/perf-notes.md section 13).
  bool gridDependencyControl = false;
};

/// Where each argument sits in the kernel's parameter list. The ABI is:
/// for each group g, for each operand i: (pointer u64, row stride i64 in
/// elements); then for each group: rows (i64); then named dims (i64); then
/// scalars (f32). Grid: x = ceil(total rows / rowsPerCta), rows of group 0
/// first. Block: ctaThreads().
struct KernelABI {
  int numGroups = 1;
  int numOperands = 0;
  int numDims = 0;
  int numScalars = 0;
  size_t paramCount() const {
    return size_t(numGroups) * numOperands * 2 + numGroups + numDims +
           numScalars;
  }
};

struct StageTime {
  std::string stage;
  double ms;
};

struct CompiledKernel {
  std::string entryName;
  std::string ptx;
  std::vector<char> cubin; ///< empty when emitCubin was false.
  std::string cubinTool;   ///< "nvJitLink", "driver" or "ptxas".
  TileConfig config;
  KernelABI abi;
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
std::vector<TileConfig> enumerateConfigs(const dsl::KernelDef &def,
                                         const ShapeSpec &shape);
/// A sensible default (no tuning).
TileConfig defaultConfig(const dsl::KernelDef &def, const ShapeSpec &shape);
/// Why `config` is not legal for `shape`, or success.
llvm::Error checkConfig(const dsl::KernelDef &def, const ShapeSpec &shape,
                        const TileConfig &config);

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
                                       const ShapeSpec &shape,
                                       const TileConfig &config,
                                       const CompileOptions &options);

/// Versions that belong in a cache key: LLVM, and the PTX -> cubin tool.
std::string toolchainVersion();

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_CODEGEN_H
