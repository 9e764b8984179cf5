//===- runtime/Commands.cpp - `bitfold run` and `bitfold cache` -----------===//

#include "runtime/Commands.h"

#include "runtime/CApiInternal.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Runtime.h"
#include "runtime/bitfold.h"

#include "dsl/Interp.h"
#include "templates/Problem.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <random>

using namespace bitfold;
using namespace bitfold::runtime;

// ---- bitfold cache ---------------------------------------------------------

namespace {

struct EntryFile {
  std::string path;
  std::string hash; ///< from the file name
  uint64_t bytes = 0;
  std::string problem; ///< empty: valid
  nlohmann::json meta;
};

/// Every entry of the cache layout under dir (listCacheDir), with its
/// metadata parsed; plus counts of temp and lock files and the problems
/// that make the listing incomplete (unreadable folders).
std::vector<EntryFile> scanCache(const std::string &dir, int *tmpFiles,
                                 int *lockFiles,
                                 std::vector<std::string> *problems = nullptr) {
  CacheListing listing = listCacheDir(dir);
  *tmpFiles = listing.tmpFiles;
  *lockFiles = listing.lockFiles;
  if (problems)
    *problems = listing.problems;
  std::vector<EntryFile> entries;
  for (CacheFileInfo &f : listing.entries)
    entries.push_back({f.path, f.hash, f.bytes, f.problem,
                       nlohmann::json::parse(f.metaJson, nullptr, false)});
  std::sort(entries.begin(), entries.end(),
            [](const EntryFile &a, const EntryFile &b) {
              std::string ka = a.meta.is_object() ? a.meta.value("kernel", "") : "";
              std::string kb = b.meta.is_object() ? b.meta.value("kernel", "") : "";
              return std::tie(ka, a.path) < std::tie(kb, b.path);
            });
  return entries;
}

std::string field(const nlohmann::json &m, const char *k) {
  if (!m.is_object())
    return "?";
  auto it = m.find(k);
  return it != m.end() && it->is_string() ? it->get<std::string>() : "?";
}

std::string humanBytes(uint64_t b) {
  if (b >= (uint64_t(1) << 20))
    return llvm::formatv("{0:f1} MiB", double(b) / (1 << 20));
  if (b >= 1024)
    return llvm::formatv("{0:f1} KiB", double(b) / 1024);
  return llvm::formatv("{0} B", b);
}

std::string age(const nlohmann::json &m) {
  if (!m.is_object() || !m.contains("createdAt"))
    return "?";
  int64_t s = int64_t(std::time(nullptr)) - m["createdAt"].get<int64_t>();
  if (s < 120)
    return llvm::formatv("{0}s", s);
  if (s < 7200)
    return llvm::formatv("{0}m", s / 60);
  if (s < 172800)
    return llvm::formatv("{0}h", s / 3600);
  return llvm::formatv("{0}d", s / 86400);
}

const char *kCacheUsage =
    "usage: bitfold cache ls|stats|verify|clear [--dir DIR] [--delete-bad]\n";

} // namespace

int bitfold::runtime::runCacheCommand(llvm::ArrayRef<std::string> args,
                                      llvm::raw_ostream &out) {
  return runCacheCommand(args, out, llvm::errs());
}

