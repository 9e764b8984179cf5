//===- bench/launch_latency/LaunchLatency.cpp - Host cost of a launch -----===//
//
// How long bitfold keeps the host busy, through the public C API
// (runtime/bitfold.h, i.e. libbitfold.so) on its own device buffers
// (cuda/Driver.h wrappers):
//
//   cold       a fresh process, empty cache directory: the first launch
//              compiles (DSL -> PTX -> cubin) and writes the disk cache;
//   warm-disk  a fresh process, the cache filled by the cold run: runtime
//              creation (goal <= 1 ms: no toolchain probe, issue 16), then
//              the first launch reads the entry and loads the module (goal
//              < 5 ms; the toolchain text comes from the cache directory);
//   warm       in this process, after the first launch: host time of each
//              bitfold_launch call, measured one by one with steady_clock
//              over --launches calls (goal: median <= 5 us), the stream
//              synchronised every --sync-every launches (not timed) so the
//              launch queue never fills;
//   driver     the floor: the same loop calling cuLaunchKernel directly on
//              an empty PTX kernel with ln_modulate's parameter list (10 x
//              u64 + f32), so "warm - driver" is what bitfold adds.
//
// The fresh processes are this executable again (--child), so they pay
// what a new application pays: loading the driver, creating the runtime,
// finding the kernel. The CUDA context is created before the clock starts
// (an application has one already). Each child reports the runtime's cache
// counters, so the log shows that the warm-disk runs compiled nothing.
//
//   launch_latency [--template ln_modulate] [--shape 1,64,1024]
//                  [--launches 100000] [--sync-every 1000] [--disk-runs 5]
//                  [--cache-dir DIR (must be empty; default: a new temp dir)]
//                  [--json FILE]
//
//===----------------------------------------------------------------------===//

#include "cuda/Driver.h"
#include "runtime/bitfold.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <dirent.h>
#include <unistd.h>

using namespace bitfold::cuda;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int die(const std::string &msg) {
  llvm::errs() << "launch_latency: " << msg << "\n";
  return 1;
}

struct Options {
  std::string templateName = "ln_modulate";
  std::vector<int64_t> shape = {1, 64, 1024};
  long launches = 100000;
  long syncEvery = 1000;
  int diskRuns = 5;
  std::string cacheDir, json;
  bool child = false;
};

std::string shapeText(const std::vector<int64_t> &s) {
  std::string t;
  for (int64_t d : s) {
    if (!t.empty())
      t += ',';
    t += std::to_string(d);
  }
  return t;
}

/// Device tensors for a row-major template with per-batch/per-element
/// operands (ln_modulate and friends): inputs zero, outputs zero.
struct Problem {
  std::vector<DeviceBuffer> buffers;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> tensors;
  std::vector<const DLTensor *> pointers;
  std::vector<float> scalars;
};

std::string makeProblem(bitfold_kernel *k, const std::vector<int64_t> &shape,
                        Problem &p) {
  if (shape.size() != 3)
    return "--shape must be B,S,D";
  const int64_t B = shape[0], D = shape[2];
  const int n = bitfold_kernel_num_tensors(k);
  p.shapes.resize(size_t(n));
  p.tensors.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    std::string name = bitfold_kernel_tensor_name(k, i);
    // Per-batch modulation operands are (B, D); the rest (B, S, D).
    bool perBatch = name == "scale" || name == "shift" || name == "gate";
    p.shapes[i] = perBatch ? std::vector<int64_t>{B, D} : shape;
    size_t elems = 1;
    for (int64_t d : p.shapes[i])
      elems *= size_t(d);
    auto buf = DeviceBuffer::allocate(elems * 2);
    if (!buf)
      return llvm::toString(buf.takeError());
    if (llvm::Error e = buf->fill(0))
      return llvm::toString(std::move(e));
    DLTensor &t = p.tensors[i];
    t = DLTensor{};
    t.data = buf->data();
    t.device = {kDLCUDA, 0};
    t.ndim = int(p.shapes[i].size());
    t.dtype = {kDLBfloat, 16, 1};
    t.shape = p.shapes[i].data();
    p.buffers.push_back(std::move(*buf));
  }
  for (DLTensor &t : p.tensors)
    p.pointers.push_back(&t);
  for (int i = 0; i < bitfold_kernel_num_scalars(k); ++i)
    p.scalars.push_back(1e-6f);
  return "";
}

