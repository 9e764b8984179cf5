//===- bench/ptx_to_cubin/ptx_to_cubin.cpp - PTX -> cubin, side by side ---===//
//
// Times every way bitfold can turn PTX into something the driver launches,
// on the same PTX files, in one process (so the first use of each tool is
// reported apart from the steady cost):
//   jitlink[-O<n>]   nvJitLink (dlopen libnvJitLink.so.13), -Xptxas=-O<n>
//   driver[-O<n>]    cuModuleLoadDataEx on the PTX, CU_JIT_OPTIMIZATION_LEVEL
//   cuLink[-O<n>]    cuLinkCreate/AddData/Complete (gives a cubin to compare)
//   ptxas[-O<n>]     ptxas as a process
// For each (method, file) it prints the first time and the median of the
// next `reps`, and whether the cubin's bytes match jitlink-O3's (driver
// loads give no cubin). Run with CUDA_CACHE_DISABLE=1.
//
//   ptx_to_cubin [--reps N] [--ptxas PATH] [--cubin-dir D] FILE.ptx...
//
// Standalone on purpose: it needs only libdl, the CUDA headers at build time
// and the driver at run time, so it runs on a GPU host without LLVM.
//===----------------------------------------------------------------------===//

#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Cubin = std::vector<char>;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename F> bool sym(void *lib, F &fn, const char *name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn)
    std::fprintf(stderr, "missing symbol %s\n", name);
  return fn != nullptr;
}

struct Driver {
  void *lib = nullptr;
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*ctxCreate)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
  CUresult (*primaryRetain)(CUcontext *, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*loadEx)(CUmodule *, const void *, unsigned, CUjit_option *,
                     void **);
  CUresult (*unload)(CUmodule);
  CUresult (*linkCreate)(unsigned, CUjit_option *, void **, CUlinkState *);
  CUresult (*linkAdd)(CUlinkState, CUjitInputType, void *, size_t,
                      const char *, unsigned, CUjit_option *, void **);
  CUresult (*linkComplete)(CUlinkState, void **, size_t *);
  CUresult (*linkDestroy)(CUlinkState);

  bool open() {
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib)
      return false;
    CUdevice dev;
    CUcontext ctx;
    bool ok = sym(lib, init, "cuInit") && sym(lib, deviceGet, "cuDeviceGet") &&
              sym(lib, primaryRetain, "cuDevicePrimaryCtxRetain") &&
              sym(lib, ctxSetCurrent, "cuCtxSetCurrent") &&
              sym(lib, loadEx, "cuModuleLoadDataEx") &&
              sym(lib, unload, "cuModuleUnload") &&
              sym(lib, linkCreate, "cuLinkCreate_v2") &&
              sym(lib, linkAdd, "cuLinkAddData_v2") &&
              sym(lib, linkComplete, "cuLinkComplete") &&
              sym(lib, linkDestroy, "cuLinkDestroy");
    return ok && init(0) == CUDA_SUCCESS && deviceGet(&dev, 0) == CUDA_SUCCESS &&
           primaryRetain(&ctx, dev) == CUDA_SUCCESS &&
           ctxSetCurrent(ctx) == CUDA_SUCCESS;
  }
};

struct JitLink {
  void *lib = nullptr;
  int (*create)(void **, uint32_t, const char **);
  int (*destroy)(void **);
  int (*addData)(void *, int, const void *, size_t, const char *);
  int (*complete)(void *);
  int (*cubinSize)(void *, size_t *);
  int (*cubin)(void *, void *);

  bool open() {
    for (const char *p : {"libnvJitLink.so.13", "libnvJitLink.so"}) {
      lib = dlopen(p, RTLD_NOW);
      if (lib)
        break;
    }
    return lib && sym(lib, create, "__nvJitLinkCreate_13_0") &&
           sym(lib, destroy, "__nvJitLinkDestroy_13_0") &&
           sym(lib, addData, "__nvJitLinkAddData_13_0") &&
           sym(lib, complete, "__nvJitLinkComplete_13_0") &&
           sym(lib, cubinSize, "__nvJitLinkGetLinkedCubinSize_13_0") &&
           sym(lib, cubin, "__nvJitLinkGetLinkedCubin_13_0");
  }
};

Driver drv;
JitLink jl;
std::string ptxasPath;
std::string cubinDir; ///< where each method's cubin is written, if set.

bool viaJitLink(const std::string &ptx, int level, bool verbose, Cubin &out) {
  std::string o = "-Xptxas=-O" + std::to_string(level);
  std::vector<const char *> opts{"-arch=sm_90", o.c_str()};
  if (verbose)
    opts.push_back("-Xptxas=-v");
  void *h = nullptr;
  if (jl.create(&h, opts.size(), opts.data()) != 0)
    return false;
  bool ok = jl.addData(h, /*NVJITLINK_INPUT_PTX*/ 2, ptx.data(), ptx.size(),
                       "k.ptx") == 0 &&
            jl.complete(h) == 0;
  size_t n = 0;
  if (ok && jl.cubinSize(h, &n) == 0) {
    out.resize(n);
    ok = jl.cubin(h, out.data()) == 0;
  }
  jl.destroy(&h);
  return ok;
}

bool viaDriverLoad(const std::string &ptx, int level) {
  CUjit_option opt[] = {CU_JIT_OPTIMIZATION_LEVEL};
  void *val[] = {reinterpret_cast<void *>(static_cast<uintptr_t>(level))};
  CUmodule m;
  if (drv.loadEx(&m, ptx.c_str(), 1, opt, val) != CUDA_SUCCESS)
    return false;
  drv.unload(m);
  return true;
}

