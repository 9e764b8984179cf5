// gpu_launch INDEX: runs the cases gpu_check_gen wrote (no LLVM; libcuda by
// dlopen). Per case: elements differing from the interpreter, and an output
// hash; per instance: whether every config produced identical bits.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

typedef int CUresult;
typedef void *CUmodule, *CUfunction, *CUcontext;
typedef unsigned long long CUdeviceptr;
#define F(name, ...) static CUresult (*name)(__VA_ARGS__)
F(cuInit, unsigned);
F(cuDeviceGet, int *, int);
F(cuDevicePrimaryCtxRetain, CUcontext *, int);
F(cuCtxSetCurrent, CUcontext);
F(cuModuleLoadData, CUmodule *, const void *);
F(cuModuleUnload, CUmodule);
F(cuModuleGetFunction, CUfunction *, CUmodule, const char *);
F(cuMemAlloc, CUdeviceptr *, size_t);
F(cuMemFree, CUdeviceptr);
F(cuMemcpyHtoD, CUdeviceptr, const void *, size_t);
F(cuMemcpyDtoH, void *, CUdeviceptr, size_t);
F(cuMemsetD8, CUdeviceptr, unsigned char, size_t);
F(cuCtxSynchronize, void);
F(cuLaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
  unsigned, unsigned, void *, void **, void **);

static std::vector<char> readFile(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), {});
}

#define CK(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_) {                                                                  \
      printf("CUDA error %d at %s\n", r_, #x);                                 \
      ok = false;                                                              \
    }                                                                          \
  } while (0)

int main(int argc, char **argv) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("no libcuda\n"); return 1; }
#define L(name, sym) name = (decltype(name))dlsym(h, sym)
  L(cuInit, "cuInit"); L(cuDeviceGet, "cuDeviceGet");
  L(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  L(cuCtxSetCurrent, "cuCtxSetCurrent"); L(cuModuleLoadData, "cuModuleLoadData");
  L(cuModuleUnload, "cuModuleUnload"); L(cuModuleGetFunction, "cuModuleGetFunction");
  L(cuMemAlloc, "cuMemAlloc_v2"); L(cuMemFree, "cuMemFree_v2");
  L(cuMemcpyHtoD, "cuMemcpyHtoD_v2"); L(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  L(cuMemsetD8, "cuMemsetD8_v2"); L(cuCtxSynchronize, "cuCtxSynchronize");
  L(cuLaunchKernel, "cuLaunchKernel");
  bool ok = true;
  int dev; CUcontext ctx;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  std::ifstream idx(argv[1]);
  std::string line;
  std::map<std::string, std::map<uint64_t, int>> hashes;
  std::map<std::string, long> worst;
  int cases = 0, failed = 0;
  while (std::getline(idx, line)) {
    std::istringstream ls(line);
    std::string key; ls >> key;
    if (key != "case") continue;
    std::string label, config; ls >> label >> config;
    std::string cubin, entry; unsigned grid = 0, block = 0;
    std::vector<std::vector<char>> params; // raw bytes
    struct Out { CUdeviceptr p; size_t n; int elem; std::string expect; };
    std::vector<Out> outs; std::vector<CUdeviceptr> allocs;
    while (std::getline(idx, line) && line != "end") {
      std::istringstream s(line); std::string k; s >> k;
      if (k == "cubin") s >> cubin;
      else if (k == "entry") s >> entry;
      else if (k == "grid") s >> grid;
      else if (k == "block") s >> block;
      else if (k == "buffer") {
        size_t n; std::string dir, path; int elem; s >> n >> dir >> elem >> path;
        CUdeviceptr p = 0; CK(cuMemAlloc(&p, n ? n : 16)); allocs.push_back(p);
        if (dir == "in") { auto d = readFile(path); CK(cuMemcpyHtoD(p, d.data(), n)); }
        else { CK(cuMemsetD8(p, 0xAB, n)); outs.push_back({p, n, elem, path}); }
        std::vector<char> b(8); memcpy(b.data(), &p, 8); params.push_back(b);
      } else if (k == "param") {
        std::string t; s >> t; std::vector<char> b;
        if (t == "f32") { uint32_t v; s >> v; b.resize(4); memcpy(b.data(), &v, 4); }
        else { long long v; s >> v; b.resize(8); memcpy(b.data(), &v, 8); }
        params.push_back(b);
      }
    }
    auto bin = readFile(cubin);
    CUmodule mod; CUfunction fn;
    CK(cuModuleLoadData(&mod, bin.data()));
    CK(cuModuleGetFunction(&fn, mod, entry.c_str()));
    std::vector<void *> args; for (auto &p : params) args.push_back(p.data());
    CK(cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, nullptr, args.data(), nullptr));
    CK(cuCtxSynchronize());
    long mism = 0, first = -1; uint64_t hash = 1469598103934665603ull;
    for (Out &o : outs) {
      std::vector<char> got(o.n); CK(cuMemcpyDtoH(got.data(), o.p, o.n));
      auto want = readFile(o.expect);
      for (size_t e = 0; e < o.n / o.elem; ++e)
        if (memcmp(&got[e * o.elem], &want[e * o.elem], o.elem)) { if (first < 0) first = e; ++mism; }
      for (char c : got) { hash ^= (unsigned char)c; hash *= 1099511628211ull; }
    }
    for (CUdeviceptr p : allocs) cuMemFree(p);
    cuModuleUnload(mod);
    hashes[label][hash]++; ++cases;
    if (mism > worst[label]) worst[label] = mism;
    printf("%-14s %-14s vs-interpreter mismatches=%ld first=%ld hash=%016llx\n",
           label.c_str(), config.c_str(), mism, first, (unsigned long long)hash);
  }
  printf("\nsummary (%d cases):\n", cases);
  for (auto &[label, hs] : hashes) {
    bool same = hs.size() == 1;
    failed += !same;
    printf("  %-14s configs agree: %s (%zu distinct outputs); max elements differing from interpreter: %ld\n",
           label.c_str(), same ? "yes" : "NO", hs.size(), worst[label]);
  }
  return ok && !failed ? 0 : 1;
}
