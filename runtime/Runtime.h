//===- runtime/Runtime.h - Specialise and launch -------------------*- C++ -*-===//
//
// The C++ core behind the C API. A Runtime owns a KernelCache, optionally a
// ConfigSource (policy/ConfigSource.h; the C API gives it autotune's tune DB
// policy), and the
// Kernels looked up through it; a Kernel is one template with its
// parameters, and owns its specialisations.
//
// Launch path: bind the tensors (TensorBinding.h: validation, rows, cols,
// alignments) -> SpecKey (the keys::ShapeClass of the binding, with a row
// bucket only when the config source asks for one; device; PDL; config pin)
// -> hash lookup of the specialisation under a shared lock -> the
// CUfunction loaded in the current context (a scan of a few slots) -> pack
// the parameters with keys::ParamPacker into stack arrays -> one
// cuLaunchKernel. No heap allocation unless something fails or a shape
// class is met for the first time (then: choose the config, compile or
// cache load, module load).
//
// Config choice on a first launch: the pinned config
// (bitfold_kernel_set_config); else the config source's answer (the tune DB
// winner for this shape class and environment; the heuristic default when
// there is none); else the heuristic default. The chosen config is part of
// the specialisation, so the warm path stays one hash lookup. Shape classes
// that resolve to the same cache key share one loaded module.
//
// Codegen is reached only through a Compiler (injectable: tests pass a
// fake one; defaultCompiler() is codegen's, in CodegenCompiler.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_RUNTIME_RUNTIME_H
#define BITFOLD_RUNTIME_RUNTIME_H

#include "policy/ConfigSource.h"
#include "cuda/Driver.h"
#include "cuda/PerDevice.h"
#include "runtime/KernelCache.h"
#include "runtime/TensorBinding.h"
#include "runtime/bitfold.h"

#include "codegen/Codegen.h"
#include "templates/Registry.h"

#include <cuda.h>

#include "llvm/Support/ThreadPool.h"

#include <array>
#include <map>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

