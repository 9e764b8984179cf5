//===- cuda/Handles.cpp - Events, streams, graphs and device buffers ----===//
//
// The RAII handles the tuner and the benches time and move data with. They
// exist only once driver() has succeeded, so they use its table directly.
//
//===----------------------------------------------------------------------===//

#include "cuda/Driver.h"

#include "keys/Errors.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bitfold::cuda;
using bitfold::keys::driverError;

// ---- Event -----------------------------------------------------------------

llvm::Expected<Event> Event::create(unsigned flags) {
  auto api = driver();
  if (!api)
    return api.takeError();
  Event ev;
  if (llvm::Error e = checkCuda(api->cuEventCreate(&ev.ev, flags),
                                "cuEventCreate"))
    return std::move(e);
  return std::move(ev);
}

Event::Event(Event &&other) noexcept : ev(other.ev) { other.ev = nullptr; }

Event &Event::operator=(Event &&other) noexcept {
  if (this != &other) {
    if (ev)
      loadedDriver().cuEventDestroy(ev);
    ev = other.ev;
    other.ev = nullptr;
  }
  return *this;
}

Event::~Event() {
  if (ev)
    loadedDriver().cuEventDestroy(ev);
}

llvm::Error Event::record(CUstream stream) const {
  return checkCuda(loadedDriver().cuEventRecord(ev, stream), "cuEventRecord");
}

llvm::Error Event::synchronize() const {
  return checkCuda(loadedDriver().cuEventSynchronize(ev), "cuEventSynchronize");
}

llvm::Expected<float> Event::elapsedSince(const Event &start) const {
  float ms = 0;
  if (llvm::Error e = checkCuda(
          loadedDriver().cuEventElapsedTime(&ms, start.ev, ev),
          "cuEventElapsedTime"))
    return std::move(e);
  return ms;
}

// ---- Stream ----------------------------------------------------------------

llvm::Expected<Stream> Stream::create() {
  auto api = driver();
  if (!api)
    return api.takeError();
  if (!api->cuStreamCreate || !api->cuStreamDestroy)
    return driverError("the CUDA driver has no cuStreamCreate");
  Stream s;
  if (llvm::Error e = checkCuda(api->cuStreamCreate(&s.strm, CU_STREAM_NON_BLOCKING),
                                "cuStreamCreate"))
    return std::move(e);
  return std::move(s);
}

Stream::Stream(Stream &&other) noexcept : strm(other.strm) {
  other.strm = nullptr;
}

Stream &Stream::operator=(Stream &&other) noexcept {
  if (this != &other) {
    reset();
    std::swap(strm, other.strm);
  }
  return *this;
}

Stream::~Stream() { reset(); }

void Stream::reset() {
  if (!strm)
    return;
  const DriverApi &a = loadedDriver();
  RelaxedCapture relaxed(a);
  a.cuStreamDestroy(strm);
  strm = nullptr;
}

namespace {
llvm::Error synchronizeStream(CUstream stream, const llvm::Twine &what) {
  return checkCuda(loadedDriver().cuStreamSynchronize(stream), what);
}
} // namespace

llvm::Error Stream::synchronize() const {
  return synchronizeStream(strm, "cuStreamSynchronize");
}

// ---- LaunchGraph -------------------------------------------------------------

bool LaunchGraph::available() {
  auto api = driver();
  if (!api) {
    llvm::consumeError(api.takeError());
    return false;
  }
  return api->cuStreamCreate && api->cuStreamDestroy &&
         api->cuStreamBeginCapture && api->cuStreamEndCapture &&
         api->cuGraphInstantiateWithFlags && api->cuGraphLaunch &&
         api->cuGraphExecDestroy && api->cuGraphDestroy;
}

