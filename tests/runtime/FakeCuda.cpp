//===- tests/runtime/FakeCuda.cpp - A fake libcuda for CPU tests ----------===//
//
// Loaded by the runtime through $BITFOLD_LIBCUDA instead of libcuda.so.1. It
// exports only cuGetProcAddress_v2 (as a real driver resolves everything
// through it) plus fake_cuda_* hooks the tests reach with dlopen(NOLOAD).
// Two devices (sm_90); contexts are a per-thread stack of fake handles;
// "device memory" is host memory; cuLaunchKernel records what it was given;
// stream capture and graphs count what they capture and replay, and
// refuse capture-unsafe calls as the driver does (see forbidden()).
//
// fake_cuda_expect_params(n) makes the next launch record n parameters.
// Knobs (environment): FAKE_CUDA_INIT_RESULT (cuInit's result),
// FAKE_CUDA_MISSING (an entry point cuGetProcAddress does not find),
// FAKE_CUDA_LAUNCH_RESULT (cuLaunchKernel's result, read at each launch),
// FAKE_CUDA_LOAD_RESULT (cuModuleLoadData's result, read at each load; no
// module is created when it fails), FAKE_CUDA_CTX_RESULT (the result of
// cuCtxGetCurrent / SetCurrent / PushCurrent: a context gone bad),
// FAKE_CUDA_CC1 (device 1's compute capability as "61": an old GPU, named
// "Fake GTX 1080 #1").
//
//===----------------------------------------------------------------------===//

#include "FakeCuda.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::mutex mu;
FakeLaunch last;
std::map<std::string, int> counters;
int expectedParams = 0;
std::string lastImage, lastFunctionName;
thread_local std::vector<CUcontext> stack;

void count(const char *what) {
  std::lock_guard<std::mutex> lock(mu);
  ++counters[what];
}

CUcontext primaryOf(int dev) {
  return reinterpret_cast<CUcontext>(uintptr_t(0x1000 + 0x10 * dev));
}
CUcontext userOf(int dev) {
  return reinterpret_cast<CUcontext>(uintptr_t(0x2000 + 0x10 * dev));
}
int deviceOf(CUcontext c) {
  uintptr_t v = reinterpret_cast<uintptr_t>(c);
  return int((v & 0xFF) / 0x10);
}

int envInt(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

CUresult cuInit(unsigned) { return CUresult(envInt("FAKE_CUDA_INIT_RESULT", 0)); }
CUresult cuDriverGetVersion(int *v) {
  *v = 12080;
  return CUDA_SUCCESS;
}
const char *errorName(CUresult r) {
  switch (int(r)) {
  case 0: return "CUDA_SUCCESS";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 201: return "CUDA_ERROR_INVALID_CONTEXT";
  case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  default: return "CUDA_ERROR_UNKNOWN";
  }
}
CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = errorName(r);
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = int(r) == 2     ? "out of memory"
       : int(r) == 100 ? "no CUDA-capable device is detected"
       : int(r) == 201 ? "invalid device context"
       : int(r) == 700 ? "an illegal memory access was encountered"
       : int(r) == 709 ? "context is destroyed"
                       : "fake error";
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n) {
  *n = 2;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal < 0 || ordinal >= 2)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
/// Compute capability of device d as 10 * major + minor.
int capability(CUdevice d) { return d == 1 ? envInt("FAKE_CUDA_CC1", 90) : 90; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  std::snprintf(name, size_t(len),
                capability(d) < 80 ? "Fake GTX 1080 #%d" : "Fake H200 #%d",
                int(d));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? capability(d) / 10
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? capability(d) % 10
       : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? 132
                                                           : 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *b, CUdevice) {
  *b = size_t(141) << 30;
  return CUDA_SUCCESS;
}
CUresult forbidden(const char *what);
CUresult synchronous(const char *what);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  count("cuDevicePrimaryCtxRetain");
  if (CUresult r = forbidden("cuDevicePrimaryCtxRetain"))
    return r;
  *c = primaryOf(d);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult contextResult() { return CUresult(envInt("FAKE_CUDA_CTX_RESULT", 0)); }
