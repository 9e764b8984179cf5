//===- tools/PrebuildCommand.cpp - `bitfold prebuild` ---------------------===//
//
// Fills a kernel cache directory on a machine without a GPU: for every
// shape of a shapes file (tools/ShapeTasks.h) and every --arch, the cubins a
// launch on a GPU of that arch looks up. The config is what the runtime's
// config source answers (autotune::openTuneDbSource over --tune-db): for each
// GPU of the arch the DB was tuned on (or each --gpu), its winner, else the
// default (the runtime Compiler's, as autotune::tuneShape's reference);
// without a DB, the default. The DB's winners are tuneShape's, whether
// `bitfold tune` or a runtime's tune-on-miss recorded them. The key and the compile come from
// keys::launchCompile, the runtime's own, so a process pointed at the
// directory ($BITFOLD_CACHE_DIR) on such a GPU compiles nothing. With
// --every-config every legal config of each shape is built instead (the
// cache an every-config test or sweep then finds). Compiles run
// on a thread pool; the cache's per-key lock makes a concurrent prebuild of
// the same directory safe.
//
//===----------------------------------------------------------------------===//

#include "tools/Commands.h"

#include "keys/Errors.h"
#include "tools/ShapeTasks.h"

#include "autotune/TuneDB.h"

#include "autotune/RuntimeTuner.h"
#include "codegen/Codegen.h"
#include "runtime/KernelCache.h"
#include "runtime/Runtime.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <chrono>
#include <mutex>
#include <set>

using namespace bitfold;
using namespace bitfold::tools;

namespace {

using Clock = std::chrono::steady_clock;

/// More threads than this is a typo (each compile holds an LLVM context).
constexpr unsigned kMaxJobs = 256;

/// One cubin to build: a launch's compile and where its config came from.
struct Job {
  const ShapeTask *task;
  std::string arch, configFrom;
  keys::TileConfig config;
  keys::LaunchCompile compile;

  /// "conv_bias 1,96,1,4,4 dtype=bf16 sm_90 r1.t128.v8.p1 (default)".
  std::string label() const {
    return llvm::formatv("{0} {1}{2} {3} ({4})", task->request.label(), arch,
                         compile.options.gridDependencyControl ? " pdl" : "",
                         config.str(), configFrom)
        .str();
  }
};

/// The GPU names to ask the config source for on `arch`: --gpu, else every
/// GPU of that arch the DB holds entries for; none means the default only.
std::vector<std::string> gpusFor(const PrebuildOptions &o,
                                 const autotune::TuneDB *db,
                                 llvm::StringRef arch) {
  if (!o.gpus.empty())
    return o.gpus;
  std::set<std::string> names;
  if (db)
    for (const autotune::TuneEntry *e : db->all())
      if (e->key.env.arch == arch)
        names.insert(e->key.env.gpuName);
  return {names.begin(), names.end()};
}

/// Everything the jobs are planned from.
struct PrebuildPlan {
  const PrebuildOptions &opts;
  const runtime::Compiler &comp;
  std::string toolchain;
  std::unique_ptr<policy::ConfigSource> source; ///< null: no tune DB.
  std::optional<autotune::TuneDB> db;
  std::vector<Job> jobs;
  std::set<std::string> keys; ///< planned key hashes (one job each).
};

/// The configs a launch of `t` on `arch` uses: the runtime's request to its
/// config source, once per GPU name; with --every-config every legal one.
std::vector<std::pair<keys::TileConfig, std::string>>
configsFor(PrebuildPlan &p, const ShapeTask &t, llvm::StringRef arch) {
  const dsl::KernelDef &def = *t.problem.def;
  if (p.opts.everyConfig) {
    std::vector<std::pair<keys::TileConfig, std::string>> all;
    for (const keys::TileConfig &c : codegen::enumerateConfigs(def, t.spec))
      all.push_back({c, "every config"});
    return all;
  }
  keys::TileConfig dflt = p.comp.defaultConfig(def, t.spec);
  std::vector<std::string> gpus =
      p.source ? gpusFor(p.opts, p.db ? &*p.db : nullptr, arch)
               : std::vector<std::string>{};
  if (gpus.empty())
    return {{dflt, "default"}};
  std::vector<std::pair<keys::TileConfig, std::string>> out;
  for (const std::string &gpu : gpus) {
    policy::ConfigRequest req;
    req.def = t.problem.def;
    req.shapeClass = t.cls;
    req.gpuName = gpu;
    req.arch = arch.str();
    req.toolchain = p.toolchain;
    req.defaultConfig = dflt;
    req.check = [&](const keys::TileConfig &c) {
      return p.comp.checkConfig(def, t.spec, c);
    };
    policy::ConfigAnswer a = p.source->configFor(req);
    out.push_back({a.config, a.from + " on " + gpu});
  }
  return out;
}

void planJobs(PrebuildPlan &p, const std::vector<ShapeTask> &tasks) {
  std::vector<bool> pdlModes{false};
  if (p.opts.pdl)
    pdlModes.push_back(true);
  for (const std::string &arch : p.opts.archs)
    for (const ShapeTask &t : tasks)
      for (auto &[config, from] : configsFor(p, t, arch))
        for (bool pdl : pdlModes) {
          Job j{&t, arch, from, config,
                keys::launchCompile(*t.problem.def, t.cls, config, arch, pdl,
                                    p.toolchain)};
          if (p.keys.insert(j.compile.key.hash()).second)
            p.jobs.push_back(std::move(j));
        }
}

/// Counts and progress lines, shared by the pool's threads; the cache's
/// warnings go through it too (`err` is written under one lock).
struct Progress {
  llvm::raw_ostream &out, &err;
  size_t total = 0;
  std::mutex mu;

