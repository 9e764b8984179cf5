//===- tools/RunCommand.cpp - `bitfold run` -------------------------------===//
//
// One launch through the public C API on the host data the tests and the
// tuner use (templates::HostProblem), compared bit for bit with the
// interpreter on the same data, then timed.
//
//===----------------------------------------------------------------------===//

#include "tools/Commands.h"

#include "keys/Errors.h"

#include "capi/CApiInternal.h"
#include "cuda/Driver.h"
#include "runtime/Runtime.h"
#include "runtime/TensorBinding.h"
#include "runtime/bitfold.h"

#include "dsl/ApproxModels.h"
#include "dsl/Interp.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

using namespace bitfold;
using namespace bitfold::tools;
using namespace bitfold::runtime;
using namespace bitfold::cuda;

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
    found |= dsl::opInfo(n.op).exactness == dsl::Exactness::Approximate;
  });
  return found;
}

struct DeviceTensor {
  std::vector<int64_t> shape, strides;
  DeviceBuffer buffer;
  DLTensor dl{};
};

/// The tensor dims of operand `o` (rows of it in the group): the user's
/// dims per element (channels-last strides where the layout says so),
/// (batches, C) per batch, (C) per column, (rows) per row.
void describeTensor(const dsl::OperandDecl &o, const templates::ProblemShape &s,
                    int64_t rows, DeviceTensor &t) {
  if (o.map == dsl::IndexMap::PerRow) {
    t.shape = {rows};
    return;
  }
  if (o.map == dsl::IndexMap::PerColumn) {
    t.shape = {s.cols};
    return;
  }
  if (o.map == dsl::IndexMap::PerBatch) {
    t.shape = {rows, s.cols};
    return;
  }
  t.shape = s.dims;
  if (o.layout != dsl::Layout::ChannelsLast)
    return;
  int n = int(s.dims.size());
  t.strides.assign(n, 0);
  t.strides[1] = 1;
  int64_t acc = s.cols;
  for (int d = n - 1; d >= 2; --d) {
    t.strides[d] = acc;
    acc *= s.dims[d];
  }
  t.strides[0] = acc;
}

llvm::Expected<std::vector<std::unique_ptr<DeviceTensor>>>
upload(const dsl::KernelDef &def, const templates::HostProblem &host,
       unsigned device) {
  std::vector<std::unique_ptr<DeviceTensor>> tensors;
  for (int g = 0; g < def.groups; ++g)
    for (size_t i = 0; i < def.operands.size(); ++i) {
      const dsl::OperandDecl &o = def.operands[i];
      auto t = std::make_unique<DeviceTensor>();
      describeTensor(o, host.shape, host.rows(g, int(i)), *t);
      const std::vector<uint8_t> &bytes = host.storage[g][i];
      auto buf = DeviceBuffer::allocate(std::max<size_t>(bytes.size(), 16));
      if (!buf)
        return buf.takeError();
      t->buffer = std::move(*buf);
      if (llvm::Error e = t->buffer.copyFromHost(bytes.data(), bytes.size()))
        return std::move(e);
      t->dl.data = t->buffer.data();
      t->dl.device = {kDLCUDA, int(device)};
      t->dl.ndim = int(t->shape.size());
      t->dl.dtype = toDLDataType(o.dtype);
      t->dl.shape = t->shape.data();
      t->dl.strides = t->strides.empty() ? nullptr : t->strides.data();
      tensors.push_back(std::move(t));
    }
  return tensors;
}

/// The runtime and the kernel, through the public C API.
struct ApiKernel {
  std::unique_ptr<bitfold_runtime, void (*)(bitfold_runtime *)> runtime{
      nullptr, bitfold_runtime_destroy};
  bitfold_kernel *handle = nullptr;
  std::string tuneDb; ///< the DB in use, for the log
};