namespace bitfold::runtime {

/// Codegen as the runtime uses it.
struct Compiler {
  std::function<llvm::Expected<codegen::CompiledKernel>(
      const dsl::KernelDef &, const keys::ShapeSpec &,
      const keys::TileConfig &, const keys::CompileOptions &)>
      compile;
  std::function<keys::TileConfig(const dsl::KernelDef &,
                                    const keys::ShapeSpec &)>
      defaultConfig;
  std::function<llvm::Error(const dsl::KernelDef &, const keys::ShapeSpec &,
                            const keys::TileConfig &)>
      checkConfig;
  /// The config whose kernel compiles fastest (codegen::quickConfig):
  /// served first in quick-first mode (Runtime::setQuickFirst). Optional:
  /// without it that mode compiles the chosen config only.
  std::function<keys::TileConfig(const dsl::KernelDef &,
                                 const keys::ShapeSpec &)>
      quickConfig;
  /// codegen::toolchainVersion(): probes the PTX -> cubin tools (dlopen,
  /// `ptxas --version`), so a Runtime asks it only when a cache key is
  /// first needed and no probe is remembered for toolchainFingerprint.
  std::function<std::string()> toolchainVersion;
  /// Cheap identity of what toolchainVersion() would answer (file
  /// identities of the tools, build-time versions; no probe). Optional:
  /// without it every Runtime probes once.
  std::function<std::string()> toolchainFingerprint;
  /// Sets up what the first compile of a process would otherwise pay for
  /// (LLVM's target, the PTX -> cubin tool's load and first link).
  /// Optional; run on a compile thread when async compile is turned on.
  std::function<void()> warmUp;
};

/// comp.toolchainVersion(), remembered across processes: the answer is
/// stored in <cacheDir>/toolchain/<hash of the fingerprint>.txt, so a later
/// process with the same fingerprint (same tool files, same versions)
/// reads it instead of probing. Probes when there is no fingerprint, no
/// cache directory, or no valid stored answer (then stores it; a failed
/// write, e.g. a read-only shipped cache, only costs the next process a
/// probe).
std::string resolveToolchain(const Compiler &comp, llvm::StringRef cacheDir);

/// codegen's compiler (CodegenCompiler.cpp). Also installs the driver's
/// PTX -> cubin linker into codegen (codegen::setDriverLinker).
Compiler defaultCompiler();

/// `given`, or a sink printing "bitfold: warning: ..." to stderr unless
/// $BITFOLD_QUIET=1: where a Runtime's warnings go.
std::function<void(llvm::StringRef)>
warningSink(const std::function<void(llvm::StringRef)> &given);

struct RuntimeOptions {
  CacheOptions cache; ///< its `warn` also receives the tune DB's warnings.
  std::optional<Compiler> compiler; ///< default: defaultCompiler().
  /// Where first launches get their configs. Null: every shape class gets
  /// the default. The C API passes the tune DB policy here
  /// (capi/Compose.h: makeRuntime).
  std::shared_ptr<policy::ConfigSource> configSource;
  /// Threads compiling prewarmed shapes (Kernel::prewarm) in the
  /// background; 0: min(4, hardware threads).
  unsigned compileThreads = 0;
  /// Asynchronous compile mode (runtime/AsyncCompile.cpp): off by default;
  /// Runtime::setAsyncCompile turns it on later.
  bool asyncCompile = false;
  /// Quick-first mode (Runtime::setQuickFirst): off by default.
  bool quickFirst = false;
};

/// Progress of the prewarm compiles of a runtime (Kernel::prewarm).
struct PrewarmStatus {
  uint64_t pending = 0; ///< queued or compiling.
  uint64_t done = 0;    ///< finished, compiled or found in a cache.
  uint64_t failed = 0;  ///< finished with an error (firstError says it).
  std::string firstError;
};

class Runtime;

/// One template with its parameters; owns its specialisations.
class Kernel {
public:
  /// `sig` is desc's signature for `params`: the definition itself unless
  /// desc->dependsOnCols.
  Kernel(Runtime &rt, templates::DescriptorRef desc,
         templates::ParamValues params,
         std::shared_ptr<const dsl::KernelDef> sig);
  ~Kernel();

  /// Binds, specialises (first time per shape class) and launches.
  llvm::Error launch(const DLTensor *const *tensors, int numTensors,
                     const float *scalars, int numScalars, CUstream stream);

  /// What a prepared launch (bitfold_launch_prepared) keeps of its first
  /// successful binding: its tensors' layouts and scalars stay fixed while
  /// their addresses change, so later launches re-check only what depends
  /// on the addresses (rebindAddresses) and skip the binding of the
  /// layouts and the shape class. One may serve many threads at once.
  class Rebinding;
  /// launch(), for tensors whose layouts (dtype, device, shape, strides,
  /// byte offset) and scalars are those of every launch through `r`: the
  /// same launch, statuses and messages. Where an address check fails or
  /// gives another shape class, the full launch() runs and says why.
  llvm::Error launch(Rebinding &r, const DLTensor *const *tensors,
                     int numTensors, const float *scalars, int numScalars,
                     CUstream stream);

  /// Compiles (or loads from the disk cache) the specialisations a launch
  /// on dense tensors of each of `shapes` on `device` would need, on the
  /// runtime's compile threads; returns at once. Each shape is the first
  /// tensor's dims as `bitfold run --shape` takes them. Errors: a shape the
  /// template rejects (nothing is queued then). A launch of a shape still
  /// compiling waits for that compile; nothing compiles twice. Progress:
  /// Runtime::prewarmStatus / waitPrewarm.
  llvm::Error prewarm(llvm::ArrayRef<std::vector<int64_t>> shapes, int device);

  /// Parses config text ("r1.t128.v8.p1").
  llvm::Expected<keys::TileConfig> parseConfig(llvm::StringRef text) const;
  /// Pins the TileConfig of later specialisations; nullopt = default.
  llvm::Error setConfig(std::optional<keys::TileConfig> config);