  void warn(llvm::StringRef m) {
    std::lock_guard<std::mutex> lock(mu);
    err << "bitfold prebuild: warning: " << m << "\n";
  }
  size_t done = 0, compiled = 0, cached = 0, failed = 0;

  void record(const Job &j, const runtime::CacheOrigin &origin,
              llvm::StringRef error) {
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    std::string what;
    if (!error.empty()) {
      ++failed;
      what = "FAILED: " + error.str();
    } else if (origin.kind == runtime::CacheOrigin::Compiled) {
      ++compiled;
      what = llvm::formatv("compiled {0:f0} ms", origin.ms).str();
    } else {
      ++cached;
      what = "cached";
    }
    llvm::raw_ostream &os = error.empty() ? out : err;
    os << llvm::formatv("[{0}/{1}] {2}: {3}\n", done, total, j.label(), what);
    os.flush();
  }
};

void runJob(const Job &j, const runtime::Compiler &comp,
            runtime::KernelCache &cache, Progress &progress) {
  const dsl::KernelDef &def = *j.task->problem.def;
  runtime::CacheOrigin origin;
  auto k = cache.getOrCompile(
      j.compile.key,
      [&] {
        return comp.compile(def, j.compile.shape, j.config, j.compile.options);
      },
      &origin);
  progress.record(j, origin, k ? "" : llvm::toString(k.takeError()));
}

/// The tasks of the shapes file; every entry must plan (else a usage error
/// naming each entry that does not).
llvm::Expected<std::vector<ShapeTask>> loadTasks(const PrebuildOptions &o) {
  auto requests = autotune::loadShapesFile(o.shapes);
  if (!requests)
    return requests.takeError();
  std::vector<ShapeTask> tasks = planShapeTasks(*requests, o.templateFilter);
  std::string bad;
  for (const ShapeTask &t : tasks)
    if (!t.error.empty())
      bad += "\n  " + t.request.label() + ": " + t.error;
  if (!bad.empty())
    return keys::usageError(o.shapes +
                            ": shapes the kernels do not accept:" + bad);
  if (tasks.empty())
    return keys::usageError(
        o.shapes + ": no shapes" +
        (o.templateFilter.empty() ? "" : " of --templates"));
  return tasks;
}

/// Opens --tune-db twice over: the DB itself (which GPUs it was tuned on)
/// and the runtime's config source over it.
llvm::Error openTuneDb(PrebuildPlan &p, llvm::raw_ostream &err) {
  if (p.opts.tuneDb.empty())
    return llvm::Error::success();
  if (!llvm::sys::fs::exists(p.opts.tuneDb))
    return keys::usageError("--tune-db " + p.opts.tuneDb + ": no such file");
  auto db = autotune::TuneDB::load(p.opts.tuneDb);
  if (!db)
    return db.takeError();
  p.db = std::move(*db);
  auto source =
      autotune::openTuneDbSource(p.opts.tuneDb, [&err](llvm::StringRef m) {
        err << "bitfold prebuild: warning: " << m << "\n";
      });
  if (!source)
    return source.takeError();
  p.source = std::move(*source);
  return llvm::Error::success();
}

/// Runs the jobs on a pool of --jobs threads; the summary goes to `out`.
int runJobs(const PrebuildPlan &p, runtime::KernelCache &cache,
            Progress &progress, llvm::raw_ostream &out,
            llvm::raw_ostream &err) {
  const auto t0 = Clock::now();
  {
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency(p.opts.jobs));
    for (const Job &j : p.jobs)
      pool.async([&, jp = &j] { runJob(*jp, p.comp, cache, progress); });
    pool.wait();
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  out << llvm::formatv("prebuild: {0} entries for {1} in {2}: {3} compiled, "
                       "{4} already cached, {5} failed ({6:f1} s)\n",
                       p.jobs.size(), llvm::join(p.opts.archs, ","),
                       p.opts.cacheDir, progress.compiled, progress.cached,
                       progress.failed, s);
  if (!cache.diskWritable())
    return report(err, "prebuild",
                  "the cache directory " + p.opts.cacheDir +
                      " could not be written (see the warnings above)",
                  kFailed);
  return progress.failed ? kFailed : kOk;
}

} // namespace

