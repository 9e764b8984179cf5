//===- cuda/Driver.h - The CUDA driver, loaded at run time ---*- C++ -*-===//
//
// bitfold never links libcuda: it dlopen()s "libcuda.so.1" the first time a
// GPU is needed, so the library loads, compiles and answers questions on a
// machine without a GPU, and says exactly why it cannot launch there.
//
// Entry points are resolved through cuGetProcAddress (itself found with
// dlsym: the CUDA 12 signature with flags and a query result, else the
// CUDA 11.3 one), asking for the ABI of CUDA 12.0 with legacy-stream
// semantics; a driver without cuGetProcAddress falls back to dlsym of the
// versioned names. Every pointer type is pinned to one ABI version
// (cudaTypedefs.h), so a newer cuda.h cannot change what is called.
//
// Contexts follow PyTorch: work runs in the caller's current context when it
// belongs to the tensor's device; otherwise in that device's primary
// context, retained once per process and never released (as PyTorch does).
// With no current context at all, the primary context is made current and
// left current, again as PyTorch does.
//
// $BITFOLD_LIBCUDA names another library to load instead of libcuda.so.1
// (tests point it at a missing file to check the no-driver path).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CUDA_DRIVER_H
#define BITFOLD_CUDA_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace bitfold::cuda {

/// The driver entry points bitfold uses, each pinned to one ABI version.
struct DriverApi {
  std::string libraryPath; ///< what was dlopen()ed.
  int version = 0;         ///< cuDriverGetVersion, e.g. 13000.
  std::string resolvedWith;///< "cuGetProcAddress_v2", "cuGetProcAddress", "dlsym".

  PFN_cuInit_v2000 cuInit = nullptr;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent = nullptr;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent = nullptr;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize = nullptr;
  PFN_cuModuleLoadData_v2000 cuModuleLoadData = nullptr;
  PFN_cuModuleUnload_v2000 cuModuleUnload = nullptr;
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction = nullptr;
  PFN_cuFuncGetAttribute_v2020 cuFuncGetAttribute = nullptr;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel = nullptr;
  /// Optional (CUDA 11.8+): null where the driver lacks it; launches with
  /// attributes (programmatic dependent launch) need it.
  PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx = nullptr;
  PFN_cuEventCreate_v2000 cuEventCreate = nullptr;
  PFN_cuEventDestroy_v4000 cuEventDestroy = nullptr;
  PFN_cuEventRecord_v2000 cuEventRecord = nullptr;
  PFN_cuEventSynchronize_v2000 cuEventSynchronize = nullptr;
  PFN_cuEventElapsedTime_v2000 cuEventElapsedTime = nullptr;
  PFN_cuMemAlloc_v3020 cuMemAlloc = nullptr;
  PFN_cuMemFree_v3020 cuMemFree = nullptr;
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD = nullptr;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH = nullptr;
  PFN_cuMemsetD8_v3020 cuMemsetD8 = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync = nullptr;
  PFN_cuMemsetD8Async_v3020 cuMemsetD8Async = nullptr;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize = nullptr;
  /// Optional (CUDA 11.4+): streams, stream capture and graphs, for timing
  /// launches back to back without the host between them (LaunchGraph).
  PFN_cuStreamCreate_v2000 cuStreamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy = nullptr;
  PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture = nullptr;
  PFN_cuStreamEndCapture_v10000 cuStreamEndCapture = nullptr;
  PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags = nullptr;
  PFN_cuGraphLaunch_v10000 cuGraphLaunch = nullptr;
  PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy = nullptr;
  PFN_cuGraphDestroy_v10000 cuGraphDestroy = nullptr;
  PFN_cuLinkCreate_v6050 cuLinkCreate = nullptr;
  PFN_cuLinkAddData_v6050 cuLinkAddData = nullptr;
  PFN_cuLinkComplete_v5050 cuLinkComplete = nullptr;
  PFN_cuLinkDestroy_v5050 cuLinkDestroy = nullptr;
  /// Optional (CUDA 10.1+): RelaxedCapture is a no-op without it.
  PFN_cuThreadExchangeStreamCaptureMode_v10010
      cuThreadExchangeStreamCaptureMode = nullptr;
};