  /// Launch with programmatic stream serialization (PDL) from now on: the
  /// kernel may start while its predecessor on the stream finishes and
  /// waits for it on the GPU. Used where the kernel waits for it
  /// (CompiledKernel::gridDependencyWait, sm_90+) and the driver has
  /// cuLaunchKernelEx; a plain launch otherwise. Off by default.
  void setProgrammaticLaunch(bool on) {
    programmatic.store(on, std::memory_order_relaxed);
  }
  bool programmaticLaunch() const {
    return programmatic.load(std::memory_order_relaxed);
  }

  /// The KernelDef for `cols` columns and `rows` rows (templates whose fold
  /// order depends on D build one per column count, and those whose order
  /// depends on the row count one per row class; rows <= 0: 16 and more).
  llvm::Expected<std::shared_ptr<const dsl::KernelDef>>
  defFor(int64_t cols, int64_t rows = 0);
  /// A KernelDef describing the operands (for names and counts). Never null.
  const dsl::KernelDef &signature() const { return *sig; }
  const std::string &name() const { return templateName; }

  /// What the last launch specialised on, and how its shape class was
  /// first resolved: for `bitfold run` (a log that shows nothing compiled)
  /// and tests.
  struct LastLaunch {
    std::string keyText;
    std::string config;
    /// Where the config came from: "default", "pinned", or the config
    /// source's answer ("tune DB", "default (stale DB entry)"...).
    std::string configFrom;
    /// The shape class the config source was asked about ("" when none
    /// was asked).
    std::string shapeClass;
    unsigned blockX = 0;
    /// The kernel waits for the grids it depends on (PDL launches apply).
    bool gridDependencyWait = false;
    /// How the first launch of this shape class got its kernel.
    CacheOrigin origin;
    double specialiseMs = 0; ///< config choice + cache/compile, first launch.
    double moduleLoadMs = 0; ///< cuModuleLoadData + cuModuleGetFunction.
  };
  LastLaunch lastSpecialisation() const;

private:
  struct Specialisation;
  struct ClassEntry;
  /// What the warm path looks a launch up by.
  struct SpecKey {
    keys::ShapeClass shape;
    int device;
    int configSerial;
    bool pdl; ///< compiled for programmatic dependent launch
    bool operator==(const SpecKey &) const = default;
  };
  struct SpecKeyHash {
    size_t operator()(const SpecKey &k) const;
  };

public:
  class Rebinding {
    friend class Kernel;
    std::mutex mu; ///< taken by the launch that fills it, once
    std::atomic<bool> ready{false};
    // Published by `ready`: the first bound launch's definition (the
    // kernel's, alive as long as it), binding and shape class.
    const dsl::KernelDef *def = nullptr;
    LaunchBinding binding;
    SpecKey key{};
  };

private:
  /// Binds `tensors` and computes the launch's shape class (launch()'s
  /// first half; b.totalRows == 0: nothing to launch).
  llvm::Error bindLaunch(const DLTensor *const *tensors, int numTensors,
                         const float *scalars, int numScalars,
                         const dsl::KernelDef *&def, LaunchBinding &b,
                         SpecKey &key);
  /// launch(), keeping the binding in `keep` (where given) unless it holds
  /// one already.
  llvm::Error bindAndLaunch(const DLTensor *const *tensors, int numTensors,
                            const float *scalars, int numScalars,
                            CUstream stream, Rebinding *keep);
  /// Specialises (first time per shape class) and enqueues a bound launch.
  llvm::Error launchBound(SpecKey &key, const LaunchBinding &b,
                          const float *scalars, CUstream stream);

