//===- tools/TuneCommand.cpp - `bitfold tune` -----------------------------===//
//
// Writes DIR/tune-db.json (merged into what is there) and DIR/cache/ (the
// runtime's disk-cache layout: point $BITFOLD_CACHE_DIR at it) with the
// cubins of each shape's winner and default config. With several devices,
// one worker process per GPU (this executable, re-run as
// `<self> tune ... --devices k --shard j`); their DB parts under
// DIR/parts/ are merged. Progress goes to stderr; the final table to `out`.
//
//===----------------------------------------------------------------------===//

#include "tools/Commands.h"
#include "tools/ShapeTasks.h"

#include "autotune/Search.h"
#include "autotune/ShapeClass.h"
#include "autotune/TuneDB.h"
#include "autotune/TuneShape.h"
#include "autotune/TuneTasks.h"
#include "keys/Errors.h"
#include "keys/TuneKey.h"

#include "fileio/File.h"

#include "cuda/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Runtime.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Program.h"

#include <chrono>
#include <cmath>

using namespace bitfold;
using namespace bitfold::autotune;
using namespace bitfold::tools;

namespace {

using Clock = std::chrono::steady_clock;

/// Budgets beyond a year are a typo, and would overflow the clock.
constexpr double kMaxBudgetS = 365.0 * 24 * 3600;

using Task = ShapeTask;

llvm::Expected<std::vector<int>> parseDevices(llvm::StringRef text) {
  std::vector<int> out;
  if (text == "all") {
    auto info = cuda::queryDriver();
    if (!info)
      return info.takeError();
    for (const cuda::DeviceInfo &d : info->devices)
      out.push_back(d.ordinal);
    if (out.empty())
      return keys::usageError("--devices all: no CUDA device");
    return out;
  }
  llvm::SmallVector<llvm::StringRef, 8> parts;
  llvm::SplitString(text, parts, ",");
  for (llvm::StringRef p : parts) {
    int d;
    if (p.trim().getAsInteger(10, d) || d < 0)
      return keys::usageError("--devices: bad device '" + p +
                              "' (expected all or 0,1)");
    out.push_back(d);
  }
  if (out.empty())
    return keys::usageError("--devices: none given");
  return out;
}

std::string fmtSeconds(double s) {
  if (s < 120)
    return llvm::formatv("{0:f0} s", s);
  return llvm::formatv("{0:f1} min", s / 60);
}

/// What every task of one device shares.
struct DeviceTuning {
  const TuneOptions &args;
  int device;
  TuneEnvironment env;
  runtime::Compiler comp;
  runtime::KernelCache cache;
  std::optional<Clock::time_point> deadline;
  // Progress, for the ETA.
  size_t shapesTotal = 0, shapesDone = 0;
  double secondsDone = 0;
};

runtime::CacheOptions cacheIn(const std::string &out) {
  runtime::CacheOptions o;
  o.dir = out + "/cache";
  return o;
}

SearchOptions searchOptions(DeviceTuning &d, const ReportRow &row,
                            size_t index, Clock::time_point shapeStart) {
  SearchOptions s;
  s.repetitions = int(d.args.repetitions);
  s.cutRatio = d.args.cutRatio;
  s.deadline = d.deadline;
  s.progress = [&d, label = row.label, index, shapeStart](
                   size_t done, size_t total, llvm::StringRef best,
                   double bestUs) {
    double el = std::chrono::duration<double>(Clock::now() - shapeStart).count();
    double perConfig = el / double(done);
    double perShape = d.shapesDone ? d.secondsDone / double(d.shapesDone)
                                   : perConfig * double(total);
    double eta = perConfig * double(total - done) +
                 perShape * double(d.shapesTotal - index - 1);
    llvm::errs() << llvm::formatv(
        "[dev {0}] shape {1}/{2} {3}: configs {4}/{5}, best {6}, ETA {7}\n",
        d.device, index + 1, d.shapesTotal, label, done, total,
        best.empty() ? std::string("-")
                     : llvm::formatv("{0} {1:f2} us", best, bestUs).str(),
        fmtSeconds(eta));
  };
  return s;
}

/// Fills the row from a finished tune; returns the row status.
std::string rowStatus(const ShapeTune &tune, ReportRow &row) {
  const TuneOutcome &o = tune.outcome;
  for (const Measurement &m : o.measurements)
    row.cut += m.cut ? 1 : 0;
  row.timed = o.measurements.size();
  if (const Measurement *w = o.winner()) {
    row.winner = w->config;
    row.winnerUs = w->medianUs;
  }
  if (const Measurement *m = o.find(o.defaultConfig))
    row.defaultUs = m->medianUs;
  for (auto &[c, e] : tune.failures)
    llvm::errs() << "bitfold tune: warning: " << row.label << ": config " << c
                 << " failed: " << e << "\n";
  std::string st = "ok";
  if (!tune.failures.empty())
    st += llvm::formatv(", {0} failed", tune.failures.size()).str();
  if (tune.skipped)
    st += llvm::formatv(", {0} skipped (budget)", tune.skipped).str();
  return st;
}

/// The tune of one task: its configs compiled through the disk cache with
/// the runtime's own key (each config is an entry a launch finds when it is
/// pinned or wins), timed on the device, recorded in `db`.
ShapeTuneRequest tuneRequest(DeviceTuning &d, const Task &t, size_t index,
                             const ReportRow &row, TuneDB &db,
                             const TuneKey &key) {
  const dsl::KernelDef &def = *t.problem.def;
  ShapeTuneRequest r;
  r.def = &def;
  r.spec = t.spec;
  r.defaultConfig = d.comp.defaultConfig(def, t.spec);
  r.compile = [&d, &t](const keys::TileConfig &c)
      -> llvm::Expected<codegen::CompiledKernel> {
    const dsl::KernelDef &def = *t.problem.def;
    keys::LaunchCompile lc = keys::launchCompile(
        def, t.cls, c, d.env.arch, /*pdl=*/false, d.env.toolchain);
    auto k = d.cache.getOrCompile(
        lc.key, [&] { return d.comp.compile(def, lc.shape, c, lc.options); });
    if (!k)
      return k.takeError();
    return **k;
  };
  r.makeRunner = [&d, &t]() -> llvm::Expected<std::unique_ptr<ConfigRunner>> {
    auto problem = templates::HostProblem::make(t.problem, /*seed=*/0);
    if (!problem)
      return problem.takeError();
    return makeGpuRunner(*t.problem.def, *problem, {d.device, d.args.timing});
  };
  r.search = searchOptions(d, row, index, Clock::now());
  r.db = &db;
  r.key = &key;
  return r;
}

/// Tunes one task; returns its exit status (exitCodeFor its error: 1, 2,
/// or 3 on a bit mismatch between configs, a codegen bug). Past the
/// budget a task still gets its default measured (tuneShape).
int tuneTask(DeviceTuning &d, const Task &t, size_t index, TuneDB &db,
             ReportRow &row) {
  auto fail = [&](const std::string &why, int code) {
    row.status = (code == kDiffer ? "BIT MISMATCH: " : "error: ") + why;
    llvm::errs() << "bitfold tune: " << row.status << " (" << row.label
                 << ")\n";
    return code;
  };
  if (!t.error.empty()) // one bad shape fails its row, not the whole run
    return fail(t.error, kFailed);
  const auto shapeStart = Clock::now();
  TuneKey key = keys::tuneKeyFor(*t.problem.def, t.shapeClass, d.env);
  auto tune = tuneShape(tuneRequest(d, t, index, row, db, key));
  row.seconds = std::chrono::duration<double>(Clock::now() - shapeStart).count();
  d.secondsDone += row.seconds;
  ++d.shapesDone;
  if (!tune) {
    std::string why;
    int code = exitCodeFor(tune.takeError(), why);
    return fail(why, code);
  }
  row.configs = tune->legalConfigs;
  row.defaultConfig = tune->outcome.defaultConfig;
  for (const std::string &r : tune->rejected)
    llvm::errs() << "bitfold tune: warning: " << row.label
                 << ": enumerated config " << r << " (not legal, skipped)\n";
  row.status = rowStatus(*tune, row);
  return kOk;
}

/// Tunes this shard's tasks on one device, in this process.
int tuneHere(const TuneOptions &args, const Shard &shard,
             const std::vector<Task> &all, int device, TuneDB &db,
             std::vector<ReportRow> &rows) {
  auto ident = gpuIdentity(device);
  if (!ident)
    return report(llvm::errs(), "tune", ident.takeError(), kFailed);
  runtime::Compiler comp = runtime::defaultCompiler();
  DeviceTuning d{args,
                 device,
                 keys::currentEnvironment(ident->first, ident->second,
                                    comp.toolchainVersion()),
                 comp,
                 runtime::KernelCache(cacheIn(args.out)),
                 std::nullopt};
  if (args.budgetS > 0)
    d.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(args.budgetS));
  std::vector<const Task *> mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (shard.owns(i))
      mine.push_back(&all[i]);
  d.shapesTotal = mine.size();
  int status = kOk;
  for (size_t n = 0; n < mine.size(); ++n) {
    ReportRow row;
    row.label = mine[n]->request.label();
    row.shapeClass = mine[n]->shapeClass;
    status = std::max(status, tuneTask(d, *mine[n], n, db, row));
    rows.push_back(std::move(row));
  }
  return status;
}

