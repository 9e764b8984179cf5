//===- autotune/GpuRunner.cpp - CUDA events, L2 flush, rotating buffers ---===//

#include "autotune/GpuRunner.h"

#include "keys/Errors.h"

#include "cuda/Driver.h"

#include "keys/KernelABI.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <optional>

using namespace bitfold;
using namespace bitfold::autotune;
using cuda::checkCuda;
using cuda::DeviceBuffer;
using cuda::Event;

namespace {

class GpuRunner final : public ConfigRunner {
public:
  llvm::Error init(const dsl::KernelDef &def,
                   const templates::HostProblem &problem,
                   const GpuRunnerOptions &opts);

  llvm::Error load(const codegen::CompiledKernel &kernel) override;
  llvm::Error warmUp(int runs) override;
  llvm::Expected<std::vector<uint8_t>> outputBytes() override;
  llvm::Expected<double> timeOnceUs() override;

private:
  /// One set of operand buffers and the packed parameter values.
  struct BufferSet {
    std::vector<std::vector<DeviceBuffer>> buffers; ///< [group][operand]
    std::vector<uint64_t> values; ///< one 8-byte slot per kernel parameter
    std::vector<void *> params;   ///< pointers into values
  };
  llvm::Error launch(BufferSet &set, CUstream on);
  llvm::Expected<double> timeDirectUs();
  /// Microseconds per launch of what `enqueue` launches (`launches` of
  /// them) on `on`, between the start and stop events.
  llvm::Expected<double> between(CUstream on, int launches,
                                 llvm::function_ref<llvm::Error()> enqueue);
  llvm::Error captureReplay();
  llvm::Error deviceSizes(int device, size_t &l2, size_t &totalMem);
  llvm::Error fillSet(BufferSet &s, const templates::HostProblem &problem);

