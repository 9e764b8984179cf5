//===- bitfold.hpp - C++ wrapper over bitfold's C API -------------*- C++ -*-===//
//
// Header only, over bitfold.h: RAII handles, std::string errors, no LLVM
// types, no exceptions. Every fallible call returns a bitfold::Status or a
// bitfold::Result<T> (a value or a Status).
//
//   auto rt = bitfold::Runtime::create();
//   if (!rt) { std::cerr << rt.status().message(); return 1; }
//   auto k = rt->kernel("ln_modulate", "dtype=bf16");
//   bitfold::Status s = k->launch({&x, &scale, &shift, &y}, {1e-6f}, stream);
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_HPP
#define BITFOLD_HPP

#include "bitfold.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace bitfold {

/// Success, or an error code with its message.
class Status {
public:
  Status() = default;
  Status(bitfold_status code, std::string message)
      : code_(code), message_(std::move(message)) {}
  /// The status of the last C call on this thread.
  static Status fromLastCall(bitfold_status code) {
    return code == BITFOLD_SUCCESS ? Status()
                                   : Status(code, bitfold_last_error());
  }
  bool ok() const { return code_ == BITFOLD_SUCCESS; }
  explicit operator bool() const { return ok(); }
  bitfold_status code() const { return code_; }
  const char *codeName() const { return bitfold_status_name(code_); }
  const std::string &message() const { return message_; }

private:
  bitfold_status code_ = BITFOLD_SUCCESS;
  std::string message_;
};

/// A value, or the Status saying why there is none.
template <typename T> class Result {
public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status status) : status_(std::move(status)) {}
  bool ok() const { return status_.ok(); }
  explicit operator bool() const { return ok(); }
  const Status &status() const { return status_; }
  T &value() { return value_; }
  const T &value() const { return value_; }
  T *operator->() { return &value_; }
  const T *operator->() const { return &value_; }
  T &operator*() { return value_; }

private:
  T value_{};
  Status status_;
};

/// A registered kernel with its parameters. Owned by its Runtime: a cheap,
/// copyable reference, valid while the Runtime lives.
class Kernel {
public:
  Kernel() = default;
  explicit Kernel(bitfold_kernel *k) : k_(k) {}
  bitfold_kernel *get() const { return k_; }

  /// Tensor names in launch order ("x", "scale", ..., "x[1]" for groups).
  std::vector<std::string> tensorNames() const {
    std::vector<std::string> out;
    for (int i = 0; i < bitfold_kernel_num_tensors(k_); ++i)
      out.push_back(bitfold_kernel_tensor_name(k_, i));
    return out;
  }
  bool isOutput(int i) const { return bitfold_kernel_tensor_is_output(k_, i); }
  std::vector<std::string> scalarNames() const {
    std::vector<std::string> out;
    for (int i = 0; i < bitfold_kernel_num_scalars(k_); ++i)
      out.push_back(bitfold_kernel_scalar_name(k_, i));
    return out;
  }
  int numGroups() const { return bitfold_kernel_num_groups(k_); }

  /// Pins the tile config ("r1.t128.v8.p1"); an empty string unpins it.
  Status setConfig(const std::string &config) {
    return Status::fromLastCall(bitfold_kernel_set_config(
        k_, config.empty() ? nullptr : config.c_str()));
  }

  /// Programmatic dependent launch for later launches; see
  /// bitfold_kernel_set_pdl.
  Status setPdl(bool enable) {
    return Status::fromLastCall(bitfold_kernel_set_pdl(k_, enable ? 1 : 0));
  }

  /// Compiles what launches on dense tensors of `shapes` (each the first
  /// tensor's dims) on `device` need, in the background; see
  /// bitfold_prewarm. Runtime::waitPrewarm() waits for it.
  Status prewarm(const std::vector<std::vector<int64_t>> &shapes,
                 int device = 0) {
    std::vector<int64_t> dims;
    std::vector<int> ndims;
    for (const std::vector<int64_t> &s : shapes) {
      dims.insert(dims.end(), s.begin(), s.end());
      ndims.push_back(int(s.size()));
    }
    return Status::fromLastCall(bitfold_prewarm(
        k_, int(shapes.size()), dims.data(), ndims.data(), device));
  }

  /// See bitfold_launch. `stream` is a CUstream (nullptr: legacy default).
  Status launch(const std::vector<const DLTensor *> &tensors,
                const std::vector<float> &scalars = {},
                void *stream = nullptr) const {
    return Status::fromLastCall(bitfold_launch(
        k_, tensors.data(), int(tensors.size()), scalars.data(),
        int(scalars.size()), stream));
  }
  Status launch(std::initializer_list<const DLTensor *> tensors,
                std::initializer_list<float> scalars = {},
                void *stream = nullptr) const {
    return launch(std::vector<const DLTensor *>(tensors),
                  std::vector<float>(scalars), stream);
  }

private:
  bitfold_kernel *k_ = nullptr;
};