llvm::Expected<ApiKernel> openKernel(const RunOptions &o) {
  ApiKernel k;
  bitfold_runtime_options options;
  bitfold_runtime_options_init(&options);
  k.tuneDb = o.tuneDb;
  if (!o.tuneDb.empty())
    options.tune_db = o.tuneDb.c_str();
  else if (const char *env = std::getenv("BITFOLD_TUNE_DB"))
    k.tuneDb = env;
  bitfold_runtime *rt = nullptr;
  if (bitfold_runtime_create(&options, &rt) != BITFOLD_SUCCESS)
    return llvm::createStringError(bitfold_last_error());
  k.runtime.reset(rt);
  if (bitfold_kernel_from_registry(rt, o.problem.kernel.c_str(),
                                   o.problem.params.c_str(),
                                   &k.handle) != BITFOLD_SUCCESS)
    return llvm::createStringError(bitfold_last_error());
  if (!o.config.empty() &&
      bitfold_kernel_set_config(k.handle, o.config.c_str()) != BITFOLD_SUCCESS)
    return llvm::createStringError(bitfold_last_error());
  return k;
}

/// Prints the device and returns its arch ("sm_90" when it cannot be read).
std::string printDevice(unsigned device, llvm::raw_ostream &out) {
  auto info = queryDriver();
  if (!info) {
    llvm::consumeError(info.takeError());
    return "sm_90";
  }
  if (device >= info->devices.size())
    return "sm_90";
  out << llvm::formatv("device cuda:{0} {1} ({2}), driver {3}\n", device,
                       info->devices[device].name,
                       info->devices[device].arch(), info->versionString());
  return info->devices[device].arch();
}

/// Provenance of the first launch: which config and why, and whether the
/// kernel was compiled or found (so a log shows when nothing compiled).
void printProvenance(const ApiKernel &k, double firstMs,
                     llvm::raw_ostream &out) {
  Kernel::LastLaunch spec = unwrapKernel(k.handle)->lastSpecialisation();
  out << "config " << spec.config << " (" << spec.configFrom;
  if (!spec.shapeClass.empty())
    out << ", class " << spec.shapeClass;
  out << "), " << spec.blockX << " threads per CTA\n";
  if (!k.tuneDb.empty())
    out << "tune DB " << k.tuneDb << "\n";
  bitfold_cache_stats stats{};
  bitfold_runtime_cache_stats(k.runtime.get(), &stats);
  out << llvm::formatv("first launch: {0}; {1:f1} ms host time (config + "
                       "cache {2:f1} ms, module load {3:f1} ms); kernel "
                       "cache: {4} compiled, {5} disk hits, {6} memory hits\n",
                       spec.origin.describe(), firstMs, spec.specialiseMs,
                       spec.moduleLoadMs, stats.compiles, stats.disk_hits,
                       stats.memory_hits);
}

struct Launch {
  bitfold_kernel *kernel;
  std::vector<const DLTensor *> tensors;
  const std::vector<float> &scalars;
  llvm::Error operator()() const {
    if (bitfold_launch(kernel, tensors.data(), int(tensors.size()),
                       scalars.data(), int(scalars.size()),
                       nullptr) != BITFOLD_SUCCESS)
      return llvm::createStringError(bitfold_last_error());
    return llvm::Error::success();
  }
};

llvm::Error timeLaunches(const Launch &launch, unsigned iters,
                         uint64_t bytesMoved, llvm::raw_ostream &out) {
  auto start = Event::create(), stop = Event::create();
  if (!start || !stop) {
    llvm::consumeError(start.takeError());
    llvm::consumeError(stop.takeError());
    return keys::driverError("cannot create CUDA events");
  }
  for (int w = 0; w < 3; ++w)
    if (llvm::Error e = launch())
      return e;
  std::vector<float> ms;
  for (unsigned it = 0; it < iters; ++it) {
    if (llvm::Error e = start->record(nullptr))
      return e;
    if (llvm::Error e = launch())
      return e;
    if (llvm::Error e = stop->record(nullptr))
      return e;
    if (llvm::Error e = stop->synchronize())
      return e;
    auto t = stop->elapsedSince(*start);
    if (!t)
      return t.takeError();
    ms.push_back(*t);
  }
  std::sort(ms.begin(), ms.end());
  double med = ms[ms.size() / 2];
  out << llvm::formatv("time per launch: median {0:f1} us (min {1:f1}, max "
                       "{2:f1}) over {3} launches, {4:f2} TB/s\n",
                       med * 1e3, ms.front() * 1e3, ms.back() * 1e3, iters,
                       med > 0 ? double(bytesMoved) / (med * 1e-3) / 1e12
                               : 0.0);
  return llvm::Error::success();
}