  const cuda::DriverApi *api = nullptr;
  Timing timing = Timing::Steady;
  std::optional<cuda::ScopedContext> ctx;
  /// Every launch, copy, fill and event of the runner but the replays: never
  /// the legacy stream, never a context-wide synchronisation, so a tune does
  /// not touch the work or the graph capture of the caller's streams.
  cuda::Stream stream;
  const dsl::KernelDef *def = nullptr;
  std::vector<BufferSet> sets;
  size_t next = 0;
  int64_t totalRows = 0;
  DeviceBuffer flush;
  uint8_t flushByte = 0;
  Event start, stop;
  cuda::Module module;
  CUfunction fn = nullptr;
  /// Steady timing where the driver has graphs: `replayLaunches` launches
  /// captured once per loaded kernel, replayed per sample.
  std::optional<cuda::LaunchGraph> replay;
  int replayLaunches = 0;
  keys::TileConfig config;
};

llvm::Error GpuRunner::init(const dsl::KernelDef &d,
                            const templates::HostProblem &problem,
                            const GpuRunnerOptions &opts) {
  def = &d;
  timing = opts.timing;
  auto drv = cuda::driver();
  if (!drv)
    return drv.takeError();
  api = &*drv;
  cuda::RelaxedCapture relaxed(*api);
  auto sc = cuda::ScopedContext::forDevice(opts.device);
  if (!sc)
    return sc.takeError();
  ctx.emplace(std::move(*sc));
  auto st = cuda::Stream::create();
  if (!st)
    return st.takeError();
  stream = std::move(*st);
  size_t l2 = 0, totalMem = 0;
  if (llvm::Error e = deviceSizes(opts.device, l2, totalMem))
    return e;
  size_t flushBytes = opts.flushBytes
                          ? opts.flushBytes
                          : std::max<size_t>(2 * l2, size_t(64) << 20);
  auto fb = DeviceBuffer::allocate(flushBytes);
  if (!fb)
    return fb.takeError();
  flush = std::move(*fb);

  size_t setBytes = 0;
  for (const auto &group : problem.storage)
    for (const auto &op : group)
      setBytes += op.size();
  size_t rotate = opts.timing == Timing::Steady
                      ? std::max<size_t>(4 * l2, size_t(64) << 20)
                      : flushBytes;
  size_t want = setBytes ? (rotate + setBytes - 1) / setBytes : 2;
  size_t cap = std::max<size_t>(2, (totalMem / 4) / std::max<size_t>(setBytes, 1));
  int numSets = int(std::clamp<size_t>(want, 2, std::min<size_t>(
                                                    size_t(std::max(opts.maxSets, 2)), cap)));
  totalRows = 0;
  for (int64_t r : problem.binding.groupRows)
    totalRows += r;
  sets.resize(numSets);
  for (BufferSet &s : sets)
    if (llvm::Error e = fillSet(s, problem))
      return e;
  auto e0 = Event::create();
  if (!e0)
    return e0.takeError();
  auto e1 = Event::create();
  if (!e1)
    return e1.takeError();
  start = std::move(*e0);
  stop = std::move(*e1);
  return llvm::Error::success();
}

llvm::Error GpuRunner::deviceSizes(int device, size_t &l2, size_t &totalMem) {
  CUdevice dev;
  if (llvm::Error e = checkCuda(api->cuDeviceGet(&dev, device), "cuDeviceGet"))
    return e;
  int l2Bytes = 0;
  if (llvm::Error e = checkCuda(api->cuDeviceGetAttribute(
                                    &l2Bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                                    dev),
                                "L2 cache size"))
    return e;
  l2 = size_t(l2Bytes);
  return checkCuda(api->cuDeviceTotalMem(&totalMem, dev), "cuDeviceTotalMem");
}

llvm::Error GpuRunner::fillSet(BufferSet &s,
                               const templates::HostProblem &problem) {
  s.buffers.resize(problem.storage.size());
  for (size_t g = 0; g < problem.storage.size(); ++g)
    for (size_t i = 0; i < problem.storage[g].size(); ++i) {
      const std::vector<uint8_t> &host = problem.storage[g][i];
      auto buf = DeviceBuffer::allocate(std::max<size_t>(host.size(), 16));
      if (!buf)
        return buf.takeError();
      if (llvm::Error e = buf->copyFromHost(host.data(), host.size(), 0,
                                            stream.get()))
        return e;
      s.buffers[g].push_back(std::move(*buf));
    }
  // The parameter list of keys/KernelABI.h.
  const dsl::Binding &b = problem.binding;
  const keys::KernelABI abi = keys::KernelABI::of(*def);
  if (b.groupRows.size() != size_t(abi.numGroups) ||
      b.tensors.size() != size_t(abi.numGroups) ||
      b.dims.size() != size_t(abi.numDims) ||
      b.scalars.size() != size_t(abi.numScalars) ||
      llvm::any_of(s.buffers, [&](const auto &group) {
        return group.size() != size_t(abi.numOperands);
      }))
    return keys::driverError(def->name +
                             ": the problem does not bind the kernel's "
                             "groups, dims and scalars");
  s.values.assign(abi.paramCount(), 0);
  keys::ParamPacker pack(abi, s.values.data());
  for (int g = 0; g < abi.numGroups; ++g) {
    for (int i = 0; i < abi.numOperands; ++i) {
      pack.pointer(g, i, uint64_t(s.buffers[g][i].ptr()));
      // Channels-first operands: the slot holds S (keys/KernelABI.h).
      pack.rowStride(g, i, b.tensors[g][i].spatial > 0
                               ? b.tensors[g][i].spatial
                               : b.tensors[g][i].rowStride);
    }
    pack.groupRows(g, b.groupRows[g]);
  }
  for (int d = 0; d < abi.numDims; ++d)
    pack.dim(d, b.dims[d]);
  for (int i = 0; i < abi.numScalars; ++i)
    pack.scalar(i, b.scalars[i]);
  for (uint64_t &v : s.values)
    s.params.push_back(&v);
  return llvm::Error::success();
}

llvm::Error GpuRunner::load(const codegen::CompiledKernel &k) {
  if (size_t(k.abi.paramCount()) != sets.front().params.size())
    return keys::driverError(llvm::formatv(
        "{0}: the kernel takes {1} parameters, the problem binds {2}",
        k.config.str(), k.abi.paramCount(), sets.front().params.size()));
  cuda::RelaxedCapture relaxed(*api);
  std::vector<char> image(k.cubin.begin(), k.cubin.end());
  if (image.empty()) { // PTX: the driver JIT-compiles it
    image.assign(k.ptx.begin(), k.ptx.end());
    image.push_back('\0');
  }
  fn = nullptr;
  replay.reset();
  module = cuda::Module();
  auto m = cuda::Module::load(image);
  if (!m)
    return m.takeError();
  module = std::move(*m);
  auto f = module.function(k.entryName);
  if (!f)
    return f.takeError();
  fn = *f;
  config = k.config;
  if (timing != Timing::Steady || !cuda::LaunchGraph::available())
    return llvm::Error::success();
  return captureReplay();
}

/// Steady samples of a kernel of a few microseconds measured the host's
/// launch rate (about 4-6 us a launch, varying from sample to sample)
/// rather than the kernel; replayed from a graph they measure the GPU.
/// Enough launches per replay that a sample spans about 200 us, so the
/// replay's own start-up (a few us) stays under about 1% of it.
llvm::Error GpuRunner::captureReplay() {
  if (llvm::Error e = warmUp(1))
    return e;
  auto once = timeDirectUs();
  if (!once)
    return once.takeError();
  const int n = int(sets.size());
  int want = int(std::clamp(200.0 / std::max(*once, 0.1), 8.0, 256.0));
  replayLaunches = n * ((want + n - 1) / n);
  auto g = cuda::LaunchGraph::capture([&](CUstream captured) -> llvm::Error {
    for (int i = 0; i < replayLaunches; ++i)
      if (llvm::Error e = launch(sets[size_t(i % n)], captured))
        return e;
    return llvm::Error::success();
  });
  if (!g)
    return g.takeError();
  replay.emplace(std::move(*g));
  return llvm::Error::success();
}

llvm::Error GpuRunner::launch(BufferSet &s, CUstream on) {
  if (!fn)
    return keys::driverError("no kernel loaded");
  int64_t rpc = std::max(config.rowsPerCta, 1);
  unsigned grid = unsigned((totalRows + rpc - 1) / rpc);
  return checkCuda(api->cuLaunchKernel(fn, grid, 1, 1,
                                       unsigned(config.ctaThreads()), 1, 1, 0,
                                       on, s.params.data(), nullptr),
                   "cuLaunchKernel " + config.str());
}

llvm::Error GpuRunner::warmUp(int runs) {
  cuda::RelaxedCapture relaxed(*api);
  for (int i = 0; i < runs; ++i) {
    if (llvm::Error e = launch(sets[next], stream.get()))
      return e;
    next = (next + 1) % sets.size();
  }
  return stream.synchronize();
}

llvm::Expected<std::vector<uint8_t>> GpuRunner::outputBytes() {
  cuda::RelaxedCapture relaxed(*api);
  BufferSet &s = sets[0];
  for (auto &group : s.buffers)
    for (size_t i = 0; i < group.size(); ++i)
      if (def->operands[i].isOutput)
        if (llvm::Error e = group[i].fill(0xFF, stream.get()))
          return std::move(e);
  if (llvm::Error e = launch(s, stream.get()))
    return std::move(e);
  if (llvm::Error e = stream.synchronize())
    return std::move(e);
  std::vector<uint8_t> out;
  for (auto &group : s.buffers)
    for (size_t i = 0; i < group.size(); ++i)
      if (def->operands[i].isOutput) {
        size_t at = out.size();
        out.resize(at + group[i].size());
        if (llvm::Error e = group[i].copyToHost(out.data() + at,
                                                group[i].size(), 0, stream.get()))
          return std::move(e);
      }
  return out;
}

llvm::Expected<double> GpuRunner::timeOnceUs() {
  cuda::RelaxedCapture relaxed(*api);
  if (!replay)
    return timeDirectUs();
  // The replay streams its launches back to back; the events around it
  // add its start-up, amortised over replayLaunches.
  return between(replay->stream(), replayLaunches,
                 [&] { return replay->launch(); });
}

/// One sample launched from the host: in steady timing at least 8
/// launches back to back, with the L2 flushed first in flushed timing.
llvm::Expected<double> GpuRunner::timeDirectUs() {
  const int n = int(sets.size());
  int timed = 1;
  if (timing == Timing::Steady) {
    // One untimed launch first: the start event then completes when the GPU
    // is already busy, so the sample holds no idle ramp-up. At least 8
    // timed launches, so the host's launch cost stays hidden behind them.
    timed = n * ((8 + n - 1) / n);
    if (llvm::Error e = launch(sets[(next + n - 1) % n], stream.get()))
      return std::move(e);
  } else if (llvm::Error e = checkCuda(
                 api->cuMemsetD8Async(flush.ptr(), flushByte++, flush.size(),
                                      stream.get()),
                 "L2 flush")) {
    return std::move(e);
  }
  return between(stream.get(), timed, [&]() -> llvm::Error {
    for (int i = 0; i < timed; ++i) {
      if (llvm::Error e = launch(sets[next], stream.get()))
        return e;
      next = (next + 1) % n;
    }
    return llvm::Error::success();
  });
}

llvm::Expected<double>
GpuRunner::between(CUstream on, int launches,
                   llvm::function_ref<llvm::Error()> enqueue) {
  if (llvm::Error e = start.record(on))
    return std::move(e);
  if (llvm::Error e = enqueue())
    return std::move(e);
  if (llvm::Error e = stop.record(on))
    return std::move(e);
  if (llvm::Error e = stop.synchronize())
    return std::move(e);
  auto ms = stop.elapsedSince(start);
  if (!ms)
    return ms.takeError();
  return double(*ms) * 1000.0 / double(launches);
}

} // namespace

llvm::Expected<std::pair<std::string, std::string>>
autotune::gpuIdentity(int ordinal) {
  auto info = cuda::queryDriver();
  if (!info)
    return info.takeError();
  for (const cuda::DeviceInfo &d : info->devices)
    if (d.ordinal == ordinal)
      return std::make_pair(d.name, d.arch());
  return keys::driverError(llvm::formatv("no CUDA device {0} ({1} found)",
                                         ordinal, info->devices.size()));
}

llvm::Expected<std::unique_ptr<ConfigRunner>>
autotune::makeGpuRunner(const dsl::KernelDef &def,
                        const templates::HostProblem &problem,
                        const GpuRunnerOptions &options) {
  auto r = std::make_unique<GpuRunner>();
  if (llvm::Error e = r->init(def, problem, options))
    return std::move(e);
  return std::unique_ptr<ConfigRunner>(std::move(r));
}