int bitfold::runtime::runCacheCommand(llvm::ArrayRef<std::string> args,
                                      llvm::raw_ostream &out,
                                      llvm::raw_ostream &err) {
  std::string sub, dir;
  bool deleteBad = false;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef a = args[i];
    if (a == "--dir" && i + 1 < args.size())
      dir = args[++i];
    else if (a.starts_with("--dir="))
      dir = a.drop_front(6).str();
    else if (a == "--delete-bad")
      deleteBad = true;
    else if (a == "-h" || a == "--help") {
      out << kCacheUsage;
      return 0;
    } else if (sub.empty() && !a.starts_with("-"))
      sub = a.str();
    else {
      err << "bitfold cache: unexpected argument '" << a << "'\n" << kCacheUsage;
      return 2;
    }
  }
  if (dir.empty())
    dir = defaultCacheDir();
  if (sub != "ls" && sub != "stats" && sub != "verify" && sub != "clear") {
    err << (sub.empty() ? "bitfold cache: missing subcommand\n"
                        : "bitfold cache: unknown subcommand '" + sub + "'\n")
        << kCacheUsage;
    return 2;
  }
  if (!llvm::sys::fs::is_directory(dir)) {
    out << "cache directory " << dir << " does not exist (empty cache)\n";
    return 0;
  }
  int tmpFiles = 0, lockFiles = 0;
  std::vector<std::string> problems;
  std::vector<EntryFile> entries =
      scanCache(dir, &tmpFiles, &lockFiles, &problems);

  if (sub == "ls") {
    out << llvm::formatv("{0,-16}  {1,-22} {2,-30} {3,-16} {4,-7} {5,10} {6,5}\n",
                         "key", "kernel", "shape", "config", "arch", "size",
                         "age");
    for (const EntryFile &e : entries) {
      if (!e.problem.empty()) {
        out << llvm::formatv("{0,-16}  INVALID: {1}\n",
                             llvm::StringRef(e.hash).take_front(16), e.problem);
        continue;
      }
      out << llvm::formatv("{0,-16}  {1,-22} {2,-30} {3,-16} {4,-7} {5,10} {6,5}\n",
                           llvm::StringRef(e.hash).take_front(16),
                           field(e.meta, "kernel"), field(e.meta, "shape"),
                           field(e.meta, "configText"), field(e.meta, "arch"),
                           humanBytes(e.bytes), age(e.meta));
    }
    out << entries.size() << " entries in " << dir << "\n";
    return 0;
  }

  if (sub == "stats") {
    uint64_t total = 0;
    int bad = 0;
    std::map<std::string, std::pair<int, uint64_t>> perKernel;
    for (const EntryFile &e : entries) {
      total += e.bytes;
      if (!e.problem.empty()) {
        ++bad;
        continue;
      }
      auto &pk = perKernel[field(e.meta, "kernel")];
      ++pk.first;
      pk.second += e.bytes;
    }
    out << "directory: " << dir << "\n"
        << "entries:   " << entries.size() << " (" << humanBytes(total) << ")\n"
        << "invalid:   " << bad << "\n"
        << "temp files: " << tmpFiles << ", lock files: " << lockFiles << "\n";
    for (const auto &[kernel, cb] : perKernel)
      out << llvm::formatv("  {0,-24} {1,5} entries {2,10}\n", kernel, cb.first,
                           humanBytes(cb.second));
    return 0;
  }

  if (sub == "verify") {
    int bad = 0;
    for (const std::string &p : problems)
      out << "BAD " << p << "\n";
    for (const EntryFile &e : entries) {
      if (e.problem.empty())
        continue;
      ++bad;
      out << "BAD " << e.path << ": " << e.problem << "\n";
      if (deleteBad) {
        std::error_code ec = llvm::sys::fs::remove(e.path);
        out << (ec ? "  could not delete: " + ec.message() : "  deleted")
            << "\n";
      }
    }
    out << entries.size() - bad << " of " << entries.size()
        << " entries valid in " << dir << "\n";
    return (bad && !deleteBad) || !problems.empty() ? 1 : 0;
  }

  // clear: only the cache's own files (clearCacheDir), never a symlink.
  auto cleared = clearCacheDir(dir);
  if (!cleared) {
    err << "bitfold cache clear: " << llvm::toString(cleared.takeError())
        << "\n";
    return 1;
  }
  out << "removed " << cleared->filesRemoved << " files ("
      << humanBytes(cleared->bytesRemoved) << ") from " << dir << "\n";
  return 0;
}

// ---- bitfold run -----------------------------------------------------------