llvm::Error writeText(llvm::StringRef path, llvm::StringRef text) {
  return fileio::writeFileAtomically(path, text, "tune report");
}

struct Worker {
  llvm::sys::ProcessInfo pi;
  std::string db, report;
  int device;
};

llvm::Expected<Worker> startWorker(const TuneOptions &args, const Shard &sub,
                                   int device, const std::string &self) {
  std::string tag = llvm::formatv("{0}of{1}", sub.index, sub.count);
  std::string parts = args.out + "/parts";
  Worker w{{}, parts + "/db." + tag + ".json",
           parts + "/report." + tag + ".json", device};
  std::vector<std::string> wargs = {
      self, "tune", "--shapes", args.shapes, "--out", args.out,
      "--shard", sub.str(), "--devices", std::to_string(device),
      "--repetitions", std::to_string(args.repetitions),
      "--cut-ratio", llvm::formatv("{0}", args.cutRatio).str(),
      "--timing", args.timing == Timing::Steady ? "steady" : "flushed",
      "--worker-db", w.db, "--worker-report", w.report};
  for (const std::string &program : args.programs)
    wargs.insert(wargs.end(), {"--program", program});
  if (!args.templateFilter.empty())
    wargs.insert(wargs.end(),
                 {"--templates", llvm::join(args.templateFilter, ",")});
  if (args.budgetS > 0)
    wargs.insert(wargs.end(),
                 {"--budget-s", llvm::formatv("{0}", args.budgetS).str()});
  std::vector<llvm::StringRef> refs(wargs.begin(), wargs.end());
  std::string err;
  bool failed = false;
  w.pi = llvm::sys::ExecuteNoWait(self, refs, std::nullopt, {}, 0, &err,
                                  &failed);
  if (failed)
    return llvm::createStringError("cannot start the worker for device " +
                                   std::to_string(device) + ": " + err);
  llvm::errs() << "bitfold tune: worker for device " << device << " (shard "
               << sub.str() << "), pid " << w.pi.Pid << "\n";
  return w;
}

