//===- runtime/Runtime.cpp - Specialise and launch ------------------------===//

#include "runtime/Runtime.h"

#include "cuda/Driver.h"
#include "runtime/Status.h"

#include "templates/Problem.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <climits>
#include <cstdlib>
#include <cstring>

using namespace bitfold;
using namespace bitfold::runtime;
using namespace bitfold::cuda;
using namespace bitfold::policy;
using dsl::KernelDef;

// ---- Specialisations -------------------------------------------------------

namespace {

constexpr int kMaxContexts = 8;

llvm::Error noDriver(const llvm::Twine &what, llvm::Error e) {
  return runtimeError(BITFOLD_ERROR_NO_DRIVER,
                      what + ": " + llvm::toString(std::move(e)));
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

} // namespace

struct Kernel::Specialisation {
  std::shared_ptr<const KernelDef> def;
  CompiledKernelRef kernel;
  std::string keyText, configText;
  keys::KernelABI abi;
  int rowsPerCta = 1;
  unsigned blockX = 0;
  bool gridDependencyWait = false;

  /// The function loaded in each context this specialisation met.
  struct Loaded {
    std::atomic<CUcontext> ctx{nullptr};
    int device = -1;
    CUfunction fn = nullptr;
    Module module;
  };
  std::array<Loaded, kMaxContexts> loaded;
  std::mutex loadMu;
  double moduleLoadMs = 0; ///< the first load (under loadMu).

  CUfunction find(CUcontext ctx, int device) const {
    if (!ctx)
      return nullptr;
    for (const Loaded &l : loaded) {
      CUcontext c = l.ctx.load(std::memory_order_acquire);
      if (!c)
        return nullptr;
      if (c == ctx)
        return l.device == device ? l.fn : nullptr;
    }
    return nullptr;
  }
};

/// What one shape class (SpecKey) resolved to on its first launch.
struct Kernel::ClassEntry {
  Specialisation *spec = nullptr; ///< owned by Kernel::byKey.
  std::string configFrom;
  std::string shapeClass;
  CacheOrigin origin;
  double specialiseMs = 0;
  /// The config source may answer differently later (background tune):
  /// lookup() resolves the class again once its generation moves.
  bool provisional = false;
  uint64_t generation = 0;
};

size_t Kernel::SpecKeyHash::operator()(const SpecKey &k) const {
  uint64_t h = k.shape.hash();
  h ^= uint64_t(k.device) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
  h ^= uint64_t(k.configSerial) * 31 + (k.pdl ? 5 : 0) + (h << 6) + (h >> 2);
  return size_t(h);
}

Kernel::Kernel(Runtime &rt, templates::DescriptorRef desc,
               templates::ParamValues params,
               std::shared_ptr<const KernelDef> sig)
    : rt(rt), templateName(desc->name), desc(std::move(desc)),
      params(std::move(params)), sig(sig) {
  if (!this->desc->dependsOnCols)
    fixedDef = sig;
}

Kernel::~Kernel() = default;

llvm::Expected<std::shared_ptr<const KernelDef>>
Kernel::defFor(int64_t cols, int64_t rows) {
  if (fixedDef)
    return fixedDef;
  const std::pair<int64_t, int64_t> key{cols, desc->rowClass(params, rows)};
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    auto it = defsByCols.find(key);
    if (it != defsByCols.end())
      return it->second;
  }
  auto def = desc->definition(params, cols, rows);
  if (!def)
    return runtimeError(BITFOLD_ERROR_SHAPE,
                        llvm::toString(def.takeError()));
  if (llvm::Error e = checkDefLimits(**def))
    return std::move(e);
  std::unique_lock<std::shared_mutex> lock(mu);
  return defsByCols.emplace(key, *def).first->second;
}

llvm::Expected<keys::TileConfig>
Kernel::parseConfig(llvm::StringRef text) const {
  auto c = keys::TileConfig::parse(text);
  if (!c)
    return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                        templateName + ": bad config '" + text +
                            "': " + llvm::toString(c.takeError()));
  return *c;
}

