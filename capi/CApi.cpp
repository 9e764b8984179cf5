//===- capi/CApi.cpp - bitfold.h over the C++ runtime ------------------===//
//
// Every entry point: check its pointers, call the C++ runtime, translate
// llvm::Error into a status + thread-local message, and never let an
// exception escape.
//
//===----------------------------------------------------------------------===//

#include "capi/CApiInternal.h"

#include "capi/Compose.h"

#include "runtime/Runtime.h"
#include "runtime/Status.h"

#include "bitfold/Config.h"

#include <cstdlib>
#include <map>
#include <new>

using namespace bitfold;
using namespace bitfold::runtime;

struct bitfold_kernel {
  Kernel *kernel = nullptr;
  std::vector<std::string> tensorNames;
  std::vector<bool> tensorIsOutput;
  std::vector<std::string> scalarNames;
  int groups = 1;
};

struct bitfold_runtime {
  std::unique_ptr<Runtime> rt;
  std::mutex mu;
  std::map<Kernel *, std::unique_ptr<bitfold_kernel>> handles;
};

namespace {

thread_local std::string lastError;

bitfold_status succeed() {
  lastError.clear();
  return BITFOLD_SUCCESS;
}

bitfold_status failWith(bitfold_status code, const std::string &msg) {
  lastError = msg;
  return code;
}

bitfold_status fail(llvm::Error e) {
  std::string msg;
  bitfold_status code = takeCStatus(std::move(e), msg);
  lastError = msg;
  return code;
}

/// Runs `body`, turning exceptions (allocation failures) into statuses.
template <typename F> bitfold_status guarded(const char *fn, F &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return failWith(BITFOLD_ERROR_INTERNAL,
                    std::string(fn) + ": out of host memory");
  } catch (const std::exception &e) {
    return failWith(BITFOLD_ERROR_INTERNAL,
                    std::string(fn) + ": unexpected exception: " + e.what());
  } catch (...) {
    return failWith(BITFOLD_ERROR_INTERNAL,
                    std::string(fn) + ": unexpected exception");
  }
}

bitfold_status nullArg(const char *fn, const char *what) {
  return failWith(BITFOLD_ERROR_INVALID_ARGUMENT,
                  std::string(fn) + ": " + what + " is NULL");
}

} // namespace

bitfold_runtime *
bitfold::runtime::wrapRuntime(std::unique_ptr<Runtime> runtime) {
  auto *r = new bitfold_runtime;
  r->rt = std::move(runtime);
  return r;
}

Runtime *bitfold::runtime::unwrapRuntime(bitfold_runtime *runtime) {
  return runtime ? runtime->rt.get() : nullptr;
}

Kernel *bitfold::runtime::unwrapKernel(bitfold_kernel *kernel) {
  return kernel ? kernel->kernel : nullptr;
}

bitfold_status bitfold::runtime::statusFor(keys::ErrorKind kind) {
  switch (kind) {
  case keys::ErrorKind::Usage:
    return BITFOLD_ERROR_INVALID_ARGUMENT;
  case keys::ErrorKind::Compile:
    return BITFOLD_ERROR_COMPILE;
  case keys::ErrorKind::Driver:
    return BITFOLD_ERROR_CUDA;
  case keys::ErrorKind::BitsDiffer: // a codegen bug
  case keys::ErrorKind::Cache:
  case keys::ErrorKind::Tune:
    return BITFOLD_ERROR_INTERNAL;
  }
  return BITFOLD_ERROR_INTERNAL;
}

bitfold_status bitfold::runtime::takeCStatus(llvm::Error e,
                                             std::string &message) {
  // A typed kind takes its status from the map; the runtime's own errors
  // keep the code they carry.
  e = llvm::handleErrors(std::move(e),
                         [](keys::BitfoldError &b) -> llvm::Error {
                           return runtimeError(statusFor(b.kind()), b.message);
                         });
  return takeStatus(std::move(e), message);
}

bitfold_status bitfold::runtime::reportError(bitfold_status code,
                                             const char *message) {
  return guarded("reportError", [&] { return failWith(code, message); });
}

