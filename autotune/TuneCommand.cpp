//===- autotune/TuneCommand.cpp - `bitfold tune` --------------------------===//

#include "autotune/TuneCommand.h"

#include "autotune/GpuRunner.h"
#include "autotune/Search.h"
#include "autotune/ShapeClass.h"
#include "autotune/TuneDB.h"
#include "autotune/TuneTasks.h"

#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Runtime.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <chrono>
#include <set>

using namespace bitfold;
using namespace bitfold::autotune;

namespace {

using Clock = std::chrono::steady_clock;

const char *kUsage =
    "usage: bitfold tune --shapes FILE.json --out DIR [options]\n"
    "       bitfold tune merge A.json B.json ... -o OUT.json\n\n"
    "Times every legal tile config of each shape on the GPU, checks that all\n"
    "give identical bits, and writes DIR/tune-db.json (merged into what is\n"
    "there) and DIR/cache/ (cubins of the winners and defaults, the runtime's\n"
    "disk-cache layout: point BITFOLD_CACHE_DIR at it).\n\n"
    "  --shapes FILE      JSON list of {template, shape, params}\n"
    "  --out DIR          output directory\n"
    "  --templates a,b    only these templates\n"
    "  --shard i/n        only tasks i, i+n, i+2n, ...\n"
    "  --devices all|0,1  GPUs to use, one worker process each (default 0)\n"
    "  --budget-s N       stop starting configs after N seconds\n"
    "  --report FILE.md   also write the final table as markdown\n"
    "  --repetitions N    timed runs per config (>= 20, default 20)\n"
    "  --cut-ratio X      stop timing a config whose median exceeds X times\n"
    "                     the best (default 1.3)\n"
    "  --timing steady|flushed\n"
    "                     steady (default): launches back to back over\n"
    "                     rotating buffers, as in a pipeline; flushed: L2\n"
    "                     overwritten before each single launch\n";

int fail(const llvm::Twine &msg) {
  llvm::errs() << "bitfold tune: error: " << msg << "\n";
  return 1;
}

struct Args {
  std::string shapes, out, report;
  std::vector<std::string> templateFilter;
  Shard shard;
  std::string devices = "0";
  double budgetS = 0;
  int repetitions = 20;
  double cutRatio = 1.3;
  Timing timing = Timing::Steady;
  // Worker mode (set by the parent).
  std::string workerDb, workerReport;
};

llvm::Expected<Args> parseArgs(llvm::ArrayRef<std::string> a) {
  Args r;
  auto bad = [](const llvm::Twine &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  for (size_t i = 0; i < a.size(); ++i) {
    llvm::StringRef k = a[i];
    if (k != "--shapes" && k != "--out" && k != "--report" &&
        k != "--templates" && k != "--shard" && k != "--devices" &&
        k != "--budget-s" && k != "--repetitions" && k != "--cut-ratio" &&
        k != "--timing" &&
        k != "--worker-db" && k != "--worker-report")
      return bad("unexpected argument '" + k + "' (see --help)");
    if (i + 1 >= a.size())
      return bad(k + " needs a value");
    llvm::StringRef s = a[++i];
    if (k == "--shapes")
      r.shapes = s;
    else if (k == "--out")
      r.out = s;
    else if (k == "--report")
      r.report = s;
    else if (k == "--templates") {
      llvm::SmallVector<llvm::StringRef, 8> parts;
      llvm::SplitString(s, parts, ",");
      for (llvm::StringRef p : parts)
        r.templateFilter.push_back(p.trim().str());
    } else if (k == "--shard") {
      auto sh = Shard::parse(s);
      if (!sh)
        return sh.takeError();
      r.shard = *sh;
    } else if (k == "--devices")
      r.devices = s;
    else if (k == "--budget-s") {
      if (!llvm::to_float(s, r.budgetS) || r.budgetS <= 0)
        return bad("--budget-s needs a positive number of seconds");
    } else if (k == "--repetitions") {
      if (s.getAsInteger(10, r.repetitions) || r.repetitions < 20)
        return bad("--repetitions needs an integer >= 20");
    } else if (k == "--cut-ratio") {
      if (!llvm::to_float(s, r.cutRatio) || r.cutRatio < 1)
        return bad("--cut-ratio needs a number >= 1");
    } else if (k == "--timing") {
      if (s == "steady")
        r.timing = Timing::Steady;
      else if (s == "flushed")
        r.timing = Timing::Flushed;
      else
        return bad("--timing is steady or flushed, not '" + s + "'");
    } else if (k == "--worker-db")
      r.workerDb = s;
    else if (k == "--worker-report")
      r.workerReport = s;
  }
  if (r.shapes.empty())
    return bad("--shapes is required");
  if (r.out.empty())
    return bad("--out is required");
  return r;
}

/// One shape to tune, planned without a GPU.
struct Task {
  ShapeRequest request;
  std::shared_ptr<const dsl::KernelDef> def;
  templates::ProblemShape shape;
  codegen::ShapeSpec spec;
  std::string shapeClass;
  std::string error; ///< planning failed
};

std::vector<Task> planTasks(llvm::ArrayRef<ShapeRequest> requests,
                            llvm::ArrayRef<std::string> filter) {
  std::vector<Task> tasks;
  std::set<std::string> seen;
  for (const ShapeRequest &r : requests) {
    if (!filter.empty() &&
        std::find(filter.begin(), filter.end(), r.templateName) == filter.end())
      continue;
    Task t;
    t.request = r;
    auto fail = [&](llvm::Error e) {
      t.error = llvm::toString(std::move(e));
      tasks.push_back(std::move(t));
    };
    const templates::TemplateInfo *info =
        templates::findTemplate(r.templateName);
    if (!info) {
      fail(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown template '" + r.templateName +
                                       "'"));
      continue;
    }
    auto shape = templates::parseShape(r.templateName, r.shape);
    if (!shape) {
      fail(shape.takeError());
      continue;
    }
    auto targs = runtime::parseTemplateParams(r.templateName, r.paramsText());
    if (!targs) {
      fail(targs.takeError());
      continue;
    }
    targs->cols = shape->cols;
    auto def = info->build(*targs);
    if (!def) {
      fail(def.takeError());
      continue;
    }
    t.def = *def;
    t.shape = *shape;
    t.spec = denseShapeSpec(**def, *shape);
    t.shapeClass = shapeClass(t.spec.str(), shape->totalRows());
    // One tuning per (kernel, shape class): later shapes of a class reuse it.
    if (!seen.insert(t.def->hash + "\n" + t.shapeClass).second)
      continue;
    tasks.push_back(std::move(t));
  }
  return tasks;
}

llvm::Expected<std::vector<int>> parseDevices(llvm::StringRef text) {
  std::vector<int> out;
  if (text == "all") {
    auto info = runtime::queryDriver();
    if (!info)
      return info.takeError();
    for (const runtime::DeviceInfo &d : info->devices)
      out.push_back(d.ordinal);
    if (out.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--devices all: no CUDA device");
    return out;
  }
  llvm::SmallVector<llvm::StringRef, 8> parts;
  llvm::SplitString(text, parts, ",");
  for (llvm::StringRef p : parts) {
    int d;
    if (p.trim().getAsInteger(10, d) || d < 0)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "--devices: bad device '" + p + "'");
    out.push_back(d);
  }
  if (out.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--devices: none given");
  return out;
}

std::string fmtSeconds(double s) {
  if (s < 120)
    return llvm::formatv("{0:f0} s", s);
  return llvm::formatv("{0:f1} min", s / 60);
}

/// Tunes the tasks of `shard` on one device, in this process.
int tuneHere(const Args &args, std::vector<Task> &all, int device,
             TuneDB &db, std::vector<ReportRow> &rows) {
  auto ident = gpuIdentity(device);
  if (!ident)
    return fail(llvm::toString(ident.takeError()));
  runtime::Compiler comp = runtime::defaultCompiler();
  TuneEnvironment env =
      currentEnvironment(ident->first, ident->second, comp.toolchainVersion());
  runtime::CacheOptions cacheOpts;
  cacheOpts.dir = (llvm::Twine(args.out) + "/cache").str();
  runtime::KernelCache cache(cacheOpts);
  codegen::CompileOptions options;
  options.arch = env.arch;

  std::vector<Task *> mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (args.shard.owns(i))
      mine.push_back(&all[i]);

  auto begin = Clock::now();
  std::optional<Clock::time_point> deadline;
  if (args.budgetS > 0)
    deadline = begin + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(args.budgetS));
  int status = 0;
  double doneSeconds = 0;
  size_t doneShapes = 0;
  for (size_t n = 0; n < mine.size(); ++n) {
    Task &t = *mine[n];
    ReportRow row;
    row.label = t.request.label();
    row.shapeClass = t.shapeClass;
    auto finish = [&](llvm::StringRef statusText) {
      row.status = statusText.str();
      rows.push_back(row);
    };
    if (!t.error.empty()) {
      llvm::errs() << "bitfold tune: " << row.label << ": " << t.error << "\n";
      finish("error: " + t.error);
      status = std::max(status, 1);
      continue;
    }
    if (deadline && Clock::now() > *deadline) {
      finish("skipped: budget spent");
      continue;
    }
    // Configs: the default first (the bit-identity reference), each one
    // checked legal again.
    codegen::TileConfig dflt = codegen::defaultConfig(*t.def, t.spec);
    std::vector<codegen::TileConfig> configs{dflt};
    for (const codegen::TileConfig &c : codegen::enumerateConfigs(*t.def, t.spec))
      if (!(c == dflt))
        configs.push_back(c);
    std::vector<codegen::TileConfig> legal;
    for (const codegen::TileConfig &c : configs) {
      if (llvm::Error e = codegen::checkConfig(*t.def, t.spec, c))
        llvm::errs() << "bitfold tune: warning: " << row.label
                     << ": enumerated config " << c.str()
                     << " is not legal, skipped: "
                     << llvm::toString(std::move(e)) << "\n";
      else
        legal.push_back(c);
    }
    row.configs = legal.size();
    row.defaultConfig = dflt.str();
    if (legal.empty()) {
      finish("error: no legal config");
      status = std::max(status, 1);
      continue;
    }
    auto problem = templates::HostProblem::make(*t.def, t.shape, /*seed=*/0);
    if (!problem) {
      finish("error: " + llvm::toString(problem.takeError()));
      status = std::max(status, 1);
      continue;
    }
    GpuRunnerOptions ropts;
    ropts.device = device;
    ropts.timing = args.timing;
    auto runner = makeGpuRunner(*t.def, *problem, ropts);
    if (!runner) {
      finish("error: " + llvm::toString(runner.takeError()));
      status = std::max(status, 1);
      continue;
    }
    SearchOptions sopts;
    sopts.repetitions = args.repetitions;
    sopts.cutRatio = args.cutRatio;
    sopts.deadline = deadline;
    auto shapeStart = Clock::now();
    sopts.progress = [&](size_t done, size_t total, llvm::StringRef best,
                         double bestUs) {
      double el = std::chrono::duration<double>(Clock::now() - shapeStart)
                      .count();
      double perConfig = el / double(done);
      double shapeLeft = perConfig * double(total - done);
      size_t shapesLeft = mine.size() - n - 1;
      double perShape = doneShapes ? doneSeconds / double(doneShapes)
                                   : perConfig * double(total);
      double eta = shapeLeft + perShape * double(shapesLeft);
      llvm::errs() << llvm::formatv(
          "[dev {0}] shape {1}/{2} {3}: configs {4}/{5}, best {6}, ETA {7}\n",
          device, n + 1, mine.size(), row.label, done, total,
          best.empty() ? std::string("-")
                       : llvm::formatv("{0} {1:f2} us", best, bestUs).str(),
          fmtSeconds(eta));
    };
    const dsl::KernelDef &def = *t.def;
    const codegen::ShapeSpec spec = t.spec;
    std::string toolchain = env.toolchain;
    // Compiles go through the disk cache: each config is also an entry
    // the runtime can load when it is pinned or wins.
    CompileConfigFn compile =
        [&](const codegen::TileConfig &c)
        -> llvm::Expected<codegen::CompiledKernel> {
      // The runtime's own key function: a launch finds exactly this entry.
      runtime::CacheKey ck =
          runtime::makeCacheKey(def, spec.str(), c.str(), options, toolchain);
      auto k = cache.getOrCompile(
          ck, [&] { return comp.compile(def, spec, c, options); });
      if (!k)
        return k.takeError();
      return **k;
    };
    auto result = searchConfigs(legal, compile, **runner, sopts);
    row.seconds =
        std::chrono::duration<double>(Clock::now() - shapeStart).count();
    doneSeconds += row.seconds;
    ++doneShapes;
    if (!result) {
      std::string why = llvm::toString(result.takeError());
      bool bits = llvm::StringRef(why).contains("different output bytes");
      llvm::errs() << "bitfold tune: " << (bits ? "BIT MISMATCH: " : "error: ")
                   << row.label << " (" << t.shapeClass << "): " << why
                   << "\n";
      finish((bits ? "BIT MISMATCH: " : "error: ") + why);
      status = std::max(status, bits ? 2 : 1);
      continue;
    }
    TuneKey key = tuneKeyFor(def, spec.str(), t.shape.totalRows(), env);
    db.record(key, dflt.str(), result->measurements);
    for (const Measurement &m : result->measurements)
      row.cut += m.cut ? 1 : 0;
    row.timed = result->measurements.size();
    if (const Measurement *w = result->winner()) {
      row.winner = w->config;
      row.winnerUs = w->medianUs;
    }
    if (const Measurement *d = result->find(dflt.str()))
      row.defaultUs = d->medianUs;
    for (auto &[c, e] : result->failures)
      llvm::errs() << "bitfold tune: warning: " << row.label << ": config "
                   << c << " failed: " << e << "\n";
    std::string st = "ok";
    if (!result->failures.empty())
      st += llvm::formatv(", {0} failed", result->failures.size()).str();
    if (result->skipped)
      st += llvm::formatv(", {0} skipped (budget)", result->skipped).str();
    finish(st);
  }
  return status;
}

int mergeCommand(llvm::ArrayRef<std::string> a, llvm::raw_ostream &out) {
  std::vector<std::string> inputs;
  std::string output;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == "-o" || a[i] == "--out") {
      if (i + 1 >= a.size())
        return fail("merge: -o needs a file");
      output = a[++i];
    } else {
      inputs.push_back(a[i]);
    }
  }
  if (output.empty() || inputs.empty())
    return fail("usage: bitfold tune merge A.json B.json ... -o OUT.json");
  auto merged = TuneDB::mergeFiles(inputs, output);
  if (!merged)
    return fail(llvm::toString(merged.takeError()));
  out << "merged " << inputs.size() << " DBs: " << merged->size()
      << " entries -> " << output << "\n";
  return 0;
}