/// Waits for a worker and merges its DB part and report rows.
int collectWorker(Worker &w, TuneDB &db, std::vector<ReportRow> &rows) {
  int status = kOk;
  std::string err;
  llvm::sys::ProcessInfo done = llvm::sys::Wait(w.pi, std::nullopt, &err);
  if (done.ReturnCode != 0) {
    llvm::errs() << "bitfold tune: worker for device " << w.device
                 << " exited with " << done.ReturnCode
                 << (err.empty() ? "" : ": " + err) << "\n";
    status = done.ReturnCode < 0 ? kFailed : done.ReturnCode;
  }
  if (auto part = TuneDB::loadOrEmpty(w.db))
    db.merge(*part);
  else
    status = std::max(status, report(llvm::errs(), "tune", part.takeError(),
                                     kFailed));
  auto text =
      fileio::readBoundedFile(w.report, fileio::kMaxReportBytes, "tune report");
  if (!text) {
    // A worker that failed early writes no report; its status says so.
    llvm::consumeError(text.takeError());
    return status;
  }
  if (auto r = parseReportRowsJson(*text))
    rows.insert(rows.end(), r->begin(), r->end());
  else
    status = std::max(status, report(llvm::errs(), "tune", r.takeError(),
                                     kFailed));
  return status;
}

/// One worker process per device, each with a sub-shard; they share
/// DIR/cache (safe across processes).
int tuneOnWorkers(const TuneOptions &args, const Shard &shard,
                  llvm::ArrayRef<int> devices, TuneDB &db,
                  std::vector<ReportRow> &rows) {
  std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  if (self.empty())
    self = "/proc/self/exe";
  std::string parts = args.out + "/parts";
  if (std::error_code ec = llvm::sys::fs::create_directories(parts))
    return report(llvm::errs(), "tune",
                  "cannot create '" + parts + "': " + ec.message(), kFailed);
  std::vector<Worker> workers;
  for (unsigned j = 0; j < devices.size(); ++j) {
    auto w = startWorker(args, shard.split(j, unsigned(devices.size())),
                         devices[j], self);
    if (!w)
      return report(llvm::errs(), "tune", w.takeError(), kFailed);
    workers.push_back(std::move(*w));
  }
  int status = kOk;
  for (Worker &w : workers)
    status = std::max(status, collectWorker(w, db, rows));
  return status;
}