extern "C" {

BITFOLD_API const char *bitfold_status_name(bitfold_status status) {
  switch (status) {
  case BITFOLD_SUCCESS: return "BITFOLD_SUCCESS";
  case BITFOLD_ERROR_INVALID_ARGUMENT: return "BITFOLD_ERROR_INVALID_ARGUMENT";
  case BITFOLD_ERROR_UNKNOWN_TEMPLATE: return "BITFOLD_ERROR_UNKNOWN_TEMPLATE";
  case BITFOLD_ERROR_DTYPE: return "BITFOLD_ERROR_DTYPE";
  case BITFOLD_ERROR_SHAPE: return "BITFOLD_ERROR_SHAPE";
  case BITFOLD_ERROR_STRIDE: return "BITFOLD_ERROR_STRIDE";
  case BITFOLD_ERROR_ALIGNMENT: return "BITFOLD_ERROR_ALIGNMENT";
  case BITFOLD_ERROR_DEVICE: return "BITFOLD_ERROR_DEVICE";
  case BITFOLD_ERROR_UNSUPPORTED: return "BITFOLD_ERROR_UNSUPPORTED";
  case BITFOLD_ERROR_COMPILE: return "BITFOLD_ERROR_COMPILE";
  case BITFOLD_ERROR_NO_DRIVER: return "BITFOLD_ERROR_NO_DRIVER";
  case BITFOLD_ERROR_CUDA: return "BITFOLD_ERROR_CUDA";
  case BITFOLD_ERROR_INTERNAL: return "BITFOLD_ERROR_INTERNAL";
  case BITFOLD_STATUS_NOT_READY: return "BITFOLD_STATUS_NOT_READY";
  }
  return "BITFOLD_ERROR_UNKNOWN_STATUS";
}

BITFOLD_API const char *bitfold_last_error(void) { return lastError.c_str(); }

BITFOLD_API const char *bitfold_version(void) { return BITFOLD_VERSION; }

BITFOLD_API int bitfold_num_registered_kernels(void) {
  return int(templates::Registry::global().all().size());
}

BITFOLD_API const char *bitfold_registered_kernel_name(int i) {
  // Descriptors live as long as the process: the name stays valid.
  auto all = templates::Registry::global().all();
  if (i < 0 || size_t(i) >= all.size())
    return nullptr;
  return all[size_t(i)]->name.c_str();
}

// The 0.1 names, kept for the ABI (runtime/bitfold.h, "Old names").
BITFOLD_API int bitfold_num_templates(void) {
  return bitfold_num_registered_kernels();
}
BITFOLD_API const char *bitfold_template_name(int i) {
  return bitfold_registered_kernel_name(i);
}

BITFOLD_API void bitfold_runtime_options_init(bitfold_runtime_options *o) {
  if (!o)
    return;
  o->cache_dir = nullptr;
  o->disk_cache = 1;
  o->warning = nullptr;
  o->warning_user = nullptr;
  o->tune_db = nullptr;
  o->compile_threads = 0;
  o->cache_max_bytes = -1;
  o->tune_on_miss = BITFOLD_TUNE_OFF;
  o->tune_budget_seconds = 60;
}

BITFOLD_API bitfold_status
bitfold_runtime_create(const bitfold_runtime_options *options,
                       bitfold_runtime **out) {
  return guarded("bitfold_runtime_create", [&] {
    if (!out)
      return nullArg("bitfold_runtime_create", "out");
    *out = nullptr;
    installLlvmErrorHandlers();
    bitfold_runtime_options o;
    bitfold_runtime_options_init(&o);
    if (options)
      o = *options;
    if (o.compile_threads < 0 || o.tune_on_miss < BITFOLD_TUNE_OFF ||
        o.tune_on_miss > BITFOLD_TUNE_NOW || o.cache_max_bytes < -1)
      return failWith(BITFOLD_ERROR_INVALID_ARGUMENT,
                      "bitfold_runtime_create: compile_threads must be >= 0, "
                      "cache_max_bytes >= -1, tune_on_miss one of "
                      "BITFOLD_TUNE_OFF/BACKGROUND/NOW");
    RuntimeOptions ro;
    capi::TuneDbOptions tdb;
    if (o.cache_dir)
      ro.cache.dir = o.cache_dir;
    ro.cache.disk = o.disk_cache != 0;
    ro.cache.maxBytes = o.cache_max_bytes;
    ro.compileThreads = unsigned(o.compile_threads);
    tdb.tuneOnMiss.mode = autotune::TuneOnMissOptions::Mode(o.tune_on_miss);
    tdb.tuneOnMiss.budgetSeconds = o.tune_budget_seconds;
    if (o.tune_db)
      tdb.path = o.tune_db;
    else if (const char *env = std::getenv("BITFOLD_TUNE_DB"))
      tdb.path = env;
    if (o.warning) {
      auto fn = o.warning;
      void *user = o.warning_user;
      ro.cache.warn = [fn, user](llvm::StringRef msg) {
        std::string s = msg.str();
        fn(s.c_str(), user);
      };
    }
    *out = wrapRuntime(capi::makeRuntime(std::move(ro), tdb));
    return succeed();
  });
}

BITFOLD_API bitfold_status bitfold_runtime_cache_stats(bitfold_runtime *runtime,
                                                       bitfold_cache_stats *out) {
  return guarded("bitfold_runtime_cache_stats", [&] {
    if (!runtime)
      return nullArg("bitfold_runtime_cache_stats", "runtime");
    if (!out)
      return nullArg("bitfold_runtime_cache_stats", "out");
    CacheStats s = runtime->rt->cache().stats();
    out->memory_hits = s.memoryHits;
    out->disk_hits = s.diskHits;
    out->compiles = s.compiles;
    out->compile_failures = s.compileFailures;
    return succeed();
  });
}

BITFOLD_API bitfold_status
bitfold_runtime_prewarm_status(bitfold_runtime *runtime, int wait,
                               bitfold_prewarm_status *out) {
  return guarded("bitfold_runtime_prewarm_status", [&] {
    if (!runtime)
      return nullArg("bitfold_runtime_prewarm_status", "runtime");
    if (!out)
      return nullArg("bitfold_runtime_prewarm_status", "out");
    PrewarmStatus st = wait ? runtime->rt->waitPrewarm()
                            : runtime->rt->prewarmStatus();
    out->pending = st.pending;
    out->done = st.done;
    out->failed = st.failed;
    if (st.failed)
      return failWith(BITFOLD_ERROR_COMPILE,
                      std::to_string(st.failed) +
                          " prewarm compile(s) failed; the first: " +
                          st.firstError);
    return succeed();
  });
}

BITFOLD_API void bitfold_runtime_destroy(bitfold_runtime *runtime) {
  try {
    delete runtime;
  } catch (...) {
  }
}

namespace {

/// bitfold_kernel_from_registry under the entry point name `fn` (its
/// messages name the function the caller called).
bitfold_status kernelFromRegistry(const char *fn, bitfold_runtime *runtime,
                                  const char *name, const char *params,
                                  bitfold_kernel **out) {
  return guarded(fn, [&] {
    if (out)
      *out = nullptr;
    if (!runtime)
      return nullArg(fn, "runtime");
    if (!name)
      return nullArg(fn, "name");
    if (!out)
      return nullArg(fn, "out");
    auto k = runtime->rt->findKernel(name, params ? params : "");
    if (!k)
      return fail(k.takeError());
    std::lock_guard<std::mutex> lock(runtime->mu);
    std::unique_ptr<bitfold_kernel> &h = runtime->handles[*k];
    if (!h) {
      h = std::make_unique<bitfold_kernel>();
      h->kernel = *k;
      const dsl::KernelDef &def = (*k)->signature();
      h->groups = def.groups;
      for (int g = 0; g < def.groups; ++g)
        for (const dsl::OperandDecl &op : def.operands) {
          h->tensorNames.push_back(def.groups == 1 ? op.name
                                                   : op.name + "[" +
                                                         std::to_string(g) +
                                                         "]");
          h->tensorIsOutput.push_back(op.isOutput);
        }
      for (const dsl::ScalarDecl &s : def.scalars)
        h->scalarNames.push_back(s.name);
    }
    *out = h.get();
    return succeed();
  });
}

} // namespace

BITFOLD_API bitfold_status
bitfold_kernel_from_registry(bitfold_runtime *runtime, const char *name,
                             const char *params, bitfold_kernel **out) {
  return kernelFromRegistry("bitfold_kernel_from_registry", runtime, name,
                            params, out);
}

BITFOLD_API bitfold_status bitfold_template(bitfold_runtime *runtime,
                                            const char *name,
                                            const char *params,
                                            bitfold_kernel **out) {
  return kernelFromRegistry("bitfold_template", runtime, name, params, out);
}

BITFOLD_API int bitfold_kernel_num_tensors(const bitfold_kernel *k) {
  return k ? int(k->tensorNames.size()) : 0;
}

BITFOLD_API const char *bitfold_kernel_tensor_name(const bitfold_kernel *k,
                                                   int i) {
  if (!k || i < 0 || size_t(i) >= k->tensorNames.size())
    return nullptr;
  return k->tensorNames[size_t(i)].c_str();
}

BITFOLD_API int bitfold_kernel_tensor_is_output(const bitfold_kernel *k,
                                                int i) {
  if (!k || i < 0 || size_t(i) >= k->tensorIsOutput.size())
    return 0;
  return k->tensorIsOutput[size_t(i)] ? 1 : 0;
}

BITFOLD_API int bitfold_kernel_num_groups(const bitfold_kernel *k) {
  return k ? k->groups : 0;
}

BITFOLD_API int bitfold_kernel_num_scalars(const bitfold_kernel *k) {
  return k ? int(k->scalarNames.size()) : 0;
}

BITFOLD_API const char *bitfold_kernel_scalar_name(const bitfold_kernel *k,
                                                   int i) {
  if (!k || i < 0 || size_t(i) >= k->scalarNames.size())
    return nullptr;
  return k->scalarNames[size_t(i)].c_str();
}

BITFOLD_API bitfold_status bitfold_kernel_set_config(bitfold_kernel *kernel,
                                                     const char *config) {
  return guarded("bitfold_kernel_set_config", [&] {
    if (!kernel)
      return nullArg("bitfold_kernel_set_config", "kernel");
    if (!config) {
      llvm::consumeError(kernel->kernel->setConfig(std::nullopt));
      return succeed();
    }
    auto parsed = kernel->kernel->parseConfig(config);
    if (!parsed)
      return fail(parsed.takeError());
    if (llvm::Error e = kernel->kernel->setConfig(*parsed))
      return fail(std::move(e));
    return succeed();
  });
}

BITFOLD_API bitfold_status bitfold_kernel_set_pdl(bitfold_kernel *kernel,
                                                  int enable) {
  return guarded("bitfold_kernel_set_pdl", [&] {
    if (!kernel)
      return nullArg("bitfold_kernel_set_pdl", "kernel");
    if (enable != 0 && enable != 1)
      return failWith(BITFOLD_ERROR_INVALID_ARGUMENT,
                      "bitfold_kernel_set_pdl: enable must be 0 or 1, not " +
                          std::to_string(enable));
    kernel->kernel->setProgrammaticLaunch(enable == 1);
    return succeed();
  });
}

BITFOLD_API bitfold_status bitfold_prewarm(bitfold_kernel *kernel,
                                           int num_shapes,
                                           const int64_t *dims,
                                           const int *ndims, int device) {
  return guarded("bitfold_prewarm", [&] {
    if (!kernel)
      return nullArg("bitfold_prewarm", "kernel");
    if (num_shapes < 0 || device < 0)
      return failWith(BITFOLD_ERROR_INVALID_ARGUMENT,
                      "bitfold_prewarm: num_shapes and device must be >= 0");
    if (num_shapes > 0 && (!dims || !ndims))
      return nullArg("bitfold_prewarm", !dims ? "dims" : "ndims");
    std::vector<std::vector<int64_t>> shapes;
    for (int i = 0; i < num_shapes; ++i) {
      if (ndims[i] < 1 || ndims[i] > kMaxNdim)
        return failWith(BITFOLD_ERROR_INVALID_ARGUMENT,
                        "bitfold_prewarm: ndims[" + std::to_string(i) +
                            "] is " + std::to_string(ndims[i]) +
                            ", outside [1, " + std::to_string(kMaxNdim) + "]");
      shapes.emplace_back(dims, dims + ndims[i]);
      dims += ndims[i];
    }
    if (llvm::Error e = kernel->kernel->prewarm(shapes, device))
      return fail(std::move(e));
    return succeed();
  });
}

BITFOLD_API bitfold_status bitfold_launch(bitfold_kernel *kernel,
                                          const DLTensor *const *tensors,
                                          int num_tensors,
                                          const float *scalars,
                                          int num_scalars, void *stream) {
  return guarded("bitfold_launch", [&] {
    if (!kernel)
      return nullArg("bitfold_launch", "kernel");
    if (llvm::Error e = kernel->kernel->launch(tensors, num_tensors, scalars,
                                               num_scalars,
                                               static_cast<CUstream>(stream)))
      return fail(std::move(e));
    return succeed();
  });
}

} // extern "C"