namespace {

/// The interpreter's approximations moved by `ulps` (towards +inf when
/// positive): bounds what the hardware's rsqrt.approx & co may give.
class ShiftedApprox final : public dsl::ApproxUnit {
public:
  explicit ShiftedApprox(int ulps) : ulps(ulps) {}
  float rcpApproxFtz(float x) const override {
    return shift(dsl::correctlyRoundedApprox().rcpApproxFtz(x));
  }
  float rsqrtApproxFtz(float x) const override {
    return shift(dsl::correctlyRoundedApprox().rsqrtApproxFtz(x));
  }
  float ex2ApproxFtz(float x) const override {
    return shift(dsl::correctlyRoundedApprox().ex2ApproxFtz(x));
  }

private:
  float shift(float v) const {
    if (!std::isfinite(v) || v == 0.0f)
      return v;
    for (int i = 0; i < std::abs(ulps); ++i)
      v = std::nextafter(v, ulps > 0 ? INFINITY : -INFINITY);
    return v;
  }
  int ulps;
};

bool usesApprox(const dsl::KernelDef &def) {
  bool found = false;
  dsl::forEachNode(def, [&](const dsl::ExprNode &n) {
    found |= n.op == dsl::Op::RcpApproxFtz || n.op == dsl::Op::RsqrtApproxFtz ||
             n.op == dsl::Op::Ex2ApproxFtz || n.op == dsl::Op::ExpLibdevice;
  });
  return found;
}

struct HostTensorData {
  std::vector<int64_t> shape, strides;
  std::vector<char> bytes;
  DeviceBuffer device;
  DLTensor dl{};
  int64_t rows = 0, rowStride = 0;
};

const char *kRunUsage =
    "usage: bitfold run TEMPLATE --shape DIMS [--params P] [--config C]\n"
    "                   [--seed N] [--iters N] [--scalar NAME=VALUE]...\n"
    "                   [--device N] [--tune-db FILE]\n"
    "  DIMS: B,S,D (or rows,D, or any ...,D) for row-major templates;\n"
    "        N,C,H,W or N,C,D,H,W for channels-last ones (columns = C)\n"
    "  --tune-db FILE: pick the config from this tune DB (default:\n"
    "        $BITFOLD_TUNE_DB); --config pins one instead\n";

int fail(llvm::raw_ostream &err, const llvm::Twine &msg) {
  err << "bitfold run: " << msg << "\n";
  return 1;
}

} // namespace

int bitfold::runtime::runRunCommand(llvm::ArrayRef<std::string> args,
                                    llvm::raw_ostream &out) {
  return runRunCommand(args, out, llvm::errs());
}