llvm::Error Kernel::setConfig(std::optional<keys::TileConfig> config) {
  std::unique_lock<std::shared_mutex> lock(mu);
  pinned = config;
  ++configSerial;
  return llvm::Error::success();
}

Kernel::LastLaunch Kernel::lastSpecialisation() const {
  std::shared_lock<std::shared_mutex> lock(mu);
  LastLaunch l;
  if (const ClassEntry *c = last.load()) {
    Specialisation *s = c->spec;
    l.keyText = s->keyText;
    l.config = s->configText;
    l.blockX = s->blockX;
    l.gridDependencyWait = s->gridDependencyWait;
    l.configFrom = c->configFrom;
    l.shapeClass = c->shapeClass;
    l.origin = c->origin;
    l.specialiseMs = c->specialiseMs;
    std::lock_guard<std::mutex> g(s->loadMu);
    l.moduleLoadMs = s->moduleLoadMs;
  }
  return l;
}

namespace {

/// The default config, or UNSUPPORTED where no config at all can run the
/// definition at this shape (a channels-first fold of more lanes a pixel
/// than a CTA holds): refused before any compile.
llvm::Expected<keys::TileConfig> runnableDefault(const Compiler &comp,
                                                 const KernelDef &def,
                                                 const keys::ShapeSpec &shape,
                                                 const std::string &name) {
  keys::TileConfig config = comp.defaultConfig(def, shape);
  if (llvm::Error e = comp.checkConfig(def, shape, config))
    return runtimeError(BITFOLD_ERROR_UNSUPPORTED,
                        name + ": no tile config can run it at " +
                            shape.str() + ": " + llvm::toString(std::move(e)));
  return config;
}

} // namespace

llvm::Expected<keys::TileConfig>
Kernel::chooseConfig(const std::shared_ptr<const KernelDef> &def,
                     const SpecKey &key, const std::string &arch,
                     ClassEntry &entry) {
  const Compiler &comp = rt.compiler();
  const keys::ShapeSpec shape = key.shape.shapeSpec();
  std::optional<keys::TileConfig> pin;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    pin = pinned;
  }
  if (pin) {
    entry.configFrom = "pinned";
    if (llvm::Error e = comp.checkConfig(*def, shape, *pin))
      return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                          templateName + ": config " + pin->str() +
                              " is not legal for " + shape.str() + ": " +
                              llvm::toString(std::move(e)));
    return *pin;
  }
  auto fallback = runnableDefault(comp, *def, shape, templateName);
  if (!fallback)
    return fallback.takeError();
  ConfigSource *source = rt.configSource();
  if (!source) {
    entry.configFrom = "default";
    return *fallback;
  }
  auto gpu = rt.gpuName(key.device);
  if (!gpu)
    return runtimeError(BITFOLD_ERROR_DEVICE,
                        "cannot launch " + templateName + ": " +
                            llvm::toString(gpu.takeError()));
  // A class with two-level rows asks about its one-level twin, one whose
  // channels-first operands have different S about the dense class (where
  // they share it): tuners time dense tensors, and neither fact makes a
  // config illegal (the binding's alignment already covers the group
  // stride; S only enters the addresses).
  keys::ShapeClass asked = key.shape;
  asked.twoLevel = false;
  asked.levels = {};
  asked.oneSpatial = keys::spatialSharable(*def);
  const keys::ShapeSpec askedShape = asked.shapeSpec();
  ConfigRequest req;
  req.def = def;
  req.shapeClass = asked;
  req.gpuName = *gpu;
  req.device = key.device;
  req.arch = arch;
  req.toolchain = rt.toolchain();
  req.defaultConfig = comp.defaultConfig(*def, askedShape);
  req.check = [&](const keys::TileConfig &c) {
    return comp.checkConfig(*def, askedShape, c);
  };
  // Tuners compile through the cache with the launch's key: the winner is
  // then a hit when the class resolves again.
  req.compile = [rt = &rt, def, shape = askedShape,
                 options = keys::launchOptions(arch, key.pdl)](
                    const keys::TileConfig &c)
      -> llvm::Expected<codegen::CompiledKernel> {
    auto k = rt->compileCached(*def, shape, c, options);
    if (!k)
      return k.takeError();
    return **k;
  };
  // Read before asking: a tune finishing meanwhile then still counts.
  entry.generation = source->generation();
  ConfigAnswer answer = source->configFor(req);
  entry.provisional = answer.provisional;
  entry.configFrom = std::move(answer.from);
  entry.shapeClass = asked.str();
  if (!key.shape.twoLevel && key.shape.oneSpatial == asked.oneSpatial)
    return answer.config;
  if (llvm::Error e = comp.checkConfig(*def, shape, answer.config)) {
    llvm::consumeError(std::move(e)); // not expected: see above
    entry.configFrom += " (illegal with two-level rows: default)";
    return comp.defaultConfig(*def, shape);
  }
  return answer.config;
}