namespace {

/// Turns one of a runtime's modes on or off (`fn` names the entry point);
/// no exception crosses the C ABI (the set-up they start makes threads).
bitfold_status setMode(bitfold_runtime *runtime, int on, const char *fn,
                       void (Runtime::*set)(bool)) {
  Runtime *rt = unwrapRuntime(runtime);
  if (!rt)
    return reportError(BITFOLD_ERROR_INVALID_ARGUMENT,
                       (std::string(fn) + ": runtime is NULL").c_str());
  const char *what = nullptr;
  try {
    (rt->*set)(on != 0);
    return reportError(BITFOLD_SUCCESS, "");
  } catch (const std::bad_alloc &) {
    what = ": out of host memory";
  } catch (...) {
    what = ": unexpected exception";
  }
  return reportError(BITFOLD_ERROR_INTERNAL, (std::string(fn) + what).c_str());
}

} // namespace

extern "C" BITFOLD_API bitfold_status
bitfold_runtime_set_quick_first(bitfold_runtime *runtime, int on) {
  return setMode(runtime, on, "bitfold_runtime_set_quick_first",
                 &Runtime::setQuickFirst);
}

extern "C" BITFOLD_API bitfold_status
bitfold_runtime_set_async_compile(bitfold_runtime *runtime, int on) {
  return setMode(runtime, on, "bitfold_runtime_set_async_compile",
                 &Runtime::setAsyncCompile);
}