int bitfold::runtime::runRunCommand(llvm::ArrayRef<std::string> args,
                                    llvm::raw_ostream &out,
                                    llvm::raw_ostream &err) {
  std::string name, shapeText, params, config, tuneDb;
  bool tuneDbGiven = false;
  uint64_t seed = 1;
  int iters = 20, device = 0;
  std::map<std::string, float> scalarOverrides;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef a = args[i];
    auto value = [&](llvm::StringRef flag, std::string &v) {
      if (a == flag && i + 1 < args.size()) {
        v = args[++i];
        return true;
      }
      if (a.starts_with(flag) && a.drop_front(flag.size()).starts_with("=")) {
        v = a.drop_front(flag.size() + 1).str();
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      out << kRunUsage;
      return 0;
    } else if (value("--shape", v)) {
      shapeText = v;
    } else if (value("--params", v)) {
      params = v;
    } else if (value("--config", v)) {
      config = v;
    } else if (value("--tune-db", v)) {
      tuneDb = v;
      tuneDbGiven = true;
    } else if (value("--seed", v)) {
      if (llvm::StringRef(v).getAsInteger(10, seed))
        return err << "bitfold run: bad --seed '" << v << "'\n", 2;
    } else if (value("--iters", v)) {
      if (llvm::StringRef(v).getAsInteger(10, iters) || iters < 0)
        return err << "bitfold run: bad --iters '" << v << "'\n", 2;
    } else if (value("--device", v)) {
      if (llvm::StringRef(v).getAsInteger(10, device) || device < 0)
        return err << "bitfold run: bad --device '" << v << "'\n", 2;
    } else if (value("--scalar", v)) {
      auto [k, val] = llvm::StringRef(v).split('=');
      double d = 0;
      if (k.empty() || val.getAsDouble(d))
        return err << "bitfold run: bad --scalar '" << v
                   << "' (NAME=VALUE)\n", 2;
      scalarOverrides[k.str()] = float(d);
    } else if (name.empty() && !a.starts_with("-")) {
      name = a.str();
    } else {
      err << "bitfold run: unexpected argument '" << a << "'\n" << kRunUsage;
      return 2;
    }
  }
  if (name.empty() || shapeText.empty()) {
    err << kRunUsage;
    return 2;
  }
  std::vector<int64_t> dims;
  {
    llvm::SmallVector<llvm::StringRef, 6> parts;
    llvm::StringRef(shapeText).split(parts, ',');
    for (llvm::StringRef p : parts) {
      int64_t d = 0;
      if (p.trim().getAsInteger(10, d) || d < 0)
        return err << "bitfold run: bad --shape '" << shapeText << "'\n", 2;
      dims.push_back(d);
    }
  }

  // The runtime, through the public C API.
  bitfold_runtime_options rtOptions;
  bitfold_runtime_options_init(&rtOptions);
  if (tuneDbGiven)
    rtOptions.tune_db = tuneDb.c_str();
  else if (const char *env = std::getenv("BITFOLD_TUNE_DB"))
    tuneDb = env;
  bitfold_runtime *rtHandle = nullptr;
  if (bitfold_runtime_create(&rtOptions, &rtHandle) != BITFOLD_SUCCESS)
    return fail(err, bitfold_last_error());
  std::unique_ptr<bitfold_runtime, void (*)(bitfold_runtime *)> rtOwner(
      rtHandle, bitfold_runtime_destroy);
  bitfold_kernel *k = nullptr;
  if (bitfold_template(rtHandle, name.c_str(), params.c_str(), &k) !=
      BITFOLD_SUCCESS)
    return fail(err, bitfold_last_error());
  if (!config.empty() &&
      bitfold_kernel_set_config(k, config.c_str()) != BITFOLD_SUCCESS)
    return fail(err, bitfold_last_error());
  Kernel *kernel = unwrapKernel(k);

  // Shape -> rows, cols, batches, by the templates' own rule.
  llvm::Expected<templates::ProblemShape> problem =
      templates::shapeFromDims(name, dims);
  if (!problem)
    return fail(err, llvm::toString(problem.takeError()));
  const int64_t cols = problem->cols;
  const int64_t rows = problem->groupRows.front(); // per group
  const int64_t batches = rows / problem->rowsPerBatch;
  auto defOr = kernel->defFor(cols);
  if (!defOr)
    return fail(err, llvm::toString(defOr.takeError()));
  const dsl::KernelDef &def = **defOr;
  const int64_t S = problem->rowsPerBatch;

  auto ctx = ScopedContext::forDevice(device);
  if (!ctx)
    return fail(err, "no GPU to run on: " + llvm::toString(ctx.takeError()));
  auto info = queryDriver();
  if (info && size_t(device) < info->devices.size())
    out << llvm::formatv("device cuda:{0} {1} ({2}), driver {3}\n", device,
                         info->devices[device].name,
                         info->devices[device].arch(), info->versionString());
  else if (!info)
    llvm::consumeError(info.takeError());

  // Tensors: per group, per operand; inputs random, outputs poisoned.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int nOps = int(def.operands.size());
  std::vector<std::unique_ptr<HostTensorData>> tensors;
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < nOps; ++i) {
      const dsl::OperandDecl &op = def.operands[i];
      auto t = std::make_unique<HostTensorData>();
      if (op.map == dsl::IndexMap::PerColumn) {
        t->shape = {cols};
        t->rows = 1;
      } else if (op.map == dsl::IndexMap::PerBatch) {
        t->shape = {batches, cols};
        t->rows = batches;
      } else {
        t->shape = dims;
        t->rows = rows;
      }
      t->rowStride = cols;
      if (op.map == dsl::IndexMap::PerElement &&
          op.layout == dsl::Layout::ChannelsLast) {
        int n = int(dims.size());
        t->strides.assign(n, 0);
        t->strides[1] = 1;
        int64_t acc = cols;
        for (int d = n - 1; d >= 2; --d) {
          t->strides[d] = acc;
          acc *= dims[d];
        }
        t->strides[0] = acc;
      }
      const unsigned eb = dsl::dtypeBytes(op.dtype);
      const size_t count = size_t(t->rows) * size_t(cols);
      t->bytes.assign(count * eb, char(0xFF));
      if (!op.isOutput)
        for (size_t e = 0; e < count; ++e) {
          float v = normal(rng);
          if (dsl::roundTo(op.dtype, v) == 0.0f)
            v = 1.0f; // never zero
          if (op.dtype == dsl::DType::F32) {
            std::memcpy(&t->bytes[e * 4], &v, 4);
          } else {
            uint16_t h = op.dtype == dsl::DType::BF16 ? dsl::floatToBf16Bits(v)
                                                      : dsl::floatToHalfBits(v);
            std::memcpy(&t->bytes[e * 2], &h, 2);
          }
        }
      auto buf = DeviceBuffer::allocate(std::max<size_t>(t->bytes.size(), 16));
      if (!buf)
        return fail(err, llvm::toString(buf.takeError()));
      t->device = std::move(*buf);
      if (llvm::Error e = t->device.copyFromHost(t->bytes.data(),
                                                 t->bytes.size()))
        return fail(err, llvm::toString(std::move(e)));
      t->dl.data = t->device.data();
      t->dl.device = {kDLCUDA, device};
      t->dl.ndim = int(t->shape.size());
      t->dl.dtype = toDLDataType(op.dtype);
      t->dl.shape = t->shape.data();
      t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
      tensors.push_back(std::move(t));
    }
  std::vector<float> scalars;
  for (const dsl::ScalarDecl &s : def.scalars) {
    float v = s.name == "eps"     ? 1e-6f
              : s.name == "scale" ? float(std::sqrt(double(cols)))
                                  : 1.0f;
    if (auto it = scalarOverrides.find(s.name); it != scalarOverrides.end())
      v = it->second;
    scalars.push_back(v);
  }
  std::vector<const DLTensor *> dl;
  for (auto &t : tensors)
    dl.push_back(&t->dl);

  out << llvm::formatv("{0} {1}: shape ({2}), rows {3}, cols {4}{5}, seed {6}\n",
                       name, params.empty() ? "(defaults)" : params,
                       shapeText, rows, cols,
                       def.dims.empty() ? std::string()
                                        : llvm::formatv(", S {0}", S).str(),
                       seed);

  // One launch, checked against the interpreter.
  const DriverApi &api = *driver();
  const auto firstStart = std::chrono::steady_clock::now();
  if (bitfold_launch(k, dl.data(), int(dl.size()), scalars.data(),
                     int(scalars.size()), nullptr) != BITFOLD_SUCCESS)
    return fail(err, bitfold_last_error());
  const double firstMs = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - firstStart)
                             .count();
  if (llvm::Error e = checkCuda(api.cuCtxSynchronize(), "after the launch"))
    return fail(err, llvm::toString(std::move(e)));
  // Provenance of the first launch: which config and why, and whether the
  // kernel was compiled or found (so a log shows when nothing compiled).
  Kernel::LastLaunch spec = kernel->lastSpecialisation();
  out << "config " << spec.config << " (" << spec.configFrom;
  if (!spec.shapeClass.empty())
    out << ", class " << spec.shapeClass;
  out << "), " << spec.blockX << " threads per CTA\n";
  if (!tuneDb.empty())
    out << "tune DB " << tuneDb << "\n";
  bitfold_cache_stats stats{};
  bitfold_runtime_cache_stats(rtHandle, &stats);
  out << llvm::formatv("first launch: {0}; {1:f1} ms host time (config + "
                       "cache {2:f1} ms, module load {3:f1} ms); kernel "
                       "cache: {4} compiled, {5} disk hits, {6} memory hits\n",
                       spec.origin.describe(), firstMs, spec.specialiseMs,
                       spec.moduleLoadMs, stats.compiles, stats.disk_hits,
                       stats.memory_hits);

  auto interpretWith = [&](const dsl::ApproxUnit &approx)
      -> llvm::Expected<std::vector<std::vector<char>>> {
    std::vector<std::vector<char>> hostCopies; // per tensor
    dsl::Binding b;
    b.cols = cols;
    b.dims.assign(def.dims.size(), S);
    b.scalars = scalars;
    b.tensors.resize(def.groups);
    for (int g = 0; g < def.groups; ++g)
      b.groupRows.push_back(rows);
    hostCopies.reserve(tensors.size());
    for (size_t t = 0; t < tensors.size(); ++t)
      hostCopies.push_back(tensors[t]->bytes);
    for (int g = 0; g < def.groups; ++g)
      for (int i = 0; i < nOps; ++i) {
        size_t t = size_t(g * nOps + i);
        dsl::HostTensor h;
        h.dtype = def.operands[i].dtype;
        h.data = hostCopies[t].data();
        h.rows = tensors[t]->rows;
        h.rowStride = tensors[t]->rowStride;
        b.tensors[g].push_back(h);
      }
    if (llvm::Error e = dsl::interpret(def, b, approx))
      return std::move(e);
    return hostCopies;
  };
  auto expected = interpretWith(dsl::correctlyRoundedApprox());
  if (!expected)
    return fail(err, "interpreter: " + llvm::toString(expected.takeError()));

  bool approx = usesApprox(def);
  std::vector<std::vector<std::vector<char>>> shifted; // lazily computed
  int64_t realDiffs = 0;
  for (int g = 0; g < def.groups; ++g)
    for (int i = 0; i < nOps; ++i) {
      const dsl::OperandDecl &op = def.operands[i];
      if (!op.isOutput)
        continue;
      size_t t = size_t(g * nOps + i);
      std::vector<char> got(tensors[t]->bytes.size());
      if (llvm::Error e = tensors[t]->device.copyToHost(got.data(), got.size()))
        return fail(err, llvm::toString(std::move(e)));
      const unsigned eb = dsl::dtypeBytes(op.dtype);
      const std::vector<char> &want = (*expected)[t];
      int64_t diffs = 0, approxDiffs = 0, first = -1, firstReal = -1;
      const int64_t count = int64_t(got.size() / eb);
      for (int64_t e = 0; e < count; ++e) {
        if (std::memcmp(&got[e * eb], &want[e * eb], eb) == 0)
          continue;
        ++diffs;
        if (first < 0)
          first = e;
        bool explained = false;
        if (approx) {
          if (shifted.empty())
            for (int u : {-2, -1, 1, 2}) {
              auto s = interpretWith(ShiftedApprox(u));
              if (!s)
                return fail(err, llvm::toString(s.takeError()));
              shifted.push_back(std::move(*s));
            }
          for (const auto &s : shifted)
            explained |= std::memcmp(&got[e * eb], &s[t][e * eb], eb) == 0;
        }
        if (explained)
          ++approxDiffs;
        else if (firstReal < 0)
          firstReal = e;
      }
      auto describe = [&](int64_t e) {
        uint32_t gb = 0, wb = 0;
        std::memcpy(&gb, &got[e * eb], eb);
        std::memcpy(&wb, &want[e * eb], eb);
        auto asFloat = [&](uint32_t bits) {
          if (op.dtype == dsl::DType::F32) {
            float f;
            std::memcpy(&f, &bits, 4);
            return f;
          }
          return op.dtype == dsl::DType::BF16 ? dsl::bf16BitsToFloat(uint16_t(bits))
                                              : dsl::halfBitsToFloat(uint16_t(bits));
        };
        return llvm::formatv("element {0} (row {1}, col {2}): GPU {3:x} ({4}), "
                             "interpreter {5:x} ({6})",
                             e, e / cols, e % cols, gb, asFloat(gb), wb,
                             asFloat(wb))
            .str();
      };
      std::string label = def.groups > 1
                              ? llvm::formatv("{0}[{1}]", op.name, g).str()
                              : op.name;
      out << llvm::formatv("compare {0}: {1} elements, {2} differ", label,
                           count, diffs - approxDiffs);
      if (approxDiffs)
        out << llvm::formatv(" (+{0} interp-approx: explained by a 1-2 ulp "
                             "difference of the hardware's approximate "
                             "instructions, which the interpreter models as "
                             "correctly rounded)",
                             approxDiffs);
      out << "\n";
      if (firstReal >= 0)
        out << "  first difference: " << describe(firstReal) << "\n";
      else if (first >= 0)
        out << "  first interp-approx difference: " << describe(first) << "\n";
      realDiffs += diffs - approxDiffs;
    }
  out << (realDiffs ? "NOT bit-exact vs the interpreter\n"
                    : "bit-exact vs the interpreter\n");

  // Timing.
  if (iters > 0) {
    auto start = Event::create(), stop = Event::create();
    if (!start || !stop)
      return fail(err, "cannot create CUDA events");
    for (int w = 0; w < 3; ++w)
      bitfold_launch(k, dl.data(), int(dl.size()), scalars.data(),
                     int(scalars.size()), nullptr);
    std::vector<float> ms;
    for (int it = 0; it < iters; ++it) {
      if (llvm::Error e = start->record(nullptr))
        return fail(err, llvm::toString(std::move(e)));
      if (bitfold_launch(k, dl.data(), int(dl.size()), scalars.data(),
                         int(scalars.size()), nullptr) != BITFOLD_SUCCESS)
        return fail(err, bitfold_last_error());
      if (llvm::Error e = stop->record(nullptr))
        return fail(err, llvm::toString(std::move(e)));
      if (llvm::Error e = stop->synchronize())
        return fail(err, llvm::toString(std::move(e)));
      auto t = stop->elapsedSince(*start);
      if (!t)
        return fail(err, llvm::toString(t.takeError()));
      ms.push_back(*t);
    }
    std::sort(ms.begin(), ms.end());
    uint64_t bytesMoved = 0;
    for (auto &t : tensors)
      bytesMoved += t->bytes.size();
    double med = ms[ms.size() / 2];
    out << llvm::formatv("time per launch: median {0:f1} us (min {1:f1}, max "
                         "{2:f1}) over {3} launches, {4:f2} TB/s\n",
                         med * 1e3, ms.front() * 1e3, ms.back() * 1e3, iters,
                         med > 0 ? double(bytesMoved) / (med * 1e-3) / 1e12
                                 : 0.0);
  }
  return realDiffs ? 1 : 0;
}