llvm::Error Kernel::checkCompiled(const KernelDef &def,
                                  const keys::TileConfig &config,
                                  const codegen::CompiledKernel &k) const {
  const keys::KernelABI want = keys::KernelABI::of(def);
  if (k.abi == want && k.abi.paramCount() <= size_t(kMaxParams) &&
      k.config == config && k.config.ctaThreads() > 0 &&
      k.config.rowsPerCta > 0)
    return llvm::Error::success();
  return runtimeError(
      BITFOLD_ERROR_INTERNAL,
      llvm::formatv("{0}: the compiled kernel's ABI ({1} groups, {2} "
                    "operands, {3} dims, {4} scalars, config {5}) does not "
                    "match the definition ({6}, {7}, {8}, {9}, config {10})",
                    templateName, k.abi.numGroups, k.abi.numOperands,
                    k.abi.numDims, k.abi.numScalars, k.config.str(),
                    want.numGroups, want.numOperands, want.numDims,
                    want.numScalars, config.str()));
}

Kernel::ClassEntry *Kernel::publish(const SpecKey &key, std::string keyText,
                                    std::shared_ptr<const KernelDef> def,
                                    CompiledKernelRef kernel,
                                    std::unique_ptr<ClassEntry> entry,
                                    bool replace) {
  std::unique_lock<std::shared_mutex> lock(mu);
  std::unique_ptr<Specialisation> &s = byKey[keyText];
  if (!s) {
    const codegen::CompiledKernel &k = *kernel;
    s = std::make_unique<Specialisation>();
    s->def = std::move(def);
    s->kernel = kernel;
    s->keyText = std::move(keyText);
    s->configText = k.config.str();
    s->abi = k.abi;
    s->rowsPerCta = k.config.rowsPerCta;
    s->blockX = unsigned(k.config.ctaThreads());
    s->gridDependencyWait = k.gridDependencyWait;
  }
  entry->spec = s.get();
  // Another thread may have resolved the same class meanwhile: keep one,
  // unless this resolution replaces a provisional one.
  auto [it, inserted] = specs.try_emplace(key, nullptr);
  if (inserted || replace) {
    if (it->second)
      retired.push_back(std::move(it->second));
    it->second = std::move(entry);
  }
  return it->second.get();
}