/// Merges the results into DIR/tune-db.json and prints the table.
int writeResults(const TuneOptions &args, const Shard &shard, TuneDB &db,
                 const std::vector<ReportRow> &rows, llvm::raw_ostream &out,
                 llvm::raw_ostream &err) {
  std::string dbPath = args.out + "/tune-db.json";
  auto existing = TuneDB::loadOrEmpty(dbPath);
  if (!existing)
    return report(err, "tune", existing.takeError(), kFailed);
  existing->merge(db);
  if (llvm::Error e = existing->save(dbPath))
    return report(err, "tune", std::move(e), kFailed);
  out << formatReportTable(rows);
  out << "tune DB: " << dbPath << " (" << existing->size()
      << " entries); cubins: " << args.out << "/cache\n";
  if (args.report.empty())
    return kOk;
  std::string title = "bitfold tune: " + args.shapes + " (shard " +
                      shard.str() + ", " +
                      (args.timing == Timing::Steady ? "steady" : "flushed") +
                      " timing)";
  if (llvm::Error e = writeText(args.report, formatReportMarkdown(rows, title)))
    return report(err, "tune", std::move(e), kFailed);
  return kOk;
}

} // namespace

llvm::Error tools::checkTuneOptions(const TuneOptions &o) {
  if (o.shapes.empty())
    return keys::usageError("expected --shapes FILE.json");
  if (o.out.empty())
    return keys::usageError("expected --out DIR");
  if (o.budgetS != 0 && !(o.budgetS > 0 && o.budgetS <= kMaxBudgetS))
    return keys::usageError(
        llvm::formatv("--budget-s: expected a number of seconds in "
                      "(0, {0}], found {1}",
                      kMaxBudgetS, o.budgetS));
  if (!(o.cutRatio >= 1 && o.cutRatio <= 1e6))
    return keys::usageError(
        llvm::formatv("--cut-ratio: expected a number in [1, 1e6], "
                      "found {0}",
                      o.cutRatio));
  if (o.repetitions < 20 || o.repetitions > 1000000)
    return keys::usageError(
        "--repetitions: expected an integer in [20, 1000000]");
  auto shard = Shard::parse(o.shard);
  if (!shard)
    return keys::usageError("--shard: " + llvm::toString(shard.takeError()));
  if (o.devices != "all") // "all" asks the driver, at run time
    if (auto d = parseDevices(o.devices); !d)
      return d.takeError();
  return llvm::Error::success();
}

int tools::tuneCommand(const TuneOptions &args, llvm::raw_ostream &out,
                       llvm::raw_ostream &err) {
  if (llvm::Error e = checkTuneOptions(args))
    return report(err, "tune", std::move(e));
  Shard shard = llvm::cantFail(Shard::parse(args.shard));
  auto requests = loadShapesFile(args.shapes);
  if (!requests)
    return report(err, "tune", requests.takeError(), kFailed);
  std::vector<Task> tasks = planShapeTasks(*requests, args.templateFilter);
  auto devices = parseDevices(args.devices);
  if (!devices)
    return report(err, "tune", devices.takeError(), kFailed);
  if (std::error_code ec = llvm::sys::fs::create_directories(args.out))
    return report(err, "tune",
                  "cannot create '" + args.out + "': " + ec.message(), kFailed);
  TuneDB db;
  std::vector<ReportRow> rows;
  int status = devices->size() == 1
                   ? tuneHere(args, shard, tasks, devices->front(), db, rows)
                   : tuneOnWorkers(args, shard, *devices, db, rows);
  if (!args.workerDb.empty()) {
    if (llvm::Error e = db.save(args.workerDb))
      return report(err, "tune", std::move(e), kFailed);
    if (llvm::Error e = writeText(args.workerReport, reportRowsJson(rows)))
      return report(err, "tune", std::move(e), kFailed);
    return status;
  }
  return std::max(status, writeResults(args, shard, db, rows, out, err));
}

int tools::tuneMergeCommand(const std::vector<std::string> &inputs,
                            const std::string &output, llvm::raw_ostream &out,
                            llvm::raw_ostream &err) {
  // Refuses a bad input and then writes nothing (TuneDB::mergeFiles).
  auto merged = TuneDB::mergeFiles(inputs, output);
  if (!merged)
    return report(err, "tune merge", merged.takeError(), kFailed);
  out << "merged " << inputs.size() << " DBs: " << merged->size()
      << " entries -> " << output << "\n";
  return kOk;
}
