//===- examples/user_kernels/GpuBuffers.cpp - Launch and compare ----------===//

#include "GpuBuffers.h"

#include <dlfcn.h>

#include <cstdio>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

struct Cuda {
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(int *, int);
  CUresult (*retain)(void **, int);
  CUresult (*setCurrent)(void *);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*toDevice)(CUdeviceptr, const void *, size_t);
  CUresult (*toHost)(void *, CUdeviceptr, size_t);
  CUresult (*sync)();
};

/// libcuda's entry points with the context of device 0 current; null
/// (with `why`) when there is no usable driver or GPU.
const Cuda *cuda(std::string *why) {
  static std::string reason;
  static const Cuda *api = [] () -> const Cuda * {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return reason = "no libcuda.so.1", nullptr;
    static Cuda c;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(lib, name));
      return fn != nullptr;
    };
    if (!sym(c.init, "cuInit") || !sym(c.deviceGet, "cuDeviceGet") ||
        !sym(c.retain, "cuDevicePrimaryCtxRetain") ||
        !sym(c.setCurrent, "cuCtxSetCurrent") ||
        !sym(c.alloc, "cuMemAlloc_v2") || !sym(c.free, "cuMemFree_v2") ||
        !sym(c.toDevice, "cuMemcpyHtoD_v2") ||
        !sym(c.toHost, "cuMemcpyDtoH_v2") || !sym(c.sync, "cuCtxSynchronize"))
      return reason = "libcuda lacks an entry point", nullptr;
    int dev = 0;
    void *ctx = nullptr;
    if (c.init(0) || c.deviceGet(&dev, 0) || c.retain(&ctx, dev) ||
        c.setCurrent(ctx))
      return reason = "no CUDA device", nullptr;
    return &c;
  }();
  if (why)
    *why = reason;
  return api;
}

struct DeviceTensor {
  CUdeviceptr ptr = 0;
  int64_t shape[2];
  DLTensor t{};
};

} // namespace

std::string gpuAvailable() {
  std::string why;
  cuda(&why);
  return why;
}

int compareOnGpu(bitfold::Runtime &rt, const bitfold::dsl::KernelDef &def,
                 std::vector<std::vector<uint16_t>> data,
                 const std::vector<std::vector<uint16_t>> &expected,
                 int64_t rows, int64_t cols) {
  const Cuda *c = cuda(nullptr);
  auto k = rt.kernel(def); // = kernelFromSource(def.canonicalText)
  if (!k) {
    std::fprintf(stderr, "  kernel(def): %s\n",
                 k.status().message().c_str());
    return 1;
  }
  std::vector<DeviceTensor> ts(data.size());
  std::vector<const DLTensor *> args;
  for (size_t i = 0; i < data.size(); ++i) {
    DeviceTensor &d = ts[i];
    size_t bytes = data[i].size() * 2;
    c->alloc(&d.ptr, bytes);
    c->toDevice(d.ptr, data[i].data(), bytes);
    bool perColumn = def.operands[i].map == bitfold::dsl::IndexMap::PerColumn;
    d.shape[0] = perColumn ? cols : rows;
    d.shape[1] = cols;
    d.t.data = reinterpret_cast<void *>(d.ptr);
    d.t.device = {kDLCUDA, 0};
    d.t.ndim = perColumn ? 1 : 2;
    d.t.dtype = {kDLBfloat, 16, 1};
    d.t.shape = perColumn ? &d.shape[0] : d.shape;
    args.push_back(&d.t);
  }
  std::vector<float> scalars;
  for (const auto &s : def.scalars)
    scalars.push_back(s.defaultValue.value_or(1.0f));
  bitfold::Status s = k->launch(args, scalars);
  c->sync();
  int status = s ? 0 : 1;
  if (!s)
    std::fprintf(stderr, "  launch: %s\n", s.message().c_str());
  for (size_t i = 0; s && i < data.size(); ++i) {
    if (!def.operands[i].isOutput)
      continue;
    std::vector<uint16_t> got(data[i].size());
    c->toHost(got.data(), ts[i].ptr, got.size() * 2);
    size_t differ = 0, first = got.size();
    for (size_t j = 0; j < got.size(); ++j)
      if (got[j] != expected[i][j] && (++differ, first == got.size()))
        first = j;
    std::printf("  GPU %s vs interpreter: %zu of %zu differ%s\n",
                def.operands[i].name.c_str(), differ, got.size(),
                differ ? " (NOT bit-exact)" : " (bit-exact)");
    if (differ)
      std::printf("    first at %zu: gpu 0x%04x interp 0x%04x\n", first,
                  got[first], expected[i][first]);
    status |= differ ? 1 : 0;
  }
  for (DeviceTensor &d : ts)
    c->free(d.ptr);
  return status;
}