llvm::Expected<Kernel::ClassEntry *>
Kernel::specialise(const SpecKey &key, int64_t cols, bool replace, Tier tier) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = "cannot launch " + templateName;
  auto api = driver();
  if (!api)
    return noDriver(what, api.takeError());
  auto arch = deviceArch(key.device);
  if (!arch)
    return runtimeError(BITFOLD_ERROR_DEVICE,
                        what + ": " + llvm::toString(arch.takeError()));
  auto def = defFor(cols, key.shape.rowClass);
  if (!def)
    return def.takeError();
  auto entry = std::make_unique<ClassEntry>();
  auto config = chooseConfig(*def, key, *arch, *entry);
  if (!config)
    return config.takeError();
  // Quick-first: serve the quick config while the chosen one compiles.
  std::optional<keys::TileConfig> quick;
  if (tier == Tier::QuickFirst && entry->configFrom != "pinned" &&
      (quick = quickInstead(**def, key, *arch, *config))) {
    entry->configFrom = "quick config while " + config->str() + " (" +
                        entry->configFrom + ") compiles";
    config = *quick;
  }

  // A disk entry is vetted against the definition and the config asked for
  // (a mismatch is rebuilt by the cache); a fresh compile must match too.
  auto matches = [&](const codegen::CompiledKernel &k) {
    return checkCompiled(**def, *config, k);
  };
  std::string keyText;
  auto compiled =
      rt.compileCached(**def, key.shape.shapeSpec(), *config,
                       quick ? quickOptions(*arch, key.pdl)
                             : keys::launchOptions(*arch, key.pdl),
                       &keyText,
                       &entry->origin, matches);
  if (!compiled)
    return runtimeError(BITFOLD_ERROR_COMPILE,
                        llvm::toString(compiled.takeError()));
  if (llvm::Error e = matches(**compiled))
    return e;
  entry->specialiseMs = msSince(t0);
  ClassEntry *published = publish(key, std::move(keyText), *def, *compiled,
                                  std::move(entry), replace);
  if (quick)
    upgradeLater(key, cols);
  return published;
}