bitfold_status launch(bitfold_kernel *k, Problem &p) {
  return bitfold_launch(k, p.pointers.data(), int(p.pointers.size()),
                        p.scalars.data(), int(p.scalars.size()), nullptr);
}

/// One fresh process's first launch: prints a RESULT line for the parent.
int childMain(const Options &o) {
  auto api = driver();
  if (!api)
    return die(llvm::toString(api.takeError()));
  // The application's context exists before bitfold is asked for anything.
  auto t0 = Clock::now();
  auto ctx = ScopedContext::forDevice(0);
  if (!ctx)
    return die(llvm::toString(ctx.takeError()));
  double contextMs = msSince(t0);

  auto tCreate = Clock::now();
  bitfold_runtime_options ro;
  bitfold_runtime_options_init(&ro);
  ro.cache_dir = o.cacheDir.c_str();
  ro.tune_db = ""; // the default config: no tune DB in this measurement
  bitfold_runtime *rt = nullptr;
  if (bitfold_runtime_create(&ro, &rt) != BITFOLD_SUCCESS)
    return die(bitfold_last_error());
  double createMs = msSince(tCreate);
  auto tTemplate = Clock::now();
  bitfold_kernel *k = nullptr;
  if (bitfold_template(rt, o.templateName.c_str(), "", &k) != BITFOLD_SUCCESS)
    return die(bitfold_last_error());
  double templateMs = msSince(tTemplate);

  Problem p;
  if (std::string e = makeProblem(k, o.shape, p); !e.empty())
    return die(e);

  auto tLaunch = Clock::now();
  if (launch(k, p) != BITFOLD_SUCCESS)
    return die(bitfold_last_error());
  double launchMs = msSince(tLaunch);
  auto tSync = Clock::now();
  if (llvm::Error e = checkCuda((*api).cuCtxSynchronize(), "synchronize"))
    return die(llvm::toString(std::move(e)));
  double syncMs = msSince(tSync);
  bitfold_cache_stats st{};
  bitfold_runtime_cache_stats(rt, &st);
  llvm::outs() << llvm::formatv(
      "RESULT context_ms={0:f3} create_ms={1:f3} template_ms={2:f3} "
      "first_launch_ms={3:f3} sync_ms={4:f3} compiles={5} disk_hits={6} "
      "memory_hits={7}\n",
      contextMs, createMs, templateMs, launchMs, syncMs, st.compiles,
      st.disk_hits, st.memory_hits);
  llvm::outs().flush();
  bitfold_runtime_destroy(rt);
  return 0;
}

using Fields = std::map<std::string, double>;

struct Timings {
  std::vector<double> us; ///< per launch
  double syncMs = 0, loopMs = 0;
};

/// Times `n` calls of `launchOnce`, one by one, synchronising every
/// `syncEvery` (untimed).
template <typename F>
bool timeLaunches(long n, long syncEvery, const DriverApi &api, F launchOnce,
                  Timings &t) {
  t.us.clear();
  t.us.reserve(size_t(n));
  auto loopStart = Clock::now();
  for (long i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    bool ok = launchOnce();
    auto t1 = Clock::now();
    if (!ok)
      return false;
    t.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if ((i + 1) % syncEvery == 0) {
      auto ts = Clock::now();
      api.cuCtxSynchronize();
      t.syncMs += msSince(ts);
    }
  }
  api.cuCtxSynchronize();
  t.loopMs = msSince(loopStart);
  return true;
}

/// Runs this executable with --child; returns its RESULT fields.
std::string runChild(const Options &o, Fields &out, double &wallMs) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0)
    return "cannot find /proc/self/exe";
  self[n] = 0;
  std::string cmd = llvm::formatv("'{0}' --child --template {1} --shape {2} "
                                  "--cache-dir '{3}'",
                                  self, o.templateName, shapeText(o.shape),
                                  o.cacheDir);
  auto t0 = Clock::now();
  FILE *f = ::popen(cmd.c_str(), "r");
  if (!f)
    return "popen failed";
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f))
    text += buf;
  int rc = ::pclose(f);
  wallMs = msSince(t0);
  if (rc != 0)
    return "child exited with " + std::to_string(rc) + ": " + text;
  size_t at = text.find("RESULT ");
  if (at == std::string::npos)
    return "child printed no RESULT: " + text;
  std::string line = text.substr(at + 7);
  line = line.substr(0, line.find('\n'));
  size_t pos = 0;
  while (pos < line.size()) {
    size_t sp = line.find(' ', pos);
    std::string kv = line.substr(pos, sp == std::string::npos ? sp : sp - pos);
    size_t eq = kv.find('=');
    if (eq != std::string::npos)
      out[kv.substr(0, eq)] = std::atof(kv.c_str() + eq + 1);
    if (sp == std::string::npos)
      break;
    pos = sp + 1;
  }
  out["process_wall_ms"] = wallMs;
  return "";
}