/// Loads and initialises the driver once per process (thread safe). The
/// error (kept and returned again on every later call) says why: dlopen's
/// text, a missing entry point, or cuInit's result.
llvm::Expected<const DriverApi &> driver();

/// driver()'s table without the check, for the handles below: they exist
/// only once driver() has succeeded (their entry points are then set).
const DriverApi &loadedDriver();

/// "<what>: CUDA_ERROR_NAME (description)", or success for CUDA_SUCCESS.
llvm::Error checkCuda(CUresult result, const llvm::Twine &what);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int ccMajor = 0, ccMinor = 0;
  uint64_t totalMemBytes = 0;
  int multiprocessors = 0;
  /// "sm_90": the codegen target for this device.
  std::string arch() const;
};

struct DriverInfo {
  std::string libraryPath;
  int driverVersion = 0; ///< e.g. 13000 = CUDA 13.0.
  std::vector<DeviceInfo> devices;
  /// "13.0".
  std::string versionString() const;
};

/// The driver's version and every device (name, compute capability). For
/// `bitfold version`; fails as driver() does without a driver.
llvm::Expected<DriverInfo> queryDriver();

/// The oldest GPUs bitfold generates code for: compute capability 8.0
/// (sm_80, Ampere). Older targets lack instructions the kernels use, and
/// LLVM's NVPTX backend dies on some of them (a fatal error, not an Error).
constexpr int kMinComputeCapability = 80;

/// "sm_XY" of a device (cached per device after the first query). An error
/// naming the device and the minimum when it is below
/// kMinComputeCapability, so nothing reaches codegen for it.
llvm::Expected<std::string> deviceArch(int ordinal);

/// This thread's stream-capture mode, relaxed while the object lives and
/// restored after. While a CUDA graph capture in global mode runs (the
/// default of cuStreamBeginCapture and of torch.cuda.graph), on this thread
/// or any other, every thread that is not relaxed is refused "potentially
/// unsafe" calls (module loads and unloads, memory allocation, the JIT
/// linker, context set-up), and the refused call also invalidates that
/// capture. What cuda/ does in those calls is never part of a graph, so
/// each runs relaxed: a first launch, or a compile on another thread, does
/// not break a caller's capture. A no-op where the driver lacks the entry.
class RelaxedCapture {
public:
  explicit RelaxedCapture(const DriverApi &api);
  RelaxedCapture(const RelaxedCapture &) = delete;
  RelaxedCapture &operator=(const RelaxedCapture &) = delete;
  ~RelaxedCapture();

private:
  const DriverApi *api = nullptr; ///< null: nothing to restore.
  CUstreamCaptureMode previous = CU_STREAM_CAPTURE_MODE_GLOBAL;
};

/// The primary context of a device, retained on first use and kept for the
/// life of the process (as PyTorch does).
llvm::Expected<CUcontext> primaryContext(int ordinal);

/// Makes a context of device `ordinal` current for its lifetime: the
/// caller's current context when it is on that device; else the device's
/// primary context (set current and left there when no context was
/// current, pushed and popped again when another device's context was).
class ScopedContext {
public:
  static llvm::Expected<ScopedContext> forDevice(int ordinal);
  ScopedContext(ScopedContext &&other) noexcept;
  ScopedContext &operator=(ScopedContext &&) = delete;
  ScopedContext(const ScopedContext &) = delete;
  ~ScopedContext();
  CUcontext get() const { return ctx; }

private:
  ScopedContext() = default;
  CUcontext ctx = nullptr;
  bool pushed = false;
};

/// A loaded module (cubin or PTX image), unloaded on destruction.
class Module {
public:
  /// Loads `image` (a cubin/fatbin, or NUL-terminated PTX text) into the
  /// current context.
  static llvm::Expected<Module> load(llvm::ArrayRef<char> image);
  Module() = default;
  Module(Module &&other) noexcept;
  Module &operator=(Module &&other) noexcept;
  ~Module();
  llvm::Expected<CUfunction> function(llvm::StringRef name) const;
  CUmodule get() const { return mod; }
  CUcontext context() const { return ctx; }

private:
  void reset();
  CUmodule mod = nullptr;
  CUcontext ctx = nullptr;
};