llvm::Expected<CUfunction> Kernel::functionFor(Specialisation &s,
                                               CUcontext ctx, int device) {
  std::lock_guard<std::mutex> lock(s.loadMu);
  if (CUfunction fn = s.find(ctx, device))
    return fn;
  for (Specialisation::Loaded &l : s.loaded) {
    if (l.ctx.load(std::memory_order_acquire))
      continue;
    const codegen::CompiledKernel &k = *s.kernel;
    std::vector<char> ptx;
    llvm::ArrayRef<char> image = k.cubin;
    if (image.empty()) { // PTX only: the driver JIT-compiles it.
      ptx.assign(k.ptx.begin(), k.ptx.end());
      ptx.push_back('\0');
      image = ptx;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto module = Module::load(image);
    if (!module)
      return runtimeError(BITFOLD_ERROR_CUDA,
                          templateName + ": " +
                              llvm::toString(module.takeError()));
    auto fn = module->function(k.entryName);
    if (!fn)
      return runtimeError(BITFOLD_ERROR_CUDA,
                          templateName + ": " + llvm::toString(fn.takeError()));
    if (s.moduleLoadMs == 0)
      s.moduleLoadMs = msSince(t0);
    l.module = std::move(*module);
    l.fn = *fn;
    l.device = device;
    l.ctx.store(ctx, std::memory_order_release);
    return *fn;
  }
  return runtimeError(BITFOLD_ERROR_UNSUPPORTED,
                      llvm::formatv("{0}: one specialisation met more than {1} "
                                    "CUDA contexts",
                                    templateName, kMaxContexts));
}

llvm::Expected<CUfunction>
Kernel::currentFunction(const DriverApi &api, Specialisation &s, int device,
                        std::optional<ScopedContext> &scoped) {
  CUcontext cur = nullptr;
  api.cuCtxGetCurrent(&cur);
  if (CUfunction fn = s.find(cur, device))
    return fn;
  // Not loaded in the current context: use the device's primary context,
  // current until the launch is enqueued (cuda/ relaxes the retain and the
  // load for a capture on any thread; the launch is captured as usual).
  auto sc = ScopedContext::forDevice(device);
  if (!sc)
    return runtimeError(BITFOLD_ERROR_DEVICE,
                        "cannot launch " + templateName + ": " +
                            llvm::toString(sc.takeError()));
  scoped.emplace(std::move(*sc));
  return functionFor(s, scoped->get(), device);
}

llvm::Error Kernel::enqueue(const DriverApi &api, const Specialisation &s,
                            CUfunction fn,
                            const LaunchBinding &b, const float *scalars,
                            CUstream stream, bool wantPdl) {
  const KernelDef &def = *s.def;
  const int64_t grid = (b.totalRows + s.rowsPerCta - 1) / s.rowsPerCta;
  if (grid > int64_t(INT32_MAX))
    return runtimeError(BITFOLD_ERROR_UNSUPPORTED,
                        llvm::formatv("{0}: {1} rows need {2} CTAs of {3} "
                                      "rows, above the grid limit 2^31-1",
                                      def.name, b.totalRows, grid,
                                      s.rowsPerCta));
  uint64_t values[kMaxParams];
  void *params[kMaxParams];
  keys::ParamPacker pack(s.abi, values);
  for (int g = 0; g < s.abi.numGroups; ++g) {
    for (int i = 0; i < s.abi.numOperands; ++i) {
      pack.pointer(g, i, uint64_t(b.views[g][i].base));
      pack.rowStride(g, i, b.views[g][i].rowStride);
    }
    pack.groupRows(g, b.groupRows[g]);
  }
  for (int d = 0; d < s.abi.numDims; ++d)
    pack.dim(d, b.dims[d]);
  for (int i = 0; i < s.abi.numScalars; ++i)
    pack.scalar(i, scalars[i]);
  for (size_t p = 0; p < s.abi.paramCount(); ++p)
    params[p] = &values[p];

  const bool pdl = wantPdl && s.gridDependencyWait && api.cuLaunchKernelEx;
  CUresult r;
  if (pdl) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig lc{};
    lc.gridDimX = unsigned(grid);
    lc.gridDimY = lc.gridDimZ = 1;
    lc.blockDimX = s.blockX;
    lc.blockDimY = lc.blockDimZ = 1;
    lc.hStream = stream;
    lc.attrs = &attr;
    lc.numAttrs = 1;
    r = api.cuLaunchKernelEx(&lc, fn, params, nullptr);
  } else {
    r = api.cuLaunchKernel(fn, unsigned(grid), 1, 1, s.blockX, 1, 1, 0,
                           stream, params, nullptr);
  }
  if (r == CUDA_SUCCESS)
    return llvm::Error::success();
  return runtimeError(
      BITFOLD_ERROR_CUDA,
      llvm::toString(checkCuda(
          r, llvm::formatv("{0}: {1}(grid {2}, block {3}, config {4})",
                           def.name,
                           pdl ? "cuLaunchKernelEx with programmatic "
                                 "stream serialization"
                               : "cuLaunchKernel",
                           grid, s.blockX, s.configText))));
}

llvm::Expected<const KernelDef *>
Kernel::launchDef(const DLTensor *const *tensors, int numTensors) {
  if (fixedDef)
    return fixedDef.get();
  // Templates whose definition depends on D: take D from the first tensor.
  const DLTensor *t0 = tensors && numTensors > 0 ? tensors[0] : nullptr;
  if (!t0 || !t0->shape || t0->ndim < 1 || t0->ndim > kMaxNdim ||
      t0->ndim > templates::kMaxDims)
    return sig.get(); // binding reports what is wrong
  const int colsAxis = templates::colsAxis(*sig, t0->ndim);
  int64_t cols = t0->shape[colsAxis];
  // The first operand's rows (every dim but the columns): the binding
  // checks them against the definition's row range.
  int64_t rows = 1;
  for (int d = 0; d < t0->ndim; ++d)
    if (d != colsAxis && __builtin_mul_overflow(rows, t0->shape[d], &rows))
      rows = INT64_MAX;
  auto d = defFor(cols, rows);
  if (!d)
    return d.takeError();
  return d->get(); // defsByCols keeps it alive
}