  llvm::Expected<const dsl::KernelDef *>
  launchDef(const DLTensor *const *tensors, int numTensors);
  llvm::Expected<const ClassEntry *> lookup(SpecKey &key,
                                            const LaunchBinding &b);
  /// QuickFirst: in quick-first mode, a chosen config that is not cached
  /// is served by the quick config until it compiles (upgradeLater).
  enum class Tier { Chosen, QuickFirst };
  llvm::Expected<ClassEntry *> specialise(const SpecKey &key, int64_t cols,
                                          bool replace = false,
                                          Tier tier = Tier::Chosen);
  std::optional<keys::TileConfig>
  quickInstead(const dsl::KernelDef &def, const SpecKey &key,
               const std::string &arch, const keys::TileConfig &chosen);
  /// What a quick kernel compiles with: in synchronous mode, where its
  /// caller waits, the shortest compile (launchOptions' fastCompile); in
  /// async mode, where eager serves meanwhile, for speed.
  keys::CompileOptions quickOptions(const std::string &arch, bool pdl) const;
  /// Compiles the class's chosen config on the compile threads, then
  /// replaces the quick entry with it.
  void upgradeLater(const SpecKey &key, int64_t cols);
  /// Async mode (Runtime::setAsyncCompile; AsyncCompile.cpp): a launch of
  /// a class not resolved yet starts its compile on the compile threads,
  /// once, and fails at once with BITFOLD_STATUS_NOT_READY; once compiled,
  /// launches find it. A class whose background compile failed keeps that
  /// error (it is compiled once, never again).
  llvm::Expected<const ClassEntry *> specialiseAsync(const SpecKey &key,
                                                     int64_t cols);
  void compileInBackground(const SpecKey &key, int64_t cols);
  llvm::Expected<keys::TileConfig>
  chooseConfig(const std::shared_ptr<const dsl::KernelDef> &def,
               const SpecKey &key, const std::string &arch, ClassEntry &entry);
  llvm::Error checkCompiled(const dsl::KernelDef &def,
                            const keys::TileConfig &config,
                            const codegen::CompiledKernel &k) const;
  ClassEntry *publish(const SpecKey &key, std::string keyText,
                      std::shared_ptr<const dsl::KernelDef> def,
                      CompiledKernelRef kernel,
                      std::unique_ptr<ClassEntry> entry, bool replace);
  llvm::Expected<CUfunction> functionFor(Specialisation &s, CUcontext ctx,
                                         int device);
  llvm::Expected<CUfunction>
  currentFunction(const cuda::DriverApi &api, Specialisation &s, int device,
                  std::optional<cuda::ScopedContext> &scoped);
  llvm::Error enqueue(const cuda::DriverApi &api, const Specialisation &s,
                      CUfunction fn,
                      const LaunchBinding &b, const float *scalars,
                      CUstream stream, bool wantPdl);

  Runtime &rt;
  std::string templateName;
  templates::DescriptorRef desc;
  templates::ParamValues params;
  std::shared_ptr<const dsl::KernelDef> sig;
  std::shared_ptr<const dsl::KernelDef> fixedDef; ///< null: per column count.

  mutable std::shared_mutex mu;
  /// Shape class -> what it resolved to (the warm path's lookup).
  std::unordered_map<SpecKey, std::unique_ptr<ClassEntry>, SpecKeyHash> specs;
  /// Entries replaced once a background tune found the winner; kept alive
  /// because `last` and running launches may still point at them.
  std::vector<std::unique_ptr<ClassEntry>> retired;
  /// Cache key text -> the loaded kernel (shared by classes that resolve
  /// to the same key).
  std::unordered_map<std::string, std::unique_ptr<Specialisation>> byKey;
  /// (cols, row class) -> definition.
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const dsl::KernelDef>>
      defsByCols;
  std::optional<keys::TileConfig> pinned;
  int configSerial = 0;
  std::atomic<const ClassEntry *> last{nullptr};
  /// Async mode: classes compiling in the background (no error) or whose
  /// background compile failed (its status and message). Taken before mu.
  struct AsyncClass {
    bitfold_status code = BITFOLD_SUCCESS;
    std::string error;
  };
  std::mutex asyncMu;
  std::unordered_map<SpecKey, AsyncClass, SpecKeyHash> asyncClasses;
  std::atomic<bool> programmatic{false};
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
  /// codegen::toolchainVersion(), resolved on first use: remembered per
  /// toolchain fingerprint in the cache directory, so a process whose
  /// kernels all come from the disk cache never probes the tools.
  const std::string &toolchain();
  /// Where first launches get their configs; null: the default.
  policy::ConfigSource *configSource() const { return source.get(); }
  /// Whether specialisations are keyed by row bucket (the source's answers
  /// depend on rows).
  bool bucketsRows() const { return bucketRows; }
  /// The device's name as the tune DB keys it ("NVIDIA H200"); asked once
  /// per device.
  llvm::Expected<std::string> gpuName(int device);