// ---- Comparison with the interpreter ----------------------------------------

float bitsToFloat(dsl::DType t, uint32_t bits) {
  if (t == dsl::DType::F32) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return t == dsl::DType::BF16 ? dsl::bf16BitsToFloat(uint16_t(bits))
                               : dsl::halfBitsToFloat(uint16_t(bits));
}

std::string describeElement(dsl::DType t, const uint8_t *got,
                            const uint8_t *want, int64_t e, int64_t cols) {
  unsigned eb = dsl::dtypeBytes(t);
  uint32_t gb = 0, wb = 0;
  std::memcpy(&gb, got + e * eb, eb);
  std::memcpy(&wb, want + e * eb, eb);
  return llvm::formatv("element {0} (row {1}, col {2}): GPU {3:x} ({4}), "
                       "interpreter {5:x} ({6})",
                       e, e / cols, e % cols, gb, bitsToFloat(t, gb), wb,
                       bitsToFloat(t, wb))
      .str();
}

/// The interpreter's outputs on the host problem's inputs, one copy per
/// approximation: [0] the target's model of the approximate instructions
/// (bit-exact where dsl has one for the arch), then, only where it has
/// none and the kernel uses them, the stand-in shifted by -2, -1, 1, 2 ulps.
llvm::Expected<std::vector<templates::HostProblem>>
interpretAll(const dsl::KernelDef &def, const templates::HostProblem &host,
             const dsl::ApproxChoice &model) {
  std::vector<templates::HostProblem> all;
  std::vector<std::unique_ptr<dsl::ApproxUnit>> shifted;
  if (!model.exact && usesApprox(def))
    for (int u : {-2, -1, 1, 2})
      shifted.push_back(std::make_unique<ShiftedApprox>(u));
  all.push_back(host.clone());
  if (llvm::Error e = dsl::interpret(def, all.back().binding, *model.unit))
    return std::move(e);
  for (const auto &approx : shifted) {
    all.push_back(host.clone());
    if (llvm::Error e = dsl::interpret(def, all.back().binding, *approx))
      return std::move(e);
  }
  return all;
}

/// Compares one output; returns the count of differences no approximation
/// explains.
int64_t compareOutput(const dsl::OperandDecl &op, llvm::StringRef label,
                      const std::vector<uint8_t> &got,
                      llvm::ArrayRef<templates::HostProblem> want, int g,
                      size_t i, int64_t cols, llvm::raw_ostream &out) {
  const unsigned eb = dsl::dtypeBytes(op.dtype);
  const int64_t count = int64_t(got.size() / eb);
  int64_t diffs = 0, approxDiffs = 0, first = -1, firstReal = -1;
  auto same = [&](const templates::HostProblem &w, int64_t e) {
    return std::memcmp(&got[e * eb], &w.storage[g][i][e * eb], eb) == 0;
  };
  for (int64_t e = 0; e < count; ++e) {
    if (same(want[0], e))
      continue;
    ++diffs;
    first = first < 0 ? e : first;
    bool explained = llvm::any_of(want.drop_front(),
                                  [&](const auto &w) { return same(w, e); });
    approxDiffs += explained;
    if (!explained && firstReal < 0)
      firstReal = e;
  }
  out << llvm::formatv("compare {0}: {1} elements, {2} differ", label, count,
                       diffs - approxDiffs);
  if (approxDiffs)
    out << llvm::formatv(" (+{0} interp-approx: explained by a 1-2 ulp "
                         "difference of the hardware's approximate "
                         "instructions, which the interpreter has no exact "
                         "model of for this arch)",
                         approxDiffs);
  out << "\n";
  const uint8_t *w = want[0].storage[g][i].data();
  if (firstReal >= 0)
    out << "  first difference: "
        << describeElement(op.dtype, got.data(), w, firstReal, cols) << "\n";
  else if (first >= 0)
    out << "  first interp-approx difference: "
        << describeElement(op.dtype, got.data(), w, first, cols) << "\n";
  return diffs - approxDiffs;
}