llvm::Expected<const Kernel::ClassEntry *>
Kernel::lookup(SpecKey &key, const LaunchBinding &b) {
  const ClassEntry *found = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    key.configSerial = configSerial;
    auto it = specs.find(key);
    if (it != specs.end())
      found = it->second.get();
  }
  if (!found)
    return rt.asyncCompile() ? specialiseAsync(key, b.cols)
                             : specialise(key, b.cols, /*replace=*/false,
                                          Tier::QuickFirst);
  if (!found->provisional ||
      rt.configSource()->generation() == found->generation)
    return found;
  // A background tune finished since: ask again (the winner's kernel is
  // compiled or loaded now; the old one keeps serving other threads).
  return specialise(key, b.cols, /*replace=*/true);
}

llvm::Error Kernel::prewarm(llvm::ArrayRef<std::vector<int64_t>> shapes,
                            int device) {
  std::vector<std::pair<SpecKey, int64_t>> keys;
  for (const std::vector<int64_t> &dims : shapes) {
    auto shape = templates::shapeFromDims(*sig, dims);
    if (!shape)
      return runtimeError(BITFOLD_ERROR_SHAPE,
                          "cannot prewarm " + templateName + ": " +
                              llvm::toString(shape.takeError()));
    auto def = defFor(shape->cols, shape->totalRows());
    if (!def)
      return def.takeError();
    SpecKey key{};
    key.shape = keys::denseShapeClass(**def, shape->cols, shape->groupRows,
                                      shape->rowsPerBatch, rt.bucketsRows());
    key.device = device;
    key.pdl = programmatic.load(std::memory_order_relaxed);
    {
      std::shared_lock<std::shared_mutex> lock(mu);
      key.configSerial = configSerial;
      if (specs.count(key))
        continue; // resolved already
    }
    keys.emplace_back(key, shape->cols);
  }
  rt.prewarmQueued(keys.size());
  for (auto &[key, cols] : keys)
    rt.runInBackground([this, key = key, cols = cols] {
      auto entry = specialise(key, cols);
      rt.prewarmFinished(entry ? llvm::Error::success() : entry.takeError());
    });
  return llvm::Error::success();
}

namespace {

llvm::Error checkScalars(const KernelDef &def, const float *scalars,
                         int numScalars) {
  if (numScalars == int(def.scalars.size()) && (numScalars == 0 || scalars))
    return llvm::Error::success();
  std::string names;
  for (const dsl::ScalarDecl &s : def.scalars)
    names += (names.empty() ? "" : ", ") + s.name;
  return runtimeError(
      BITFOLD_ERROR_INVALID_ARGUMENT,
      llvm::formatv("{0} takes {1} scalar(s) ({2}); {3}", def.name,
                    def.scalars.size(), names,
                    numScalars > 0 && !scalars
                        ? std::string("scalars is NULL")
                        : std::to_string(numScalars) + " given"));
}

} // namespace

llvm::Error Kernel::bindLaunch(const DLTensor *const *tensors, int numTensors,
                               const float *scalars, int numScalars,
                               const KernelDef *&boundDef, LaunchBinding &b,
                               SpecKey &key) {
  auto def = launchDef(tensors, numTensors);
  if (!def)
    return def.takeError();
  boundDef = *def;
  if (llvm::Error e = bindTensors(**def, tensors, numTensors, b))
    return e;
  if (llvm::Error e = checkScalars(**def, scalars, numScalars))
    return e;
  if (b.totalRows == 0)
    return llvm::Error::success(); // nothing to do
  key = SpecKey{};
  key.shape = keys::classifyShape(
      b.cols, llvm::ArrayRef<int>(b.alignBytes, (*def)->operands.size()),
      b.maxElementOffset, b.totalRows, rt.bucketsRows());
  key.shape.rowClass = keys::definitionRowClass(**def);
  key.shape.manyRows = keys::manyRowsOf(**def, b.cols, b.totalRows);
  key.shape.oneSpatial = b.oneSpatial; // compiled into the kernel
  if (b.twoLevel) { // compiled into the kernel: part of the class
    key.shape.twoLevel = true;
    std::copy(b.levels, b.levels + key.shape.numOperands,
              key.shape.levels.begin());
  }
  key.device = b.device;
  return llvm::Error::success();
}