  /// The kernel of (def, shape, config, options) from the cache, compiled
  /// on a miss; keyed by keys::makeCacheKey with toolchain(). `keyText`
  /// receives the key's text. Thread safe.
  llvm::Expected<CompiledKernelRef>
  compileCached(const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                const keys::TileConfig &config,
                const keys::CompileOptions &options,
                std::string *keyText = nullptr, CacheOrigin *origin = nullptr,
                const ValidateFn &validate = {});

  /// Asynchronous compile mode (AsyncCompile.cpp, Kernel::specialiseAsync).
  /// Turning it on also starts the toolchain's set-up (tool probe, LLVM
  /// target init, nvJitLink's load and first link) on a compile thread, so
  /// the first compile of the process costs no more than any other. Its
  /// compiles count as prewarm compiles (prewarmStatus, waitPrewarm).
  void setAsyncCompile(bool on);
  bool asyncCompile() const { return async.load(std::memory_order_acquire); }
  /// Quick-first mode: a shape class whose chosen config is in neither
  /// cache first compiles Compiler::quickConfig's (the config whose PTX is
  /// shortest; every config gives the same bits) and launches that, while
  /// the chosen config compiles on the compile threads and replaces it for
  /// later launches. A launch then waits for the quick compile only (sync
  /// mode), or the eager chain serves for that long (async mode). Prewarm
  /// and pinned configs compile the chosen config only. Its background
  /// compiles count as prewarm compiles (prewarmStatus, waitPrewarm).
  /// Turning it on also starts the toolchain's set-up, as async mode does.
  void setQuickFirst(bool on);
  bool quickFirst() const { return quick.load(std::memory_order_acquire); }
  /// Whether (def, shape, config, options)'s kernel is in the memory cache
  /// or has a disk entry (not validated: a bad entry compiles again).
  bool isCached(const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                const keys::TileConfig &config,
                const keys::CompileOptions &options);
  /// Set once the runtime is being destroyed: queued background compiles
  /// are skipped (running ones finish; the destructor joins them).
  bool stopping() const { return shuttingDown.load(std::memory_order_acquire); }

  /// Starts the toolchain's set-up on a compile thread, once per runtime
  /// (Compiler::warmUp after the tool probe).
  void startWarmUp();
  /// Runs `task` on the compile threads (created on first use).
  void runInBackground(std::function<void()> task);
  /// Prewarm bookkeeping (Kernel::prewarm).
  void prewarmQueued(uint64_t n);
  void prewarmFinished(llvm::Error result);
  PrewarmStatus prewarmStatus() const;
  /// Blocks until no prewarm compile is pending; the status then.
  PrewarmStatus waitPrewarm();

private:
  KernelCache kernelCache;
  Compiler comp;
  std::once_flag toolchainOnce;
  std::string toolchainText;
  std::function<void(llvm::StringRef)> warn;
  unsigned compileThreads;
  std::shared_ptr<policy::ConfigSource> source;
  bool bucketRows = false;
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
  cuda::PerDevice<std::string> gpuNames;
  mutable std::mutex prewarmMu;
  std::condition_variable prewarmCv;
  PrewarmStatus prewarm;
  std::atomic<bool> async{false}, quick{false}, shuttingDown{false};
  std::once_flag warmUpOnce;
  /// Last member: destroyed (waiting for its tasks) before the kernels and
  /// the cache those tasks use.
  std::unique_ptr<llvm::ThreadPoolInterface> pool;
};

} // namespace bitfold::runtime

#endif // BITFOLD_RUNTIME_RUNTIME_H