/// Copies every output back and compares it; returns the differences.
llvm::Expected<int64_t>
compareWithInterpreter(const dsl::KernelDef &def,
                       const templates::HostProblem &host,
                       const std::vector<std::unique_ptr<DeviceTensor>> &dev,
                       llvm::StringRef arch, llvm::raw_ostream &out) {
  dsl::ApproxChoice model = dsl::approxForArch(arch);
  if (!model.exact && usesApprox(def))
    out << "note: " << model.note << "\n";
  auto want = interpretAll(def, host, model);
  if (!want)
    return llvm::createStringError("interpreter: " +
                                   llvm::toString(want.takeError()));
  const size_t nOps = def.operands.size();
  int64_t realDiffs = 0;
  for (int g = 0; g < def.groups; ++g)
    for (size_t i = 0; i < nOps; ++i) {
      const dsl::OperandDecl &op = def.operands[i];
      if (!op.isOutput)
        continue;
      std::vector<uint8_t> got(host.bytes(g, int(i)));
      if (llvm::Error e = dev[g * nOps + i]->buffer.copyToHost(got.data(),
                                                               got.size()))
        return std::move(e);
      std::string label = def.groups > 1
                              ? llvm::formatv("{0}[{1}]", op.name, g).str()
                              : op.name;
      realDiffs += compareOutput(op, label, got, *want, g, i, host.shape.cols,
                                 out);
    }
  out << (realDiffs ? "NOT bit-exact vs the interpreter\n"
                    : "bit-exact vs the interpreter\n");
  return realDiffs;
}

/// Everything after the problem is known: GPU, launch, check, timing.
int launchAndCheck(const RunOptions &o, const templates::Problem &p,
                   const templates::HostProblem &host, llvm::raw_ostream &out,
                   llvm::raw_ostream &err) {
  auto k = openKernel(o);
  if (!k)
    return report(err, "run", k.takeError(), kFailed);
  auto ctx = ScopedContext::forDevice(int(o.device));
  if (!ctx)
    return report(err, "run",
                  "no GPU to run on: " + llvm::toString(ctx.takeError()),
                  kFailed);
  std::string arch = printDevice(o.device, out);
  auto dev = upload(*p.def, host, o.device);
  if (!dev)
    return report(err, "run", dev.takeError(), kFailed);
  const dsl::KernelDef &def = *p.def;
  out << llvm::formatv("{0} {1}: shape ({2}), rows {3}, cols {4}{5}, seed {6}\n",
                       o.problem.kernel, p.params.str(), o.problem.shape,
                       p.shape.groupRows.front(), p.shape.cols,
                       def.dims.empty()
                           ? std::string()
                           : llvm::formatv(", S {0}", p.shape.rowsPerBatch).str(),
                       o.seed);
  Launch launch{k->handle, {}, p.scalars};
  uint64_t bytesMoved = 0;
  for (const auto &t : *dev) {
    launch.tensors.push_back(&t->dl);
    bytesMoved += t->buffer.size();
  }
  const auto firstStart = std::chrono::steady_clock::now();
  if (llvm::Error e = launch())
    return report(err, "run", std::move(e), kFailed);
  const double firstMs = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - firstStart)
                             .count();
  auto api = driver();
  if (!api)
    return report(err, "run", api.takeError(), kFailed);
  if (llvm::Error e = checkCuda(api->cuCtxSynchronize(), "after the launch"))
    return report(err, "run", std::move(e), kFailed);
  printProvenance(*k, firstMs, out);
  auto diffs = compareWithInterpreter(def, host, *dev, arch, out);
  if (!diffs)
    return report(err, "run", diffs.takeError(), kFailed);
  if (o.iters > 0)
    if (llvm::Error e = timeLaunches(launch, o.iters, bytesMoved, out))
      return report(err, "run", std::move(e), kFailed);
  return *diffs ? kDiffer : kOk;
}

} // namespace

int tools::runCommand(const RunOptions &o, llvm::raw_ostream &out,
                      llvm::raw_ostream &err) {
  // Every input check comes before the GPU is touched: misuse is exit 2
  // on any machine.
  auto p = makeProblem(o.problem);
  if (!p)
    return report(err, "run", p.takeError(), kUsage);
  auto host = templates::HostProblem::make(*p, o.seed);
  if (!host)
    return report(err, "run", host.takeError(), kUsage);
  return launchAndCheck(o, *p, *host, out, err);
}