bool viaCuLink(const std::string &ptx, int level, Cubin &out) {
  CUjit_option opt[] = {CU_JIT_OPTIMIZATION_LEVEL};
  void *val[] = {reinterpret_cast<void *>(static_cast<uintptr_t>(level))};
  CUlinkState st;
  if (drv.linkCreate(1, opt, val, &st) != CUDA_SUCCESS)
    return false;
  void *data = nullptr;
  size_t n = 0;
  bool ok = drv.linkAdd(st, CU_JIT_INPUT_PTX, const_cast<char *>(ptx.c_str()),
                        ptx.size() + 1, "k.ptx", 0, nullptr,
                        nullptr) == CUDA_SUCCESS &&
            drv.linkComplete(st, &data, &n) == CUDA_SUCCESS;
  if (ok)
    out.assign(static_cast<char *>(data), static_cast<char *>(data) + n);
  drv.linkDestroy(st);
  return ok;
}

bool viaPtxas(const std::string &file, int level, Cubin &out) {
  std::string cubin = "/tmp/ptx_to_cubin." + std::to_string(getpid()) + ".cubin";
  std::string o = "-O" + std::to_string(level);
  pid_t pid = fork();
  if (pid == 0) {
    execl(ptxasPath.c_str(), "ptxas", "-arch=sm_90", o.c_str(), "-o",
          cubin.c_str(), file.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return false;
  std::string s = readFile(cubin);
  out.assign(s.begin(), s.end());
  unlink(cubin.c_str());
  return true;
}

struct Method {
  std::string name;
  std::function<bool(const std::string &file, const std::string &ptx, Cubin &)>
      run;
};

std::vector<Method> methods() {
  std::vector<Method> ms;
  for (int l : {3, 2, 1, 0}) {
    ms.push_back({"jitlink-O" + std::to_string(l),
                  [l](const std::string &, const std::string &p, Cubin &c) {
                    return viaJitLink(p, l, false, c);
                  }});
  }
  ms.push_back({"jitlink-O3-v",
                [](const std::string &, const std::string &p, Cubin &c) {
                  return viaJitLink(p, 3, true, c);
                }});
  for (int l : {4, 3, 2, 1, 0}) {
    ms.push_back({"driver-O" + std::to_string(l),
                  [l](const std::string &, const std::string &p, Cubin &) {
                    return viaDriverLoad(p, l);
                  }});
    ms.push_back({"cuLink-O" + std::to_string(l),
                  [l](const std::string &, const std::string &p, Cubin &c) {
                    return viaCuLink(p, l, c);
                  }});
  }
  if (!ptxasPath.empty())
    for (int l : {3, 2, 1, 0})
      ms.push_back({"ptxas-O" + std::to_string(l),
                    [l](const std::string &f, const std::string &, Cubin &c) {
                      return viaPtxas(f, l, c);
                    }});
  return ms;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 5;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--cubin-dir" && i + 1 < argc)
      cubinDir = argv[++i];
    else if (a == "--ptxas" && i + 1 < argc)
      ptxasPath = argv[++i];
    else
      files.push_back(a);
  }
  auto t0 = Clock::now();
  if (!drv.open()) {
    std::fprintf(stderr, "no CUDA driver/device\n");
    return 1;
  }
  std::printf("# driver init + context: %.1f ms\n", msSince(t0));
  t0 = Clock::now();
  if (!jl.open()) {
    std::fprintf(stderr, "no nvJitLink\n");
    return 1;
  }
  std::printf("# nvJitLink dlopen: %.1f ms\n", msSince(t0));
  std::printf("| method | file | PTX bytes | first ms | median ms | min ms | "
              "cubin bytes | cubin == jitlink-O3 |\n|---|---|---|---|---|---|---|---|\n");
  std::map<std::string, Cubin> reference;
  for (const Method &m : methods()) {
    for (const std::string &f : files) {
      std::string ptx = readFile(f);
      std::string base = f.substr(f.find_last_of('/') + 1);
      std::vector<double> t;
      Cubin c;
      bool ok = true;
      for (int r = 0; r <= reps && ok; ++r) {
        c.clear();
        auto s = Clock::now();
        ok = m.run(f, ptx, c);
        t.push_back(msSince(s));
      }
      if (!ok) {
        std::printf("| %s | %s | %zu | failed | | | | |\n", m.name.c_str(),
                    base.c_str(), ptx.size());
        continue;
      }
      if (m.name == "jitlink-O3")
        reference[f] = c;
      if (!cubinDir.empty() && !c.empty())
        std::ofstream(cubinDir + "/" + base + "." + m.name + ".cubin",
                      std::ios::binary)
            .write(c.data(), c.size());
      double first = t.front();
      std::vector<double> rest(t.begin() + 1, t.end());
      std::sort(rest.begin(), rest.end());
      const char *same = c.empty() ? "n/a" : (c == reference[f] ? "yes" : "no");
      std::printf("| %s | %s | %zu | %.1f | %.1f | %.1f | %zu | %s |\n",
                  m.name.c_str(), base.c_str(), ptx.size(), first,
                  rest[rest.size() / 2], rest.front(), c.size(), same);
      std::fflush(stdout);
    }
  }
  return 0;
}