llvm::Error writeText(llvm::StringRef path, llvm::StringRef text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return llvm::createStringError(ec, "cannot write '" + path +
                                           "': " + ec.message());
  os << text;
  return llvm::Error::success();
}

} // namespace

int autotune::runTuneCommand(llvm::ArrayRef<std::string> argv,
                             llvm::raw_ostream &out) {
  for (const std::string &a : argv)
    if (a == "--help" || a == "-h") {
      out << kUsage;
      return 0;
    }
  if (!argv.empty() && argv[0] == "merge")
    return mergeCommand(argv.drop_front(), out);
  auto args = parseArgs(argv);
  if (!args)
    return fail(llvm::toString(args.takeError()) + "\n" + kUsage);
  auto requests = loadShapesFile(args->shapes);
  if (!requests)
    return fail(llvm::toString(requests.takeError()));
  std::vector<Task> tasks = planTasks(*requests, args->templateFilter);
  auto devices = parseDevices(args->devices);
  if (!devices)
    return fail(llvm::toString(devices.takeError()));
  if (std::error_code ec = llvm::sys::fs::create_directories(args->out))
    return fail("cannot create '" + args->out + "': " + ec.message());

  const bool worker = !args->workerDb.empty();
  TuneDB db;
  std::vector<ReportRow> rows;
  int status = 0;
  if (devices->size() == 1) {
    status = tuneHere(*args, tasks, devices->front(), db, rows);
  } else {
    // One worker per GPU: this executable again, with one device and a
    // sub-shard each; they share DIR/cache (safe across processes).
    std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
    if (self.empty())
      self = "/proc/self/exe";
    std::string parts = args->out + "/parts";
    if (std::error_code ec = llvm::sys::fs::create_directories(parts))
      return fail("cannot create '" + parts + "': " + ec.message());
    struct Worker {
      llvm::sys::ProcessInfo pi;
      std::string db, report;
      int device;
    };
    std::vector<Worker> workers;
    for (unsigned j = 0; j < devices->size(); ++j) {
      Shard sub = args->shard.split(j, unsigned(devices->size()));
      std::string tag = llvm::formatv("{0}of{1}", sub.index, sub.count);
      Worker w{{}, parts + "/db." + tag + ".json",
               parts + "/report." + tag + ".json", (*devices)[j]};
      std::vector<std::string> wargs = {
          self, "tune", "--shapes", args->shapes, "--out", args->out,
          "--shard", sub.str(), "--devices", std::to_string(w.device),
          "--repetitions", std::to_string(args->repetitions),
          "--cut-ratio", llvm::formatv("{0}", args->cutRatio).str(),
          "--timing", args->timing == Timing::Steady ? "steady" : "flushed",
          "--worker-db", w.db, "--worker-report", w.report};
      if (!args->templateFilter.empty())
        wargs.insert(wargs.end(),
                     {"--templates", llvm::join(args->templateFilter, ",")});
      if (args->budgetS > 0)
        wargs.insert(wargs.end(),
                     {"--budget-s", llvm::formatv("{0}", args->budgetS).str()});
      std::vector<llvm::StringRef> refs(wargs.begin(), wargs.end());
      std::string err;
      bool failed = false;
      w.pi = llvm::sys::ExecuteNoWait(self, refs, std::nullopt, {}, 0, &err,
                                      &failed);
      if (failed)
        return fail("cannot start the worker for device " +
                    std::to_string(w.device) + ": " + err);
      llvm::errs() << "bitfold tune: worker for device " << w.device
                   << " (shard " << sub.str() << "), pid " << w.pi.Pid << "\n";
      workers.push_back(std::move(w));
    }
    for (Worker &w : workers) {
      std::string err;
      llvm::sys::ProcessInfo done =
          llvm::sys::Wait(w.pi, std::nullopt, &err);
      if (done.ReturnCode != 0) {
        llvm::errs() << "bitfold tune: worker for device " << w.device
                     << " exited with " << done.ReturnCode
                     << (err.empty() ? "" : ": " + err) << "\n";
        status = std::max(status, done.ReturnCode < 0 ? 1 : done.ReturnCode);
      }
      if (auto part = TuneDB::loadOrEmpty(w.db))
        db.merge(*part);
      else
        status = std::max(status, fail(llvm::toString(part.takeError())));
      if (auto buf = llvm::MemoryBuffer::getFile(w.report, true)) {
        if (auto r = parseReportRowsJson((*buf)->getBuffer()))
          rows.insert(rows.end(), r->begin(), r->end());
        else
          status = std::max(status, fail(llvm::toString(r.takeError())));
      }
    }
  }

  if (worker) {
    if (llvm::Error e = db.save(args->workerDb))
      return fail(llvm::toString(std::move(e)));
    if (llvm::Error e = writeText(args->workerReport, reportRowsJson(rows)))
      return fail(llvm::toString(std::move(e)));
    return status;
  }
  std::string dbPath = args->out + "/tune-db.json";
  auto existing = TuneDB::loadOrEmpty(dbPath);
  if (!existing)
    return fail(llvm::toString(existing.takeError()));
  existing->merge(db);
  if (llvm::Error e = existing->save(dbPath))
    return fail(llvm::toString(std::move(e)));
  out << formatReportTable(rows);
  out << "tune DB: " << dbPath << " (" << existing->size()
      << " entries); cubins: " << args->out << "/cache\n";
  if (!args->report.empty())
    if (llvm::Error e = writeText(
            args->report,
            formatReportMarkdown(rows, "bitfold tune: " + args->shapes +
                                           " (shard " + args->shard.str() +
                                           ", " +
                                           (args->timing == Timing::Steady
                                                ? "steady"
                                                : "flushed") +
                                           " timing)")))
      return fail(llvm::toString(std::move(e)));
  return status;
}
