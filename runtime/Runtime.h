//===- runtime/Runtime.h - Specialise and launch -------------------*- C++ -*-===//
//
// The C++ core behind the C API. A Runtime owns a KernelCache and the
// Kernels looked up through it; a Kernel is one template with its
// parameters, and owns its specialisations.
//
// Launch path: bind the tensors (TensorBinding.h: validation, rows, cols,
// alignments) -> SpecKey (device, cols, per-operand alignment, 32/64-bit
// indexing, config pin) -> hash lookup of the Specialisation under a
// shared lock -> the CUfunction loaded in the current context (a scan of a
// few slots) -> pack parameters in the precomputed ABI order into stack
// arrays -> one cuLaunchKernel. No heap allocation unless something fails
// or a shape class is met for the first time (then: compile or cache
// load, module load).
//
// Codegen is reached only through a Compiler (injectable: tests pass a
// fake one; defaultCompiler() is codegen's, in CodegenCompiler.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_RUNTIME_H
#define BITFOLD_RUNTIME_RUNTIME_H

#include "runtime/KernelCache.h"
#include "runtime/TensorBinding.h"

#include "codegen/Codegen.h"
#include "templates/Templates.h"

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

namespace bitfold::runtime {

/// Codegen as the runtime uses it.
struct Compiler {
  std::function<llvm::Expected<codegen::CompiledKernel>(
      const dsl::KernelDef &, const codegen::ShapeSpec &,
      const codegen::TileConfig &, const codegen::CompileOptions &)>
      compile;
  std::function<codegen::TileConfig(const dsl::KernelDef &,
                                    const codegen::ShapeSpec &)>
      defaultConfig;
  std::function<llvm::Error(const dsl::KernelDef &, const codegen::ShapeSpec &,
                            const codegen::TileConfig &)>
      checkConfig;
  std::function<llvm::Expected<codegen::TileConfig>(llvm::StringRef)>
      parseConfig;
  std::function<std::string(const codegen::TileConfig &)> configText;
  std::function<std::string(const codegen::ShapeSpec &)> shapeText;
  /// codegen::toolchainVersion(), asked once per Runtime.
  std::function<std::string()> toolchainVersion;
};

/// codegen's compiler (CodegenCompiler.cpp). Also installs the driver's
/// PTX -> cubin linker into codegen (codegen::setDriverLinker).
Compiler defaultCompiler();

struct RuntimeOptions {
  CacheOptions cache;
  std::optional<Compiler> compiler; ///< default: defaultCompiler().
};

class Runtime;

/// One template with its parameters; owns its specialisations.
class Kernel {
public:
  Kernel(Runtime &rt, std::string name, templates::TemplateArgs args,
         std::shared_ptr<const dsl::KernelDef> def, std::string defError);
  ~Kernel();

  /// Binds, specialises (first time per shape class) and launches.
  llvm::Error launch(const DLTensor *const *tensors, int numTensors,
                     const float *scalars, int numScalars, CUstream stream);

  /// Parses config text ("r1.t128.v8.p1") with codegen's parser.
  llvm::Expected<codegen::TileConfig> parseConfig(llvm::StringRef text) const;
  /// Pins the TileConfig of later specialisations; nullopt = default.
  llvm::Error setConfig(std::optional<codegen::TileConfig> config);

  /// The KernelDef for `cols` (templates whose fold order depends on D
  /// build one per column count).
  llvm::Expected<std::shared_ptr<const dsl::KernelDef>> defFor(int64_t cols);
  /// A KernelDef describing the operands (for names and counts). Never null.
  const dsl::KernelDef &signature() const { return *sig; }
  const std::string &name() const { return templateName; }

  /// What a launch specialised on: for `bitfold run` and tests.
  struct LastLaunch {
    std::string keyText;
    std::string config;
    unsigned gridX = 0, blockX = 0;
  };
  LastLaunch lastSpecialisation() const;

private:
  struct Specialisation;
  struct SpecKey {
    int64_t cols;
    int device;
    int configSerial;
    bool wide;
    std::array<uint8_t, kMaxOperands> align;
    bool operator==(const SpecKey &) const = default;
  };
  struct SpecKeyHash {
    size_t operator()(const SpecKey &k) const;
  };

  llvm::Expected<Specialisation *> specialise(const SpecKey &key,
                                              const LaunchBinding &b);
  llvm::Expected<CUfunction> functionFor(Specialisation &s, CUcontext ctx,
                                         int device);

  Runtime &rt;
  std::string templateName;
  templates::TemplateArgs args;
  std::shared_ptr<const dsl::KernelDef> sig;
  std::shared_ptr<const dsl::KernelDef> fixedDef; ///< null: per column count.
  std::string defError;

  mutable std::shared_mutex mu;
  std::unordered_map<SpecKey, std::unique_ptr<Specialisation>, SpecKeyHash>
      specs;
  std::unordered_map<int64_t, std::shared_ptr<const dsl::KernelDef>> defsByCols;
  std::optional<codegen::TileConfig> pinned;
  int configSerial = 0;
  std::atomic<Specialisation *> last{nullptr};
};

class Runtime {
public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();

  /// The kernel of template `name` with `params` ("dtype=bf16 ..."). Owned
  /// by the runtime; the same arguments give the same kernel.
  llvm::Expected<Kernel *> findKernel(llvm::StringRef name,
                                      llvm::StringRef params);

  KernelCache &cache() { return kernelCache; }
  const Compiler &compiler() const { return comp; }
  const std::string &toolchain() const { return toolchainText; }

private:
  KernelCache kernelCache;
  Compiler comp;
  std::string toolchainText;
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
};

/// The cache key of (def, shape, config) compiled with `options` by
/// `toolchain` (codegen::toolchainVersion()), exactly as a launch builds
/// it; shared with autotune so that tuned cubins are found by launches.
/// `shapeText` / `configText`: ShapeSpec::str() / TileConfig::str().
CacheKey makeCacheKey(const dsl::KernelDef &def, llvm::StringRef shapeText,
                      llvm::StringRef configText,
                      const codegen::CompileOptions &options,
                      llvm::StringRef toolchain);

/// The ShapeSpec::maxElementOffset a launch passes for a largest element
/// offset: a class (2^31-1, or 2^62 for 64-bit indexing), not the offset,
/// so that row counts never split the cache.
int64_t maxElementOffsetClass(int64_t maxElementOffset);

/// Parses template parameter text ("dtype=bf16, residual=1") for template
/// `name`; errors name the bad key or value and list the valid ones.
llvm::Expected<templates::TemplateArgs> parseTemplateParams(llvm::StringRef name,
                                                           llvm::StringRef text);

/// Parses "bf16", "f16", "f32" (and "bfloat16", "float16", "half",
/// "float32", "float").
std::optional<dsl::DType> parseDType(llvm::StringRef text);

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_RUNTIME_H