double percentile(const std::vector<double> &sorted, double q) {
  if (sorted.empty())
    return 0;
  size_t i = size_t(q * double(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

bool dirIsEmptyOrMissing(const std::string &d) {
  DIR *dir = ::opendir(d.c_str());
  if (!dir)
    return true;
  bool empty = true;
  while (dirent *e = ::readdir(dir))
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
      empty = false;
  ::closedir(dir);
  return empty;
}

std::string fieldsJson(const Fields &f) {
  std::string s = "{";
  for (auto &[k, v] : f)
    s += llvm::formatv("{0}\"{1}\": {2:f4}", s.size() > 1 ? ", " : "", k, v).str();
  return s + "}";
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        die(a + " needs a value");
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--child")
      o.child = true;
    else if (a == "--template")
      o.templateName = next();
    else if (a == "--shape") {
      o.shape.clear();
      std::string s = next();
      for (size_t p = 0; p <= s.size();) {
        size_t c = s.find(',', p);
        o.shape.push_back(std::atoll(s.substr(p, c - p).c_str()));
        if (c == std::string::npos)
          break;
        p = c + 1;
      }
    } else if (a == "--launches")
      o.launches = std::atol(next().c_str());
    else if (a == "--sync-every")
      o.syncEvery = std::max(1L, std::atol(next().c_str()));
    else if (a == "--disk-runs")
      o.diskRuns = std::max(1, std::atoi(next().c_str()));
    else if (a == "--cache-dir")
      o.cacheDir = next();
    else if (a == "--json")
      o.json = next();
    else if (a == "-h" || a == "--help") {
      llvm::outs() << "usage: launch_latency [--template T] [--shape B,S,D] "
                      "[--launches N] [--sync-every N] [--disk-runs N] "
                      "[--cache-dir EMPTY_DIR] [--json FILE]\n";
      return 0;
    } else {
      return die("unexpected argument '" + a + "' (see --help)");
    }
  }
  if (o.child)
    return childMain(o);

  auto info = queryDriver();
  if (!info)
    return die("no GPU: " + llvm::toString(info.takeError()));
  if (info->devices.empty())
    return die("no CUDA device");
  llvm::outs() << llvm::formatv("bitfold {0}, device {1} ({2}), driver {3}\n",
                                bitfold_version(), info->devices[0].name,
                                info->devices[0].arch(),
                                info->versionString());
  if (o.cacheDir.empty()) {
    char tmpl[] = "/tmp/bitfold-launch-latency-XXXXXX";
    if (!::mkdtemp(tmpl))
      return die("mkdtemp failed");
    o.cacheDir = tmpl;
  } else if (!dirIsEmptyOrMissing(o.cacheDir)) {
    return die("--cache-dir '" + o.cacheDir +
               "' is not empty: the cold run needs an empty cache");
  }
  llvm::outs() << llvm::formatv("{0} ({1}), cache dir {2}\n", o.templateName,
                                shapeText(o.shape), o.cacheDir);

  // Cold and warm-disk: fresh processes.
  Fields cold;
  double wall = 0;
  if (std::string e = runChild(o, cold, wall); !e.empty())
    return die("cold run: " + e);
  llvm::outs() << llvm::formatv(
      "cold      (new process, empty cache): first launch {0:f2} ms "
      "(runtime create {1:f2} ms, template {2:f3} ms); compiles {3}, disk "
      "hits {4}; process wall {5:f0} ms\n",
      cold["first_launch_ms"], cold["create_ms"], cold["template_ms"],
      cold["compiles"], cold["disk_hits"], cold["process_wall_ms"]);
  std::vector<Fields> disk;
  for (int r = 0; r < o.diskRuns; ++r) {
    Fields f;
    if (std::string e = runChild(o, f, wall); !e.empty())
      return die("warm-disk run: " + e);
    llvm::outs() << llvm::formatv(
        "warm-disk (new process, cache filled): first launch {0:f3} ms "
        "(runtime create {1:f3} ms, template {2:f3} ms); compiles {3}, disk "
        "hits {4}; process wall {5:f0} ms\n",
        f["first_launch_ms"], f["create_ms"], f["template_ms"], f["compiles"],
        f["disk_hits"], f["process_wall_ms"]);
    disk.push_back(f);
  }
  auto medianOf = [&](const char *k) {
    std::vector<double> v;
    for (Fields &f : disk)
      v.push_back(f[k]);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double diskFirst = medianOf("first_launch_ms");
  double diskCreateToFirst = 0;
  {
    std::vector<double> v;
    for (Fields &f : disk)
      v.push_back(f["create_ms"] + f["template_ms"] + f["first_launch_ms"]);
    std::sort(v.begin(), v.end());
    diskCreateToFirst = v[v.size() / 2];
  }
  double diskCompiles = 0;
  for (Fields &f : disk)
    diskCompiles += f["compiles"];

  // Warm launches: this process, the cache filled.
  auto ctx = ScopedContext::forDevice(0);
  if (!ctx)
    return die(llvm::toString(ctx.takeError()));
  const DriverApi &api = *driver();
  bitfold_runtime_options ro;
  bitfold_runtime_options_init(&ro);
  ro.cache_dir = o.cacheDir.c_str();
  ro.tune_db = "";
  bitfold_runtime *rt = nullptr;
  if (bitfold_runtime_create(&ro, &rt) != BITFOLD_SUCCESS)
    return die(bitfold_last_error());
  bitfold_kernel *k = nullptr;
  if (bitfold_template(rt, o.templateName.c_str(), "", &k) != BITFOLD_SUCCESS)
    return die(bitfold_last_error());
  Problem p;
  if (std::string e = makeProblem(k, o.shape, p); !e.empty())
    return die(e);
  for (int i = 0; i < 1000; ++i) // first launch + warm-up
    if (launch(k, p) != BITFOLD_SUCCESS)
      return die(bitfold_last_error());
  if (llvm::Error e = checkCuda(api.cuCtxSynchronize(), "synchronize"))
    return die(llvm::toString(std::move(e)));

  Timings warmT;
  if (!timeLaunches(o.launches, o.syncEvery, api,
                    [&] { return launch(k, p) == BITFOLD_SUCCESS; }, warmT))
    return die(bitfold_last_error());
  if (llvm::Error e = checkCuda(api.cuCtxSynchronize(), "synchronize"))
    return die(llvm::toString(std::move(e)));
  const std::vector<double> &us = warmT.us;
  double loopMs = warmT.loopMs, syncMsTotal = warmT.syncMs;
  bitfold_cache_stats st{};
  bitfold_runtime_cache_stats(rt, &st);
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double v : us)
    mean += v;
  mean /= double(std::max<size_t>(us.size(), 1));
  Fields warm{{"launches", double(o.launches)},
              {"sync_every", double(o.syncEvery)},
              {"median_us", percentile(sorted, 0.5)},
              {"p90_us", percentile(sorted, 0.9)},
              {"p99_us", percentile(sorted, 0.99)},
              {"p999_us", percentile(sorted, 0.999)},
              {"min_us", sorted.empty() ? 0 : sorted.front()},
              {"max_us", sorted.empty() ? 0 : sorted.back()},
              {"mean_us", mean},
              {"loop_ms", loopMs},
              {"sync_ms_total", syncMsTotal},
              {"compiles", double(st.compiles)},
              {"disk_hits", double(st.disk_hits)}};
  llvm::outs() << llvm::formatv(
      "warm      ({0} launches, sync every {1}): per launch median {2:f3} us, "
      "p90 {3:f3}, p99 {4:f3}, p99.9 {5:f3}, min {6:f3}, max {7:f1}, mean "
      "{8:f3} us; loop {9:f0} ms (of which sync {10:f0} ms)\n",
      o.launches, o.syncEvery, warm["median_us"], warm["p90_us"],
      warm["p99_us"], warm["p999_us"], warm["min_us"], warm["max_us"],
      warm["mean_us"], loopMs, syncMsTotal);
  bitfold_runtime_destroy(rt);

  // The driver's floor: cuLaunchKernel on an empty kernel taking the same
  // parameters, same grid and block.
  Fields floor;
  {
    std::string arch = info->devices[0].arch();
    std::string ptx = ".version 8.0\n.target " + arch +
                      "\n.address_size 64\n.visible .entry bitfold_empty(";
    for (int i = 0; i < 10; ++i)
      ptx += ".param .u64 p" + std::to_string(i) + ", ";
    ptx += ".param .f32 p10)\n{\n  ret;\n}\n";
    std::vector<char> image(ptx.begin(), ptx.end());
    image.push_back(0);
    auto module = Module::load(image);
    if (!module)
      return die("empty kernel: " + llvm::toString(module.takeError()));
    auto fn = module->function("bitfold_empty");
    if (!fn)
      return die(llvm::toString(fn.takeError()));
    uint64_t values[11] = {};
    for (int i = 0; i < 8; ++i)
      values[i] = uint64_t(p.buffers[size_t(i / 2) % p.buffers.size()].ptr());
    float eps = 1e-6f;
    std::memcpy(&values[10], &eps, 4);
    void *params[11];
    for (int i = 0; i < 11; ++i)
      params[i] = &values[i];
    const unsigned grid = unsigned((o.shape[0] * o.shape[1] + 3) / 4);
    Timings t;
    for (int i = 0; i < 1000; ++i)
      api.cuLaunchKernel(*fn, grid, 1, 1, 256, 1, 1, 0, nullptr, params,
                         nullptr);
    api.cuCtxSynchronize();
    if (!timeLaunches(o.launches, o.syncEvery, api,
                      [&] {
                        return api.cuLaunchKernel(*fn, grid, 1, 1, 256, 1, 1,
                                                  0, nullptr, params,
                                                  nullptr) == CUDA_SUCCESS;
                      },
                      t))
      return die("cuLaunchKernel of the empty kernel failed");
    std::sort(t.us.begin(), t.us.end());
    floor = {{"median_us", percentile(t.us, 0.5)},
             {"p90_us", percentile(t.us, 0.9)},
             {"p99_us", percentile(t.us, 0.99)},
             {"p999_us", percentile(t.us, 0.999)},
             {"max_us", t.us.empty() ? 0 : t.us.back()}};
    llvm::outs() << llvm::formatv(
        "driver    (cuLaunchKernel, empty kernel, same parameters, {0} "
        "launches): per launch median {1:f3} us, p90 {2:f3}, p99 {3:f3}, "
        "p99.9 {4:f3}, max {5:f1} us => bitfold adds {6:f3} us at the "
        "median\n",
        o.launches, floor["median_us"], floor["p90_us"], floor["p99_us"],
        floor["p999_us"], floor["max_us"],
        warm["median_us"] - floor["median_us"]);
  }

  bool warmOk = warm["median_us"] <= 5.0;
  bool diskOk = diskFirst < 5.0 && diskCompiles == 0;
  double diskCreate = medianOf("create_ms");
  llvm::outs() << llvm::formatv(
      "goals: warm launch median <= 5 us: {0} ({1:f3} us); warm-disk first "
      "launch < 5 ms: {2} (median {3:f3} ms over {4} processes, {5:f3} ms "
      "from runtime create; {6} compiles); runtime creation <= 1 ms with a "
      "warm cache: {7} (median {8:f3} ms)\n",
      warmOk ? "MET" : "MISSED", warm["median_us"], diskOk ? "MET" : "MISSED",
      diskFirst, disk.size(), diskCreateToFirst, diskCompiles,
      diskCreate <= 1.0 ? "MET" : "MISSED", diskCreate);

  if (!o.json.empty()) {
    std::string j = "{\n  \"template\": \"" + o.templateName +
                    "\",\n  \"shape\": \"" + shapeText(o.shape) +
                    "\",\n  \"device\": \"" + info->devices[0].name +
                    "\",\n  \"cold\": " + fieldsJson(cold) +
                    ",\n  \"warm_disk\": [";
    for (size_t i = 0; i < disk.size(); ++i)
      j += (i ? ", " : "") + fieldsJson(disk[i]);
    j += "],\n  \"warm\": " + fieldsJson(warm) +
         ",\n  \"driver_floor\": " + fieldsJson(floor) + "\n}\n";
    std::error_code ec;
    llvm::raw_fd_ostream os(o.json, ec);
    if (ec)
      return die("cannot write " + o.json + ": " + ec.message());
    os << j;
  }
  return warmOk && diskOk ? 0 : 3;
}
