//===- cuda/Driver.cpp - The CUDA driver, loaded at run time -----------===//

#include "cuda/Driver.h"
#include "cuda/PerDevice.h"

#include "keys/Errors.h"

#include "llvm/Support/FormatVariadic.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

using namespace bitfold::cuda;
using bitfold::keys::driverError;

namespace {

/// ABI version asked of cuGetProcAddress: every pointer type in DriverApi
/// is the newest ABI of its function at or below CUDA 12.0.
constexpr int kApiVersion = 12000;

struct LoadedDriver {
  DriverApi api;
  std::string error; ///< non-empty: why the driver is unusable.
};

/// One entry point: the base name cuGetProcAddress knows, and the exported
/// (possibly versioned) name for the dlsym fallback.
struct EntryPoint {
  const char *name;
  const char *exported;
  void **slot;
  bool optional = false; ///< left null where the driver lacks it.
};

/// The library named by $BITFOLD_LIBCUDA (default libcuda.so.1), or the
/// error saying why it did not load.
void *openLibrary(LoadedDriver &out) {
  const char *env = std::getenv("BITFOLD_LIBCUDA");
  out.api.libraryPath = env && *env ? env : "libcuda.so.1";
  void *lib = dlopen(out.api.libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    out.error = llvm::formatv("cannot load the CUDA driver: dlopen(\"{0}\") "
                              "failed: {1}",
                              out.api.libraryPath,
                              why ? why : "unknown reason");
  }
  return lib;
}

/// Every entry point bitfold uses, with the slot it fills in `a`.
std::vector<EntryPoint> entryPoints(DriverApi &a) {
  return {
#define BF_ENTRY(field, exported)                                              \
  {#field, exported, reinterpret_cast<void **>(&a.field)}
#define BF_OPTIONAL(field, exported)                                           \
  {#field, exported, reinterpret_cast<void **>(&a.field), /*optional=*/true}
      BF_ENTRY(cuInit, "cuInit"),
      BF_ENTRY(cuDriverGetVersion, "cuDriverGetVersion"),
      BF_ENTRY(cuGetErrorName, "cuGetErrorName"),
      BF_ENTRY(cuGetErrorString, "cuGetErrorString"),
      BF_ENTRY(cuDeviceGet, "cuDeviceGet"),
      BF_ENTRY(cuDeviceGetCount, "cuDeviceGetCount"),
      BF_ENTRY(cuDeviceGetName, "cuDeviceGetName"),
      BF_ENTRY(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
      BF_ENTRY(cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
      BF_ENTRY(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      BF_ENTRY(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
      BF_ENTRY(cuCtxGetCurrent, "cuCtxGetCurrent"),
      BF_ENTRY(cuCtxSetCurrent, "cuCtxSetCurrent"),
      BF_ENTRY(cuCtxPushCurrent, "cuCtxPushCurrent_v2"),
      BF_ENTRY(cuCtxPopCurrent, "cuCtxPopCurrent_v2"),
      BF_ENTRY(cuCtxGetDevice, "cuCtxGetDevice"),
      BF_ENTRY(cuCtxSynchronize, "cuCtxSynchronize"),
      BF_ENTRY(cuModuleLoadData, "cuModuleLoadData"),
      BF_ENTRY(cuModuleUnload, "cuModuleUnload"),
      BF_ENTRY(cuModuleGetFunction, "cuModuleGetFunction"),
      BF_ENTRY(cuFuncGetAttribute, "cuFuncGetAttribute"),
      BF_ENTRY(cuLaunchKernel, "cuLaunchKernel"),
      BF_OPTIONAL(cuLaunchKernelEx, "cuLaunchKernelEx"),
      BF_ENTRY(cuEventCreate, "cuEventCreate"),
      BF_ENTRY(cuEventDestroy, "cuEventDestroy_v2"),
      BF_ENTRY(cuEventRecord, "cuEventRecord"),
      BF_ENTRY(cuEventSynchronize, "cuEventSynchronize"),
      BF_ENTRY(cuEventElapsedTime, "cuEventElapsedTime"),
      BF_ENTRY(cuMemAlloc, "cuMemAlloc_v2"),
      BF_ENTRY(cuMemFree, "cuMemFree_v2"),
      BF_ENTRY(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
      BF_ENTRY(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
      BF_ENTRY(cuMemsetD8, "cuMemsetD8_v2"),
      BF_ENTRY(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
      BF_ENTRY(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
      BF_ENTRY(cuMemsetD8Async, "cuMemsetD8Async"),
      BF_ENTRY(cuStreamSynchronize, "cuStreamSynchronize"),
      BF_OPTIONAL(cuStreamCreate, "cuStreamCreate"),
      BF_OPTIONAL(cuStreamDestroy, "cuStreamDestroy_v2"),
      BF_OPTIONAL(cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
      BF_OPTIONAL(cuStreamEndCapture, "cuStreamEndCapture"),
      BF_OPTIONAL(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"),
      BF_OPTIONAL(cuGraphLaunch, "cuGraphLaunch"),
      BF_OPTIONAL(cuGraphExecDestroy, "cuGraphExecDestroy"),
      BF_OPTIONAL(cuGraphDestroy, "cuGraphDestroy"),
      BF_ENTRY(cuLinkCreate, "cuLinkCreate_v2"),
      BF_ENTRY(cuLinkAddData, "cuLinkAddData_v2"),
      BF_ENTRY(cuLinkComplete, "cuLinkComplete"),
      BF_ENTRY(cuLinkDestroy, "cuLinkDestroy"),
      BF_OPTIONAL(cuThreadExchangeStreamCaptureMode,
                  "cuThreadExchangeStreamCaptureMode"),
#undef BF_ENTRY
#undef BF_OPTIONAL
  };
}

/// Resolves every entry point through cuGetProcAddress (the CUDA 12
/// signature first), else dlsym; false (with out.error) when a required
/// one is missing.
bool resolveEntryPoints(void *lib, LoadedDriver &out) {
  DriverApi &a = out.api;
  auto getProcV2 = reinterpret_cast<PFN_cuGetProcAddress_v12000>(
      dlsym(lib, "cuGetProcAddress_v2"));
  auto getProcV1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(
      dlsym(lib, "cuGetProcAddress"));
  a.resolvedWith = getProcV2   ? "cuGetProcAddress_v2"
                   : getProcV1 ? "cuGetProcAddress"
                               : "dlsym";
  for (const EntryPoint &e : entryPoints(a)) {
    void *fn = nullptr;
    if (getProcV2) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      if (getProcV2(e.name, &fn, kApiVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                    &status) != CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS)
        fn = nullptr;
    } else if (getProcV1) {
      if (getProcV1(e.name, &fn, kApiVersion,
                    CU_GET_PROC_ADDRESS_LEGACY_STREAM) != CUDA_SUCCESS)
        fn = nullptr;
    }
    if (!fn)
      fn = dlsym(lib, e.exported);
    if (!fn && e.optional)
      continue;
    if (!fn) {
      out.error = llvm::formatv(
          "cannot use the CUDA driver {0}: entry point {1} (ABI of CUDA "
          "{2}.{3}) not found (resolved with {4}); the driver is too old",
          a.libraryPath, e.name, kApiVersion / 1000, kApiVersion % 1000 / 10,
          a.resolvedWith);
      return false;
    }
    *e.slot = fn;
  }
  return true;
}

/// cuInit(0); false (with out.error naming the result) when it fails.
bool initialise(LoadedDriver &out) {
  DriverApi &a = out.api;
  CUresult r = a.cuInit(0);
  if (r == CUDA_SUCCESS) {
    a.cuDriverGetVersion(&a.version);
    return true;
  }
  const char *name = nullptr, *desc = nullptr;
  a.cuGetErrorName(r, &name);
  a.cuGetErrorString(r, &desc);
  std::string n = name ? name : "CUresult " + std::to_string(int(r));
  std::string d = desc                            ? desc
                  : r == CUDA_ERROR_STUB_LIBRARY ? "a stub library, not a driver"
                                                  : "no description";
  out.error = llvm::formatv("the CUDA driver {0} loaded but cuInit failed: "
                            "{1} ({2})",
                            a.libraryPath, n, d);
  return false;
}

LoadedDriver load() {
  LoadedDriver out;
  void *lib = openLibrary(out);
  // The library stays loaded for the life of the process.
  if (lib && resolveEntryPoints(lib, out))
    initialise(out);
  return out;
}

const LoadedDriver &loaded() {
  static const LoadedDriver d = load();
  return d;
}

llvm::Expected<CUdevice> deviceHandle(const DriverApi &api, int ordinal) {
  int count = 0;
  if (llvm::Error e = checkCuda(api.cuDeviceGetCount(&count),
                                "cuDeviceGetCount"))
    return std::move(e);
  if (ordinal < 0 || ordinal >= count)
    return driverError(
        llvm::formatv("device cuda:{0} does not exist (the driver "
                      "sees {1} device(s))",
                      ordinal, count));
  CUdevice dev = 0;
  if (llvm::Error e = checkCuda(api.cuDeviceGet(&dev, ordinal),
                                llvm::formatv("cuDeviceGet({0})", ordinal)))
    return std::move(e);
  return dev;
}

} // namespace

llvm::Expected<const DriverApi &> bitfold::cuda::driver() {
  const LoadedDriver &d = loaded();
  if (!d.error.empty())
    return driverError(d.error);
  return d.api;
}

const DriverApi &bitfold::cuda::loadedDriver() { return loaded().api; }

llvm::Error bitfold::cuda::checkCuda(CUresult result,
                                        const llvm::Twine &what) {
  if (result == CUDA_SUCCESS)
    return llvm::Error::success();
  const char *name = nullptr, *desc = nullptr;
  const LoadedDriver &d = loaded();
  if (d.api.cuGetErrorName) {
    d.api.cuGetErrorName(result, &name);
    d.api.cuGetErrorString(result, &desc);
  }
  if (!name)
    return driverError(what + ": CUresult " + llvm::Twine(int(result)));
  return driverError(what + ": " + name + " (" + (desc ? desc : "") + ")");
}

std::string DeviceInfo::arch() const {
  return llvm::formatv("sm_{0}{1}", ccMajor, ccMinor).str();
}

std::string DriverInfo::versionString() const {
  return llvm::formatv("{0}.{1}", driverVersion / 1000,
                       driverVersion % 1000 / 10)
      .str();
}

llvm::Expected<DriverInfo> bitfold::cuda::queryDriver() {
  auto api = driver();
  if (!api)
    return api.takeError();
  DriverInfo info;
  info.libraryPath = api->libraryPath;
  info.driverVersion = api->version;
  int count = 0;
  if (llvm::Error e = checkCuda(api->cuDeviceGetCount(&count),
                                "cuDeviceGetCount"))
    return std::move(e);
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (llvm::Error e = checkCuda(api->cuDeviceGet(&dev, i), "cuDeviceGet"))
      return std::move(e);
    DeviceInfo d;
    d.ordinal = i;
    char name[256] = {0};
    if (llvm::Error e = checkCuda(api->cuDeviceGetName(name, sizeof(name) - 1,
                                                       dev),
                                  "cuDeviceGetName"))
      return std::move(e);
    d.name = name;
    api->cuDeviceGetAttribute(
        &d.ccMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    api->cuDeviceGetAttribute(
        &d.ccMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    api->cuDeviceGetAttribute(&d.multiprocessors,
                              CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    size_t mem = 0;
    api->cuDeviceTotalMem(&mem, dev);
    d.totalMemBytes = mem;
    info.devices.push_back(std::move(d));
  }
  return info;
}

namespace {

llvm::Expected<std::string> probeArch(int ordinal) {
  auto api = driver();
  if (!api)
    return api.takeError();
  auto dev = deviceHandle(*api, ordinal);
  if (!dev)
    return dev.takeError();
  int major = 0, minor = 0;
  if (llvm::Error e = checkCuda(
          api->cuDeviceGetAttribute(
              &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *dev),
          "cuDeviceGetAttribute(compute capability)"))
    return std::move(e);
  api->cuDeviceGetAttribute(&minor,
                            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *dev);
  if (major * 10 + minor < kMinComputeCapability) {
    char name[256] = {0};
    api->cuDeviceGetName(name, sizeof(name) - 1, *dev);
    return driverError(llvm::formatv(
        "device cuda:{0} ('{1}') has compute capability {2}.{3}; bitfold "
        "needs {4}.{5} (sm_{6}) or newer",
        ordinal, name, major, minor, kMinComputeCapability / 10,
        kMinComputeCapability % 10, kMinComputeCapability));
  }
  return llvm::formatv("sm_{0}{1}", major, minor).str();
}

llvm::Expected<CUcontext> retainPrimaryContext(int ordinal) {
  auto api = driver();
  if (!api)
    return api.takeError();
  auto dev = deviceHandle(*api, ordinal);
  if (!dev)
    return dev.takeError();
  CUcontext ctx = nullptr;
  RelaxedCapture relaxed(*api);
  if (llvm::Error e = checkCuda(api->cuDevicePrimaryCtxRetain(&ctx, *dev),
                                llvm::formatv("cuDevicePrimaryCtxRetain(cuda:{0})",
                                              ordinal)))
    return std::move(e);
  return ctx;
}

} // namespace

llvm::Expected<std::string> bitfold::cuda::deviceArch(int ordinal) {
  static PerDevice<std::string> archs;
  return archs.get(ordinal, [&] { return probeArch(ordinal); });
}

llvm::Expected<CUcontext> bitfold::cuda::primaryContext(int ordinal) {
  // Retained once per ordinal and never released, as in PyTorch.
  static PerDevice<CUcontext> contexts;
  return contexts.get(ordinal, [&] { return retainPrimaryContext(ordinal); });
}

// ---- RelaxedCapture --------------------------------------------------------

RelaxedCapture::RelaxedCapture(const DriverApi &a) {
  if (!a.cuThreadExchangeStreamCaptureMode)
    return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (a.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
    return;
  api = &a;
  previous = mode;
}

RelaxedCapture::~RelaxedCapture() {
  if (api)
    api->cuThreadExchangeStreamCaptureMode(&previous);
}

// ---- ScopedContext ---------------------------------------------------------

llvm::Expected<ScopedContext> ScopedContext::forDevice(int ordinal) {
  auto api = driver();
  if (!api)
    return api.takeError();
  auto dev = deviceHandle(*api, ordinal);
  if (!dev)
    return dev.takeError();
  CUcontext cur = nullptr;
  if (llvm::Error e = checkCuda(api->cuCtxGetCurrent(&cur), "cuCtxGetCurrent"))
    return std::move(e);
  ScopedContext sc;
  if (cur) {
    CUdevice curDev = -1;
    if (api->cuCtxGetDevice(&curDev) == CUDA_SUCCESS && curDev == *dev) {
      sc.ctx = cur;
      return std::move(sc);
    }
  }
  auto primary = primaryContext(ordinal);
  if (!primary)
    return primary.takeError();
  if (!cur) {
    if (llvm::Error e = checkCuda(api->cuCtxSetCurrent(*primary),
                                  "cuCtxSetCurrent(primary context)"))
      return std::move(e);
  } else {
    if (llvm::Error e = checkCuda(api->cuCtxPushCurrent(*primary),
                                  "cuCtxPushCurrent(primary context)"))
      return std::move(e);
    sc.pushed = true;
  }
  sc.ctx = *primary;
  return std::move(sc);
}

ScopedContext::ScopedContext(ScopedContext &&other) noexcept
    : ctx(other.ctx), pushed(other.pushed) {
  other.ctx = nullptr;
  other.pushed = false;
}

ScopedContext::~ScopedContext() {
  if (pushed) {
    CUcontext popped = nullptr;
    loaded().api.cuCtxPopCurrent(&popped);
  }
}

// ---- Module ----------------------------------------------------------------

llvm::Expected<Module> Module::load(llvm::ArrayRef<char> image) {
  auto api = driver();
  if (!api)
    return api.takeError();
  Module m;
  if (llvm::Error e = checkCuda(api->cuCtxGetCurrent(&m.ctx), "cuCtxGetCurrent"))
    return std::move(e);
  if (!m.ctx)
    return driverError("cannot load a module: no CUDA context is current");
  if (image.empty())
    return driverError("cannot load a module: the image is empty");
  RelaxedCapture relaxed(*api);
  if (llvm::Error e = checkCuda(api->cuModuleLoadData(&m.mod, image.data()),
                                llvm::formatv("cuModuleLoadData ({0} bytes)",
                                              image.size())))
    return std::move(e);
  return std::move(m);
}

Module::Module(Module &&other) noexcept : mod(other.mod), ctx(other.ctx) {
  other.mod = nullptr;
  other.ctx = nullptr;
}

Module &Module::operator=(Module &&other) noexcept {
  if (this != &other) {
    reset();
    mod = other.mod;
    ctx = other.ctx;
    other.mod = nullptr;
    other.ctx = nullptr;
  }
  return *this;
}

void Module::reset() {
  if (!mod)
    return;
  const DriverApi &api = loaded().api;
  // Unload in the module's own context; errors (a context the caller has
  // already destroyed) are ignored.
  CUcontext cur = nullptr;
  api.cuCtxGetCurrent(&cur);
  bool push = cur != ctx && api.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
  {
    RelaxedCapture relaxed(api);
    api.cuModuleUnload(mod);
  }
  if (push) {
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent(&popped);
  }
  mod = nullptr;
  ctx = nullptr;
}

Module::~Module() { reset(); }

llvm::Expected<CUfunction> Module::function(llvm::StringRef name) const {
  auto api = driver();
  if (!api)
    return api.takeError();
  CUfunction fn = nullptr;
  std::string n = name.str();
  if (llvm::Error e = checkCuda(api->cuModuleGetFunction(&fn, mod, n.c_str()),
                                "cuModuleGetFunction(" + name + ")"))
    return std::move(e);
  return fn;
}

// ---- PTX -> cubin through the driver's linker ------------------------------

llvm::Expected<std::vector<char>>
bitfold::cuda::linkPtxWithDriver(llvm::StringRef ptx, llvm::StringRef arch,
                                    int ordinal, std::string *infoLog,
                                    int optLevel) {
  auto api = driver();
  if (!api)
    return api.takeError();
  int target = 0;
  if (!arch.empty()) {
    llvm::StringRef digits = arch;
    bool accelerated = digits.consume_back("a");
    if (!digits.consume_front("sm_") || digits.getAsInteger(10, target) ||
        target <= 0)
      return driverError(llvm::formatv("linkPtxWithDriver: bad arch '{0}' "
                                       "(expected sm_XY or sm_XYa)",
                                       arch));
    if (accelerated)
      target += CU_COMPUTE_ACCELERATED_TARGET_BASE;
  }
  // The whole link runs relaxed: the JIT linker is refused in a capture.
  RelaxedCapture relaxed(*api);
  auto ctx = ScopedContext::forDevice(ordinal);
  if (!ctx)
    return ctx.takeError();

  std::vector<char> errorLog(16384, 0), infoBuf(16384, 0);
  std::vector<CUjit_option> opts = {
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  std::vector<void *> vals = {
      errorLog.data(), reinterpret_cast<void *>(uintptr_t(errorLog.size() - 1)),
      infoBuf.data(), reinterpret_cast<void *>(uintptr_t(infoBuf.size() - 1))};
  if (target) {
    opts.push_back(CU_JIT_TARGET);
    vals.push_back(reinterpret_cast<void *>(uintptr_t(target)));
  }
  opts.push_back(CU_JIT_OPTIMIZATION_LEVEL);
  vals.push_back(reinterpret_cast<void *>(uintptr_t(optLevel)));

  CUlinkState state = nullptr;
  if (llvm::Error e = checkCuda(api->cuLinkCreate(unsigned(opts.size()),
                                                  opts.data(), vals.data(),
                                                  &state),
                                "cuLinkCreate"))
    return std::move(e);
  auto withLog = [&](llvm::Error e) -> llvm::Error {
    std::string log(errorLog.data());
    api->cuLinkDestroy(state);
    if (log.empty())
      return e;
    return driverError(llvm::toString(std::move(e)) + "\n" + log);
  };
  std::string text = ptx.str(); // NUL-terminated, as the driver wants.
  if (llvm::Error e = checkCuda(
          api->cuLinkAddData(state, CU_JIT_INPUT_PTX, text.data(),
                             text.size() + 1, "bitfold.ptx", 0, nullptr,
                             nullptr),
          "cuLinkAddData(PTX)"))
    return withLog(std::move(e));
  void *cubin = nullptr;
  size_t size = 0;
  if (llvm::Error e = checkCuda(api->cuLinkComplete(state, &cubin, &size),
                                "cuLinkComplete"))
    return withLog(std::move(e));
  std::vector<char> out(static_cast<char *>(cubin),
                        static_cast<char *>(cubin) + size);
  if (infoLog)
    *infoLog = std::string(infoBuf.data());
  api->cuLinkDestroy(state); // owns `cubin`.
  return out;
}