/// A CUDA event (timing enabled unless flags say otherwise).
class Event {
public:
  static llvm::Expected<Event> create(unsigned flags = CU_EVENT_DEFAULT);
  Event() = default;
  Event(Event &&other) noexcept;
  Event &operator=(Event &&other) noexcept;
  ~Event();
  llvm::Error record(CUstream stream) const;
  llvm::Error synchronize() const;
  /// Milliseconds from `start` to this event (both recorded and complete).
  llvm::Expected<float> elapsedSince(const Event &start) const;
  CUevent get() const { return ev; }

private:
  CUevent ev = nullptr;
};

/// A non-blocking stream of bitfold's own (no implicit order with the
/// legacy default stream), destroyed with the object. Work that must not
/// touch a caller's stream or the legacy one (the tuner's timing runs, which
/// may overlap a caller's graph capture) is enqueued here.
class Stream {
public:
  static llvm::Expected<Stream> create();
  Stream() = default;
  Stream(Stream &&other) noexcept;
  Stream &operator=(Stream &&other) noexcept;
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  ~Stream();
  llvm::Error synchronize() const;
  CUstream get() const { return strm; }

private:
  void reset();
  CUstream strm = nullptr;
};

/// Launches captured once into a CUDA graph on a stream of its own, then
/// replayed: what the host costs per launch stays out of the replay. The
/// stream synchronises with the legacy default stream, so work enqueued
/// there before a replay finishes first.
class LaunchGraph {
public:
  /// Whether the driver has streams, stream capture and graphs.
  static bool available();
  /// Captures what `enqueue(stream)` launches on a fresh stream.
  static llvm::Expected<LaunchGraph>
  capture(llvm::function_ref<llvm::Error(CUstream)> enqueue);
  LaunchGraph() = default;
  LaunchGraph(LaunchGraph &&other) noexcept;
  LaunchGraph &operator=(LaunchGraph &&other) noexcept;
  ~LaunchGraph();
  /// Enqueues one replay on stream().
  llvm::Error launch() const;
  CUstream stream() const { return strm; }

private:
  void reset();
  CUstream strm = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
};

/// Device memory in the current context (for tests, tools and examples).
class DeviceBuffer {
public:
  static llvm::Expected<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  ~DeviceBuffer();
  CUdeviceptr ptr() const { return dptr; }
  void *data() const { return reinterpret_cast<void *>(dptr); }
  size_t size() const { return bytes; }
  /// Each copy and fill is complete when it returns: on the legacy default
  /// stream, or enqueued on `stream` (a Stream's) and that stream
  /// synchronised.
  llvm::Error copyFromHost(const void *src, size_t n, size_t offset = 0,
                           CUstream stream = nullptr);
  llvm::Error copyToHost(void *dst, size_t n, size_t offset = 0,
                         CUstream stream = nullptr) const;
  llvm::Error fill(uint8_t byte, CUstream stream = nullptr);

private:
  CUdeviceptr dptr = 0;
  size_t bytes = 0;
};

/// PTX -> cubin with the driver's own JIT linker (cuLinkCreate /
/// cuLinkAddData / cuLinkComplete): the "driver" cubin tool. Runs in a
/// context of device `ordinal`; `arch` ("sm_90") selects the target, empty
/// = that device's own; `optLevel` the JIT's optimisation level (0-4, the
/// driver's default 4). Errors carry the linker's error log; `infoLog`
/// (optional) receives its info log.
llvm::Expected<std::vector<char>>
linkPtxWithDriver(llvm::StringRef ptx, llvm::StringRef arch = "",
                  int ordinal = 0, std::string *infoLog = nullptr,
                  int optLevel = 4);

} // namespace bitfold::cuda

#endif // BITFOLD_CUDA_DRIVER_H