llvm::Error Kernel::launchBound(SpecKey &key, const LaunchBinding &b,
                                const float *scalars, CUstream stream) {
  // Read once: the specialisation and the launch must agree.
  const bool wantPdl = programmatic.load(std::memory_order_relaxed);
  key.pdl = wantPdl;
  auto entry = lookup(key, b);
  if (!entry)
    return entry.takeError();
  if (last.load(std::memory_order_relaxed) != *entry)
    last.store(*entry, std::memory_order_relaxed);

  auto api = driver(); // loaded: specialise() needed it
  if (!api)
    return noDriver("cannot launch " + templateName, api.takeError());
  Specialisation &s = *(*entry)->spec;
  std::optional<ScopedContext> scoped;
  auto fn = currentFunction(*api, s, b.device, scoped);
  if (!fn)
    return fn.takeError();
  return enqueue(*api, s, *fn, b, scalars, stream, wantPdl);
}

llvm::Error Kernel::bindAndLaunch(const DLTensor *const *tensors,
                                  int numTensors, const float *scalars,
                                  int numScalars, CUstream stream,
                                  Rebinding *keep) {
  const KernelDef *def = nullptr;
  LaunchBinding b;
  SpecKey key{};
  if (llvm::Error e = bindLaunch(tensors, numTensors, scalars, numScalars,
                                 def, b, key))
    return e;
  if (b.totalRows == 0)
    return llvm::Error::success();
  if (keep && !keep->ready.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(keep->mu);
    if (!keep->ready.load(std::memory_order_relaxed)) {
      keep->def = def;
      keep->binding = b;
      keep->key = key;
      keep->ready.store(true, std::memory_order_release);
    }
  }
  return launchBound(key, b, scalars, stream);
}

llvm::Error Kernel::launch(const DLTensor *const *tensors, int numTensors,
                           const float *scalars, int numScalars,
                           CUstream stream) {
  return bindAndLaunch(tensors, numTensors, scalars, numScalars, stream,
                       /*keep=*/nullptr);
}

llvm::Error Kernel::launch(Rebinding &r, const DLTensor *const *tensors,
                           int numTensors, const float *scalars,
                           int numScalars, CUstream stream) {
  if (r.ready.load(std::memory_order_acquire)) {
    // The layouts are the first launch's: its definition, binding and class
    // hold; only the addresses are new.
    LaunchBinding b;
    if (rebindAddresses(*r.def, tensors, r.binding, b)) {
      SpecKey key = r.key;
      return launchBound(key, b, scalars, stream);
    }
  }
  return bindAndLaunch(tensors, numTensors, scalars, numScalars, stream, &r);
}

// ---- Runtime ---------------------------------------------------------------

std::function<void(llvm::StringRef)>
runtime::warningSink(const std::function<void(llvm::StringRef)> &given) {
  if (given)
    return given;
  return [](llvm::StringRef msg) {
    const char *quiet = std::getenv("BITFOLD_QUIET");
    if (quiet && llvm::StringRef(quiet) == "1")
      return;
    llvm::errs() << "bitfold: warning: " << msg << "\n";
  };
}

Runtime::Runtime(RuntimeOptions options)
    : kernelCache(options.cache),
      comp(options.compiler ? std::move(*options.compiler)
                            : defaultCompiler()),
      warn(warningSink(options.cache.warn)),
      compileThreads(options.compileThreads),
      source(std::move(options.configSource)) {
  // Nothing here probes the toolchain: toolchain() does, when a cache key
  // is first needed (creation stays well under a millisecond).
  bucketRows = source && source->bucketsRows();
  if (options.asyncCompile)
    setAsyncCompile(true);
  if (options.quickFirst)
    setQuickFirst(true);
}