CUresult cuCtxGetCurrent(CUcontext *c) {
  *c = stack.empty() ? nullptr : stack.back();
  return contextResult();
}
CUresult cuCtxSetCurrent(CUcontext c) {
  if (contextResult() != CUDA_SUCCESS)
    return contextResult();
  if (!stack.empty())
    stack.pop_back();
  if (c)
    stack.push_back(c);
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext c) {
  count("cuCtxPushCurrent");
  if (contextResult() != CUDA_SUCCESS)
    return contextResult();
  stack.push_back(c);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext *c) {
  if (stack.empty())
    return CUDA_ERROR_INVALID_CONTEXT;
  if (c)
    *c = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) {
  if (stack.empty())
    return CUDA_ERROR_INVALID_CONTEXT;
  *d = deviceOf(stack.back());
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() { return synchronous("cuCtxSynchronize"); }

// Stream-capture modes. While a capture runs, a thread whose mode is not
// relaxed is refused "potentially unsafe" calls (here: module load and
// unload, memory allocation and free, the JIT linker, primary context
// retain, and every synchronous call: context, stream and event
// synchronisation, synchronous copies and fills) when it is capturing
// itself, or when its mode is global and another thread runs a global-mode
// capture; the refused call returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// and invalidates those captures (cuStreamEndCapture then returns
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). A thread may capture several
// streams at once. Work on the legacy default stream, or a context-wide
// synchronisation, while any capture runs is counted ("legacy stream in a
// capture"): with a capture on a blocking stream the driver refuses it
// whatever the mode.
struct Capture {
  CUstream stream;
  CUstreamCaptureMode mode;
  bool invalid = false;
  int captured = 0; ///< launches captured
};
thread_local CUstreamCaptureMode threadMode = CU_STREAM_CAPTURE_MODE_GLOBAL;
thread_local std::vector<Capture> captures;
int globalCaptures = 0;            // under mu
int activeCaptures = 0;            // under mu (every mode)
bool globalCaptureInvalid = false; // under mu

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  count("cuThreadExchangeStreamCaptureMode");
  std::swap(threadMode, *mode);
  return CUDA_SUCCESS;
}
CUresult forbidden(const char *what) {
  if (threadMode == CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_SUCCESS;
  bool own = false;
  int ownGlobal = 0;
  for (const Capture &c : captures) {
    own |= c.mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    ownGlobal += c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  }
  std::lock_guard<std::mutex> lock(mu);
  bool byOthers = threadMode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                  globalCaptures - ownGlobal > 0;
  if (!own && !byOthers)
    return CUDA_SUCCESS;
  ++counters["refused in a capture"];
  ++counters[std::string("refused in a capture: ") + what];
  for (Capture &c : captures)
    c.invalid |= c.mode != CU_STREAM_CAPTURE_MODE_RELAXED;
  globalCaptureInvalid |= byOthers || ownGlobal > 0;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}
/// Counts work on the legacy stream (or context-wide) during any capture.
void legacy(CUstream stream) {
  std::lock_guard<std::mutex> lock(mu);
  if (!stream && activeCaptures > 0)
    ++counters["legacy stream in a capture"];
}
/// A synchronous call: refused as forbidden() says, else legacy-stream work.
CUresult synchronous(const char *what) {
  if (CUresult r = forbidden(what))
    return r;
  legacy(nullptr);
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  count("cuModuleLoadData");
  if (CUresult r = forbidden("cuModuleLoadData"))
    return r;
  if (CUresult r = CUresult(envInt("FAKE_CUDA_LOAD_RESULT", 0)))
    return r;
  std::lock_guard<std::mutex> lock(mu);
  lastImage = static_cast<const char *>(image);
  static uintptr_t next = 0x5000;
  *m = reinterpret_cast<CUmodule>(next += 0x10);
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule) {
  count("cuModuleUnload");
  return forbidden("cuModuleUnload");
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  std::lock_guard<std::mutex> lock(mu);
  lastFunctionName = name;
  *f = reinterpret_cast<CUfunction>(reinterpret_cast<uintptr_t>(m) + 1);
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute, CUfunction) {
  *v = 0;
  return CUDA_SUCCESS;
}
CUresult recordLaunch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned smem,
                      CUstream stream, void **params, int programmatic) {
  std::lock_guard<std::mutex> lock(mu);
  last = FakeLaunch{};
  last.programmatic = programmatic;
  last.function = f;
  last.context = stack.empty() ? nullptr : stack.back();
  last.grid[0] = gx, last.grid[1] = gy, last.grid[2] = gz;
  last.block[0] = bx, last.block[1] = by, last.block[2] = bz;
  last.sharedBytes = smem;
  last.stream = stream;
  last.numParams = expectedParams;
  for (int i = 0; i < expectedParams && i < 64; ++i)
    std::memcpy(&last.params[i], params[i], 8);
  expectedParams = 0; // one launch only: the next kernel may take fewer
  return CUresult(envInt("FAKE_CUDA_LAUNCH_RESULT", 0));
}
// Stream capture: a launch on the capturing stream joins the graph (counted
// as "captured launch"); a graph replay counts "cuGraphLaunch" and each of
// its launches as "replayed launch".
void countCaptured(CUstream stream) {
  legacy(stream);
  for (Capture &c : captures)
    if (c.stream == stream) {
      ++c.captured;
      count("captured launch");
    }
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned smem,
                        CUstream stream, void **params, void **) {
  count("cuLaunchKernel");
  countCaptured(stream);
  return recordLaunch(f, gx, gy, gz, bx, by, bz, smem, stream, params, -1);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f,
                          void **params, void **) {
  count("cuLaunchKernelEx");
  countCaptured(c->hStream);
  int programmatic = 0;
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      programmatic = c->attrs[i].value.programmaticStreamSerializationAllowed;
  return recordLaunch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX,
                      c->blockDimY, c->blockDimZ, c->sharedMemBytes,
                      c->hStream, params, programmatic);
}
CUresult cuEventCreate(CUevent *e, unsigned) {
  *e = reinterpret_cast<CUevent>(new float(0));
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) {
  delete reinterpret_cast<float *>(e);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent, CUstream s) {
  legacy(s);
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) { return forbidden("cuEventSynchronize"); }
CUresult cuEventElapsedTime(float *ms, CUevent, CUevent) {
  *ms = 0.5f;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  if (CUresult r = forbidden("cuMemAlloc"))
    return r;
  *p = reinterpret_cast<CUdeviceptr>(std::malloc(n));
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFree(CUdeviceptr p) {
  if (CUresult r = forbidden("cuMemFree"))
    return r;
  std::free(reinterpret_cast<void *>(p));
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) {
  if (CUresult r = synchronous("cuMemcpyHtoD"))
    return r;
  std::memcpy(reinterpret_cast<void *>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) {
  if (CUresult r = synchronous("cuMemcpyDtoH"))
    return r;
  std::memcpy(d, reinterpret_cast<void *>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  if (CUresult r = synchronous("cuMemsetD8"))
    return r;
  std::memset(reinterpret_cast<void *>(d), v, n);
  return CUDA_SUCCESS;
}
// The fake GPU runs what is enqueued at once, so async copies are done
// when they return.
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  legacy(st);
  std::memcpy(reinterpret_cast<void *>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream st) {
  legacy(st);
  std::memcpy(d, reinterpret_cast<void *>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
  legacy(st);
  std::memset(reinterpret_cast<void *>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream s) {
  count(s ? "cuStreamSynchronize" : "cuStreamSynchronize(legacy)");
  if (CUresult r = forbidden("cuStreamSynchronize"))
    return r;
  legacy(s);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *s, unsigned) {
  count("cuStreamCreate");
  *s = reinterpret_cast<CUstream>(new int(0));
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) {
  count("cuStreamDestroy");
  delete reinterpret_cast<int *>(s);
  return CUDA_SUCCESS;
}
CUresult beginOwnCapture(CUstream s, CUstreamCaptureMode mode) {
  for (const Capture &c : captures)
    if (c.stream == s)
      return CUDA_ERROR_ILLEGAL_STATE;
  captures.push_back(Capture{s, mode});
  std::lock_guard<std::mutex> lock(mu);
  ++activeCaptures;
  if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL && globalCaptures++ == 0)
    globalCaptureInvalid = false;
  return CUDA_SUCCESS;
}
CUresult endOwnCapture(CUstream s, CUgraph *g) {
  *g = nullptr;
  auto it = std::find_if(captures.begin(), captures.end(),
                         [&](const Capture &c) { return c.stream == s; });
  if (it == captures.end())
    return CUDA_ERROR_ILLEGAL_STATE;
  Capture c = *it;
  captures.erase(it);
  bool invalid = c.invalid;
  {
    std::lock_guard<std::mutex> lock(mu);
    --activeCaptures;
    if (c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
      --globalCaptures;
      invalid |= globalCaptureInvalid;
    }
  }
  if (invalid)
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  *g = reinterpret_cast<CUgraph>(new int(c.captured));
  return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  return beginOwnCapture(s, mode);
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return endOwnCapture(s, g); }
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g,
                                     unsigned long long) {
  *e = reinterpret_cast<CUgraphExec>(new int(*reinterpret_cast<int *>(g)));
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream) {
  std::lock_guard<std::mutex> lock(mu);
  ++counters["cuGraphLaunch"];
  counters["replayed launch"] += *reinterpret_cast<int *>(e);
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec e) {
  count("cuGraphExecDestroy");
  delete reinterpret_cast<int *>(e);
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph g) {
  delete reinterpret_cast<int *>(g);
  return CUDA_SUCCESS;
}
const char kLinked[] = "FAKE-LINKED-CUBIN";
CUresult cuLinkCreate(unsigned, CUjit_option *, void **, CUlinkState *s) {
  if (CUresult r = forbidden("cuLinkCreate"))
    return r;
  *s = reinterpret_cast<CUlinkState>(uintptr_t(0x7000));
  return CUDA_SUCCESS;
}
CUresult cuLinkAddData(CUlinkState, CUjitInputType, void *data, size_t,
                       const char *, unsigned, CUjit_option *, void **) {
  std::lock_guard<std::mutex> lock(mu);
  lastImage = static_cast<const char *>(data);
  return CUDA_SUCCESS;
}
CUresult cuLinkComplete(CUlinkState, void **cubin, size_t *size) {
  *cubin = const_cast<char *>(kLinked);
  *size = sizeof(kLinked) - 1;
  return CUDA_SUCCESS;
}
CUresult cuLinkDestroy(CUlinkState) { return CUDA_SUCCESS; }

struct Entry {
  const char *name;
  void *fn;
};

#define E(f) {#f, reinterpret_cast<void *>(&f)}
const Entry entries[] = {
    E(cuInit), E(cuDriverGetVersion), E(cuGetErrorName), E(cuGetErrorString),
    E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName),
    E(cuDeviceGetAttribute), E(cuDeviceTotalMem), E(cuDevicePrimaryCtxRetain),
    E(cuDevicePrimaryCtxRelease), E(cuCtxGetCurrent), E(cuCtxSetCurrent),
    E(cuCtxPushCurrent), E(cuCtxPopCurrent), E(cuCtxGetDevice),
    E(cuCtxSynchronize), E(cuModuleLoadData), E(cuModuleUnload),
    E(cuModuleGetFunction), E(cuFuncGetAttribute), E(cuLaunchKernel),
    E(cuLaunchKernelEx),
    E(cuEventCreate), E(cuEventDestroy), E(cuEventRecord),
    E(cuEventSynchronize), E(cuEventElapsedTime), E(cuMemAlloc), E(cuMemFree),
    E(cuMemcpyHtoD), E(cuMemcpyDtoH), E(cuMemsetD8), E(cuMemcpyHtoDAsync),
    E(cuMemcpyDtoHAsync), E(cuMemsetD8Async), E(cuStreamSynchronize),
    E(cuStreamCreate), E(cuStreamDestroy), E(cuStreamBeginCapture),
    E(cuStreamEndCapture), E(cuGraphInstantiateWithFlags), E(cuGraphLaunch),
    E(cuGraphExecDestroy), E(cuGraphDestroy),
    E(cuLinkCreate), E(cuLinkAddData), E(cuLinkComplete), E(cuLinkDestroy),
    E(cuThreadExchangeStreamCaptureMode),
};
#undef E

} // namespace

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
  *pfn = nullptr;
  const char *missing = std::getenv("FAKE_CUDA_MISSING");
  for (const Entry &e : entries)
    if (std::strcmp(e.name, symbol) == 0 &&
        !(missing && std::strcmp(missing, symbol) == 0)) {
      *pfn = e.fn;
      if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  if (status)
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

EXPORT void fake_cuda_expect_params(int n) {
  std::lock_guard<std::mutex> lock(mu);
  expectedParams = n;
}

EXPORT FakeLaunch fake_cuda_last_launch() {
  std::lock_guard<std::mutex> lock(mu);
  return last;
}

EXPORT int fake_cuda_count(const char *what) {
  std::lock_guard<std::mutex> lock(mu);
  return counters[what];
}

EXPORT const char *fake_cuda_last_image() { return lastImage.c_str(); }
EXPORT const char *fake_cuda_last_function() { return lastFunctionName.c_str(); }

EXPORT CUcontext fake_cuda_user_context(int device) { return userOf(device); }

EXPORT void fake_cuda_clear_contexts() { stack.clear(); }

/// This thread's stream-capture mode (CUstreamCaptureMode).
EXPORT int fake_cuda_capture_mode() { return int(threadMode); }

/// Begins a capture in `mode` on a stream of its own on this thread (the
/// stream is returned: launches on it are captured).
EXPORT CUstream fake_cuda_begin_capture(int mode) {
  CUstream s = reinterpret_cast<CUstream>(new int(0));
  if (beginOwnCapture(s, CUstreamCaptureMode(mode)) != CUDA_SUCCESS) {
    delete reinterpret_cast<int *>(s);
    return nullptr;
  }
  return s;
}

/// The launches captured so far by this thread's capture of `s` (-1: none).
EXPORT int fake_cuda_captured_on(CUstream s) {
  for (const Capture &c : captures)
    if (c.stream == s)
      return c.captured;
  return -1;
}

/// Ends this thread's capture: cuStreamEndCapture's result.
EXPORT CUresult fake_cuda_end_capture(CUstream s) {
  CUgraph g = nullptr;
  CUresult r = endOwnCapture(s, &g);
  delete reinterpret_cast<int *>(g);
  delete reinterpret_cast<int *>(s);
  return r;
}