struct RuntimeOptions {
  std::string cacheDir; ///< empty: $BITFOLD_CACHE_DIR / ~/.cache/bitfold
  bool diskCache = true;
  /// Tune DB file; empty: $BITFOLD_TUNE_DB (see bitfold.h). Initialised
  /// here so that {cacheDir, diskCache} aggregate initialisation stays
  /// warning-free.
  std::string tuneDb = "";
  /// Prewarm compile threads; 0: min(4, hardware threads).
  int compileThreads = 0;
  /// Disk cache byte budget; -1: $BITFOLD_CACHE_MAX_BYTES or 1 GiB; 0: none.
  int64_t cacheMaxBytes = -1;
  /// BITFOLD_TUNE_OFF / BITFOLD_TUNE_BACKGROUND / BITFOLD_TUNE_NOW.
  int tuneOnMiss = BITFOLD_TUNE_OFF;
  /// Wall time of all tunes together, seconds; <= 0: unlimited.
  double tuneBudgetSeconds = 60;
  /// Async compile mode (bitfold_runtime_set_async_compile): a launch of a
  /// shape class not compiled yet returns BITFOLD_STATUS_NOT_READY at once.
  bool asyncCompile = false;
  /// Quick-first mode (bitfold_runtime_set_quick_first): a new shape class
  /// runs the fastest-compiling config until the chosen one is compiled.
  bool quickFirst = false;
};

/// Owns a bitfold_runtime (move-only).
class Runtime {
public:
  using Options = RuntimeOptions;

  static Result<Runtime> create(const Options &options = Options()) {
    bitfold_runtime_options o;
    bitfold_runtime_options_init(&o);
    if (!options.cacheDir.empty())
      o.cache_dir = options.cacheDir.c_str();
    o.disk_cache = options.diskCache ? 1 : 0;
    if (!options.tuneDb.empty())
      o.tune_db = options.tuneDb.c_str();
    o.compile_threads = options.compileThreads;
    o.cache_max_bytes = options.cacheMaxBytes;
    o.tune_on_miss = options.tuneOnMiss;
    o.tune_budget_seconds = options.tuneBudgetSeconds;
    bitfold_runtime *rt = nullptr;
    bitfold_status s = bitfold_runtime_create(&o, &rt);
    if (s != BITFOLD_SUCCESS)
      return Status::fromLastCall(s);
    Runtime out(rt);
    if (options.asyncCompile)
      if (Status st = out.setAsyncCompile(true); !st)
        return st;
    if (options.quickFirst)
      if (Status st = out.setQuickFirst(true); !st)
        return st;
    return out;
  }

  Runtime() = default;
  Runtime(Runtime &&o) noexcept : rt_(std::exchange(o.rt_, nullptr)) {}
  Runtime &operator=(Runtime &&o) noexcept {
    if (this != &o) {
      bitfold_runtime_destroy(rt_);
      rt_ = std::exchange(o.rt_, nullptr);
    }
    return *this;
  }
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;
  ~Runtime() { bitfold_runtime_destroy(rt_); }

  bitfold_runtime *get() const { return rt_; }

  /// Looks a registered kernel up ("ln_modulate", "dtype=bf16"); see
  /// bitfold_kernel_from_registry.
  Result<Kernel> kernel(const std::string &name,
                        const std::string &params = "") const {
    bitfold_kernel *k = nullptr;
    bitfold_status s =
        bitfold_kernel_from_registry(rt_, name.c_str(), params.c_str(), &k);
    if (s != BITFOLD_SUCCESS)
      return Status::fromLastCall(s);
    return Kernel(k);
  }

  /// A kernel from a program text (the kernel text format); see
  /// bitfold_kernel_from_source. `Runtime::kernel(def)` of the jit
  /// component passes a KernelDef's canonical text here.
  Result<Kernel> kernelFromSource(const std::string &text) const {
    bitfold_kernel *k = nullptr;
    bitfold_status s =
        bitfold_kernel_from_source(rt_, text.data(), text.size(), &k);
    if (s != BITFOLD_SUCCESS)
      return Status::fromLastCall(s);
    return Kernel(k);
  }

  /// A kernel from a program built with the jit component's C++ DSL (a
  /// bitfold::dsl::KernelDef): its canonical text is its identity, so this
  /// is kernelFromSource(def.canonicalText). (A template, so that this
  /// header needs no DSL header.)
  template <typename Def, typename = decltype(std::declval<const Def &>()
                                                  .canonicalText)>
  Result<Kernel> kernel(const Def &def) const {
    return kernelFromSource(def.canonicalText);
  }

  /// Prewarm progress; with `wait`, after nothing is pending. The Status is
  /// an error when a prewarm compile failed (its message).
  Status prewarmStatus(bitfold_prewarm_status &out, bool wait = false) const {
    return Status::fromLastCall(
        bitfold_runtime_prewarm_status(rt_, wait ? 1 : 0, &out));
  }
  /// Async compile mode on or off (bitfold_runtime_set_async_compile).
  Status setAsyncCompile(bool on) const {
    return Status::fromLastCall(bitfold_runtime_set_async_compile(rt_, on));
  }
  /// Quick-first mode on or off (bitfold_runtime_set_quick_first).
  Status setQuickFirst(bool on) const {
    return Status::fromLastCall(bitfold_runtime_set_quick_first(rt_, on));
  }
  /// Blocks until every prewarm compile has finished.
  Status waitPrewarm() const {
    bitfold_prewarm_status st{};
    return prewarmStatus(st, /*wait=*/true);
  }

  static std::vector<std::string> kernelNames() {
    std::vector<std::string> out;
    for (int i = 0; i < bitfold_num_registered_kernels(); ++i)
      out.push_back(bitfold_registered_kernel_name(i));
    return out;
  }
  /// The 0.1 name of kernelNames().
  static std::vector<std::string> templateNames() { return kernelNames(); }

private:
  explicit Runtime(bitfold_runtime *rt) : rt_(rt) {}
  bitfold_runtime *rt_ = nullptr;
};

} // namespace bitfold

#endif // BITFOLD_HPP