Runtime::~Runtime() {
  shuttingDown.store(true, std::memory_order_release);
  if (pool)
    pool->wait();
}

llvm::Expected<CompiledKernelRef> Runtime::compileCached(
    const KernelDef &def, const keys::ShapeSpec &shape,
    const keys::TileConfig &config, const keys::CompileOptions &options,
    std::string *keyText, CacheOrigin *origin, const ValidateFn &validate) {
  CacheKey ck = keys::makeCacheKey(def, shape, config, options, toolchain());
  if (keyText)
    *keyText = ck.text();
  return kernelCache.getOrCompile(
      ck, [&]() { return comp.compile(def, shape, config, options); }, origin,
      validate);
}

const std::string &Runtime::toolchain() {
  std::call_once(toolchainOnce, [&] {
    toolchainText = resolveToolchain(comp, kernelCache.directory());
  });
  return toolchainText;
}

void Runtime::runInBackground(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!pool) {
      unsigned n = compileThreads ? compileThreads
                                  : std::min(4u, std::max(1u,
                                        std::thread::hardware_concurrency()));
      pool = std::make_unique<llvm::DefaultThreadPool>(
          llvm::hardware_concurrency(n));
    }
  }
  pool->async(std::move(task));
}

bool Runtime::isCached(const KernelDef &def, const keys::ShapeSpec &shape,
                       const keys::TileConfig &config,
                       const keys::CompileOptions &options) {
  return kernelCache.contains(
      keys::makeCacheKey(def, shape, config, options, toolchain()));
}

void Runtime::prewarmQueued(uint64_t n) {
  std::lock_guard<std::mutex> lock(prewarmMu);
  prewarm.pending += n;
}

void Runtime::prewarmFinished(llvm::Error result) {
  std::lock_guard<std::mutex> lock(prewarmMu);
  --prewarm.pending;
  ++prewarm.done;
  if (result) {
    ++prewarm.failed;
    std::string msg = llvm::toString(std::move(result));
    if (prewarm.firstError.empty())
      prewarm.firstError = msg;
  }
  prewarmCv.notify_all();
}

PrewarmStatus Runtime::prewarmStatus() const {
  std::lock_guard<std::mutex> lock(prewarmMu);
  return prewarm;
}

PrewarmStatus Runtime::waitPrewarm() {
  std::unique_lock<std::mutex> lock(prewarmMu);
  prewarmCv.wait(lock, [&] { return prewarm.pending == 0; });
  return prewarm;
}

llvm::Expected<std::string> Runtime::gpuName(int device) {
  return gpuNames.get(device, [&]() -> llvm::Expected<std::string> {
    auto info = queryDriver();
    if (!info)
      return info.takeError();
    for (const DeviceInfo &d : info->devices)
      if (d.ordinal == device)
        return d.name;
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("no CUDA device {0}", device).str());
  });
}

llvm::Expected<Kernel *> Runtime::findKernel(llvm::StringRef name,
                                             llvm::StringRef params) {
  auto desc = templates::Registry::global().lookup(name);
  if (!desc)
    return runtimeError(BITFOLD_ERROR_UNKNOWN_TEMPLATE,
                        llvm::toString(desc.takeError()));
  auto values = (*desc)->parseParams(params);
  if (!values)
    return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                        llvm::toString(values.takeError()));
  std::string id = name.str() + "|" + values->str();
  std::lock_guard<std::mutex> lock(mu);
  auto it = kernels.find(id);
  if (it != kernels.end())
    return it->second.get();
  // The signature: the definition itself unless it depends on D, in which
  // case launches build one per column count (Kernel::defFor).
  auto sig = (*desc)->signature(*values);
  if (!sig)
    return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                        name + ": " + llvm::toString(sig.takeError()));
  if (llvm::Error e = checkDefLimits(**sig))
    return std::move(e);
  auto k = std::make_unique<Kernel>(*this, *desc, *values, *sig);
  Kernel *raw = k.get();
  kernels.emplace(id, std::move(k));
  return raw;
}