llvm::Error tools::checkPrebuildOptions(const PrebuildOptions &o) {
  if (o.shapes.empty())
    return keys::usageError("expected --shapes FILE.json");
  if (o.cacheDir.empty())
    return keys::usageError("expected --cache-dir DIR");
  if (o.archs.empty())
    return keys::usageError("expected --arch sm_XY[,sm_XY...]");
  for (const std::string &arch : o.archs)
    if (llvm::Error e = codegen::checkTargetArch(arch))
      return keys::usageError("--arch: " + llvm::toString(std::move(e)));
  if (o.jobs > kMaxJobs)
    return keys::usageError(
        llvm::formatv("--jobs: expected at most {0}", kMaxJobs));
  if (o.everyConfig && !o.tuneDb.empty())
    return keys::usageError("--every-config builds every config: it takes no "
                            "--tune-db");
  if (!o.gpus.empty() && o.tuneDb.empty())
    return keys::usageError(
        "--gpu selects tune DB entries: it needs --tune-db");
  return llvm::Error::success();
}

int tools::prebuildCommand(const PrebuildOptions &o, llvm::raw_ostream &out,
                           llvm::raw_ostream &err) {
  if (llvm::Error e = checkPrebuildOptions(o))
    return report(err, "prebuild", std::move(e), kUsage);
  auto tasks = loadTasks(o);
  if (!tasks)
    return report(err, "prebuild", tasks.takeError(), kUsage);
  runtime::Compiler comp = runtime::defaultCompiler();
  PrebuildPlan p{o,  comp, comp.toolchainVersion(), nullptr, std::nullopt,
                 {}, {}};
  if (llvm::Error e = openTuneDb(p, err))
    return report(err, "prebuild", std::move(e), kUsage);
  planJobs(p, *tasks);
  if (std::error_code ec = llvm::sys::fs::create_directories(o.cacheDir))
    return report(err, "prebuild",
                  "cannot create '" + o.cacheDir + "': " + ec.message(),
                  kFailed);
  Progress progress{out, err, p.jobs.size()};
  runtime::CacheOptions co;
  co.dir = o.cacheDir;
  co.warn = [&progress](llvm::StringRef m) { progress.warn(m); };
  runtime::KernelCache cache(co);
  return runJobs(p, cache, progress, out, err);
}