llvm::Expected<LaunchGraph>
LaunchGraph::capture(llvm::function_ref<llvm::Error(CUstream)> enqueue) {
  if (!available())
    return driverError("the CUDA driver has no stream capture or graphs");
  const DriverApi &a = loadedDriver();
  // Relaxed: the tuner times on its own thread while a caller may capture.
  RelaxedCapture relaxed(a);
  LaunchGraph g;
  if (llvm::Error e = checkCuda(a.cuStreamCreate(&g.strm, CU_STREAM_DEFAULT),
                                "cuStreamCreate"))
    return std::move(e);
  // Thread-local: compiles on other threads may load modules meanwhile.
  if (llvm::Error e = checkCuda(a.cuStreamBeginCapture(
                                    g.strm, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                "cuStreamBeginCapture"))
    return std::move(e);
  llvm::Error enqueued = enqueue(g.strm);
  // Capture ends whatever enqueue said, so the stream is usable (and
  // destroyable) again; the first error wins.
  CUresult ended = a.cuStreamEndCapture(g.strm, &g.graph);
  if (enqueued)
    return std::move(enqueued);
  if (llvm::Error e = checkCuda(ended, "cuStreamEndCapture"))
    return std::move(e);
  if (llvm::Error e = checkCuda(a.cuGraphInstantiateWithFlags(&g.exec, g.graph, 0),
                                "cuGraphInstantiateWithFlags"))
    return std::move(e);
  return std::move(g);
}

LaunchGraph::LaunchGraph(LaunchGraph &&other) noexcept
    : strm(other.strm), graph(other.graph), exec(other.exec) {
  other.strm = nullptr;
  other.graph = nullptr;
  other.exec = nullptr;
}

LaunchGraph &LaunchGraph::operator=(LaunchGraph &&other) noexcept {
  if (this != &other) {
    reset();
    std::swap(strm, other.strm);
    std::swap(graph, other.graph);
    std::swap(exec, other.exec);
  }
  return *this;
}

LaunchGraph::~LaunchGraph() { reset(); }

void LaunchGraph::reset() {
  const DriverApi &a = loadedDriver();
  RelaxedCapture relaxed(a);
  if (exec)
    a.cuGraphExecDestroy(exec);
  if (graph)
    a.cuGraphDestroy(graph);
  if (strm)
    a.cuStreamDestroy(strm);
  exec = nullptr;
  graph = nullptr;
  strm = nullptr;
}

llvm::Error LaunchGraph::launch() const {
  return checkCuda(loadedDriver().cuGraphLaunch(exec, strm), "cuGraphLaunch");
}

// ---- DeviceBuffer ----------------------------------------------------------

namespace {
void freeDevice(CUdeviceptr dptr) {
  const DriverApi &api = loadedDriver();
  RelaxedCapture relaxed(api);
  api.cuMemFree(dptr);
}
} // namespace

llvm::Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  auto api = driver();
  if (!api)
    return api.takeError();
  DeviceBuffer b;
  if (bytes == 0)
    return std::move(b);
  RelaxedCapture relaxed(*api);
  if (llvm::Error e = checkCuda(api->cuMemAlloc(&b.dptr, bytes),
                                llvm::formatv("cuMemAlloc({0} bytes)", bytes)))
    return std::move(e);
  b.bytes = bytes;
  return std::move(b);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : dptr(other.dptr), bytes(other.bytes) {
  other.dptr = 0;
  other.bytes = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    if (dptr)
      freeDevice(dptr);
    dptr = other.dptr;
    bytes = other.bytes;
    other.dptr = 0;
    other.bytes = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (dptr)
    freeDevice(dptr);
}

namespace {
/// An enqueued copy or fill on `stream` followed by its synchronisation.
llvm::Error onStream(CUresult enqueued, CUstream stream, const char *what) {
  if (llvm::Error e = checkCuda(enqueued, what))
    return e;
  return synchronizeStream(stream, llvm::Twine(what) + " (cuStreamSynchronize)");
}

llvm::Error overrun(size_t n, size_t offset, size_t bytes) {
  return driverError(llvm::formatv("copy of {0} bytes at offset {1} overruns "
                                   "a {2}-byte device buffer",
                                   n, offset, bytes));
}
} // namespace

llvm::Error DeviceBuffer::copyFromHost(const void *src, size_t n, size_t offset,
                                       CUstream stream) {
  if (offset + n > bytes)
    return overrun(n, offset, bytes);
  if (n == 0)
    return llvm::Error::success();
  const DriverApi &a = loadedDriver();
  if (stream)
    return onStream(a.cuMemcpyHtoDAsync(dptr + offset, src, n, stream), stream,
                    "cuMemcpyHtoDAsync");
  return checkCuda(a.cuMemcpyHtoD(dptr + offset, src, n), "cuMemcpyHtoD");
}

llvm::Error DeviceBuffer::copyToHost(void *dst, size_t n, size_t offset,
                                     CUstream stream) const {
  if (offset + n > bytes)
    return overrun(n, offset, bytes);
  if (n == 0)
    return llvm::Error::success();
  const DriverApi &a = loadedDriver();
  if (stream)
    return onStream(a.cuMemcpyDtoHAsync(dst, dptr + offset, n, stream), stream,
                    "cuMemcpyDtoHAsync");
  return checkCuda(a.cuMemcpyDtoH(dst, dptr + offset, n), "cuMemcpyDtoH");
}

llvm::Error DeviceBuffer::fill(uint8_t byte, CUstream stream) {
  if (bytes == 0)
    return llvm::Error::success();
  const DriverApi &a = loadedDriver();
  if (stream)
    return onStream(a.cuMemsetD8Async(dptr, byte, bytes, stream), stream,
                    "cuMemsetD8Async");
  return checkCuda(a.cuMemsetD8(dptr, byte, bytes), "cuMemsetD8");
}
