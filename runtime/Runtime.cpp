//===- runtime/Runtime.cpp - Specialise and launch ------------------------===//

#include "runtime/Runtime.h"

#include "runtime/Driver.h"
#include "runtime/Status.h"

#include "autotune/Policy.h"
#include "autotune/ShapeClass.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

using namespace bitfold;
using namespace bitfold::runtime;
using dsl::KernelDef;

// ---- Template parameters ---------------------------------------------------

std::optional<dsl::DType> bitfold::runtime::parseDType(llvm::StringRef t) {
  t = t.trim();
  if (t == "bf16" || t == "bfloat16")
    return dsl::DType::BF16;
  if (t == "f16" || t == "float16" || t == "half" || t == "fp16")
    return dsl::DType::F16;
  if (t == "f32" || t == "float32" || t == "float" || t == "fp32")
    return dsl::DType::F32;
  return std::nullopt;
}

namespace {

/// The parameters each template reads (all take dtype).
llvm::ArrayRef<llvm::StringRef> paramsOf(llvm::StringRef name) {
  static const llvm::StringRef dtypeOnly[] = {"dtype"};
  static const llvm::StringRef conv[] = {"dtype", "bias_dtype", "residual"};
  static const llvm::StringRef gate[] = {"dtype", "gate"};
  if (name == "conv_bias")
    return conv;
  if (name == "residual_gate")
    return gate;
  return dtypeOnly;
}

} // namespace

llvm::Expected<templates::TemplateArgs>
bitfold::runtime::parseTemplateParams(llvm::StringRef name,
                                      llvm::StringRef text) {
  templates::TemplateArgs a;
  bool biasSet = false;
  llvm::SmallVector<llvm::StringRef, 8> items;
  llvm::SplitString(text, items, " ,;\t\n");
  llvm::ArrayRef<llvm::StringRef> allowed = paramsOf(name);
  std::string allowedText = llvm::join(allowed, ", ");
  std::set<std::string> seen;
  auto bad = [&](const llvm::Twine &msg) {
    return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                        name + " parameters '" + text + "': " + msg);
  };
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    if (!item.contains('=') || key.empty() || value.empty())
      return bad("'" + item + "' is not key=value");
    if (!llvm::is_contained(allowed, key))
      return bad("unknown parameter '" + key + "' (" + name + " takes: " +
                 allowedText + ")");
    if (!seen.insert(key.str()).second)
      return bad("'" + key + "' given twice");
    if (key == "dtype" || key == "bias_dtype") {
      auto t = parseDType(value);
      if (!t)
        return bad(key + "='" + value + "' is not a dtype (bf16, f16, f32)");
      (key == "dtype" ? a.dtype : a.biasDtype) = *t;
      biasSet |= key == "bias_dtype";
    } else if (key == "residual") {
      if (value == "1" || value == "true")
        a.residual = true;
      else if (value == "0" || value == "false")
        a.residual = false;
      else
        return bad("residual='" + value + "' is not 0 or 1");
    } else if (key == "gate") {
      if (value == "full")
        a.gate = templates::GateMap::Full;
      else if (value == "per_batch")
        a.gate = templates::GateMap::PerBatch;
      else if (value == "global")
        a.gate = templates::GateMap::Global;
      else
        return bad("gate='" + value + "' is not full, per_batch or global");
    }
  }
  if (!biasSet)
    a.biasDtype = a.dtype;
  return a;
}

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
};

size_t Kernel::SpecKeyHash::operator()(const SpecKey &k) const {
  uint64_t h = uint64_t(k.cols) * 0x9E3779B97F4A7C15ull;
  h ^= uint64_t(k.rowBucket) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= uint64_t(k.device) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
  h ^= uint64_t(k.configSerial) * 31 + (k.wide ? 17 : 0) + (k.pdl ? 5 : 0) +
       (h << 6) + (h >> 2);
  for (uint8_t a : k.align)
    h = h * 131 + a;
  return size_t(h);
}

Kernel::Kernel(Runtime &rt, std::string name, templates::TemplateArgs args,
               std::shared_ptr<const KernelDef> def, std::string defError)
    : rt(rt), templateName(std::move(name)), args(args), sig(def),
      defError(std::move(defError)) {
  if (this->defError.empty())
    fixedDef = def;
}

Kernel::~Kernel() = default;

llvm::Expected<std::shared_ptr<const KernelDef>> Kernel::defFor(int64_t cols) {
  if (fixedDef)
    return fixedDef;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    auto it = defsByCols.find(cols);
    if (it != defsByCols.end())
      return it->second;
  }
  const templates::TemplateInfo *info = templates::findTemplate(templateName);
  templates::TemplateArgs a = args;
  a.cols = cols;
  auto def = info->build(a);
  if (!def)
    return runtimeError(BITFOLD_ERROR_SHAPE,
                        llvm::toString(def.takeError()));
  if (llvm::Error e = checkDefLimits(**def))
    return std::move(e);
  std::unique_lock<std::shared_mutex> lock(mu);
  return defsByCols.emplace(cols, *def).first->second;
}

llvm::Expected<codegen::TileConfig>
Kernel::parseConfig(llvm::StringRef text) const {
  auto c = rt.compiler().parseConfig(text);
  if (!c)
    return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                        templateName + ": bad config '" + text +
                            "': " + llvm::toString(c.takeError()));
  return *c;
}

llvm::Error Kernel::setConfig(std::optional<codegen::TileConfig> config) {
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

/// Whether a compiled kernel fits its definition and config (ABI counts,
/// parameter limit, CTA shape).
static llvm::Error checkCompiled(llvm::StringRef templateName,
                                 const KernelDef &def,
                                 const codegen::TileConfig &config,
                                 const codegen::CompiledKernel &k,
                                 const Compiler &comp) {
  if (k.abi.numGroups == def.groups &&
      k.abi.numOperands == int(def.operands.size()) &&
      k.abi.numDims == int(def.dims.size()) &&
      k.abi.numScalars == int(def.scalars.size()) &&
      k.abi.paramCount() <= size_t(kMaxParams) && k.config == config &&
      k.config.ctaThreads() > 0 && k.config.rowsPerCta > 0)
    return llvm::Error::success();
  return runtimeError(
      BITFOLD_ERROR_INTERNAL,
      llvm::formatv("{0}: the compiled kernel's ABI ({1} groups, {2} "
                    "operands, {3} dims, {4} scalars, config {5}) does not "
                    "match the definition ({6}, {7}, {8}, {9}, config {10})",
                    templateName, k.abi.numGroups, k.abi.numOperands,
                    k.abi.numDims, k.abi.numScalars, comp.configText(k.config),
                    def.groups, def.operands.size(), def.dims.size(),
                    def.scalars.size(), comp.configText(config)));
}

llvm::Expected<Kernel::ClassEntry *>
Kernel::specialise(const SpecKey &key, const LaunchBinding &b) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = "cannot launch " + templateName;
  auto api = driver();
  if (!api)
    return noDriver(what, api.takeError());
  auto arch = deviceArch(b.device);
  if (!arch)
    return runtimeError(BITFOLD_ERROR_DEVICE,
                        what + ": " + llvm::toString(arch.takeError()));
  auto defOr = defFor(b.cols);
  if (!defOr)
    return defOr.takeError();
  std::shared_ptr<const KernelDef> def = *defOr;
  const Compiler &comp = rt.compiler();

  codegen::ShapeSpec shape;
  shape.cols = b.cols;
  for (size_t i = 0; i < def->operands.size(); ++i)
    shape.alignBytes.push_back(key.align[i]);
  // A class, not the exact offset: row counts must not split the cache.
  shape.maxElementOffset = maxElementOffsetClass(b.maxElementOffset);

  std::optional<codegen::TileConfig> pin;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    pin = pinned;
  }
  auto entry = std::make_unique<ClassEntry>();
  codegen::TileConfig config;
  if (pin) {
    config = *pin;
    entry->configFrom = "pinned";
    if (llvm::Error e = comp.checkConfig(*def, shape, config))
      return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                          templateName + ": config " + comp.configText(config) +
                              " is not legal for " + comp.shapeText(shape) +
                              ": " + llvm::toString(std::move(e)));
  } else if (autotune::TunePolicy *policy = rt.tunePolicy()) {
    // The tune DB's winner for this class and environment, else the default
    // (UseDefault: the policy never tunes or blocks here).
    auto gpu = rt.gpuName(b.device);
    if (!gpu)
      return runtimeError(BITFOLD_ERROR_DEVICE,
                          what + ": " + llvm::toString(gpu.takeError()));
    autotune::ChooseRequest req;
    req.key = autotune::tuneKeyFor(
        *def, comp.shapeText(shape), b.totalRows,
        autotune::currentEnvironment(*gpu, *arch, rt.toolchain()));
    req.defaultConfig = comp.defaultConfig(*def, shape);
    req.check = [&](const codegen::TileConfig &c) {
      return comp.checkConfig(*def, shape, c);
    };
    autotune::Choice choice = policy->choose(req);
    config = choice.config;
    entry->configFrom = autotune::provenanceName(choice.from).str();
    entry->shapeClass = req.key.shapeClass;
  } else {
    config = comp.defaultConfig(*def, shape);
    entry->configFrom = "default";
  }

  codegen::CompileOptions options;
  options.arch = *arch;
  options.gridDependencyControl = key.pdl;
  CacheKey ck = makeCacheKey(*def, comp.shapeText(shape),
                             comp.configText(config), options, rt.toolchain());

  // A disk entry is vetted against the definition and the config asked for
  // (a mismatch is rebuilt by the cache); a fresh compile must match too.
  auto matches = [&](const codegen::CompiledKernel &k) {
    return checkCompiled(templateName, *def, config, k, comp);
  };
  auto compiled = rt.cache().getOrCompile(
      ck, [&]() { return comp.compile(*def, shape, config, options); },
      &entry->origin, matches);
  if (!compiled)
    return runtimeError(BITFOLD_ERROR_COMPILE,
                        llvm::toString(compiled.takeError()));
  const codegen::CompiledKernel &k = **compiled;
  if (llvm::Error e = matches(k))
    return e;

  std::string keyText = ck.text();
  std::unique_lock<std::shared_mutex> lock(mu);
  std::unique_ptr<Specialisation> &s = byKey[keyText];
  if (!s) {
    s = std::make_unique<Specialisation>();
    s->def = def;
    s->kernel = *compiled;
    s->keyText = keyText;
    s->configText = comp.configText(k.config);
    s->rowsPerCta = k.config.rowsPerCta;
    s->blockX = unsigned(k.config.ctaThreads());
    s->gridDependencyWait = k.gridDependencyWait;
  }
  entry->spec = s.get();
  entry->specialiseMs = msSince(t0);
  // Another thread may have resolved the same class meanwhile: keep one.
  auto [it, inserted] = specs.emplace(key, std::move(entry));
  return it->second.get();
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

llvm::Error Kernel::launch(const DLTensor *const *tensors, int numTensors,
                           const float *scalars, int numScalars,
                           CUstream stream) {
  // Templates whose definition depends on D: take D from the first tensor.
  const KernelDef *def = fixedDef.get();
  std::shared_ptr<const KernelDef> holder;
  if (!def) {
    def = sig.get();
    const DLTensor *t0 = tensors && numTensors > 0 ? tensors[0] : nullptr;
    if (t0 && t0->shape && t0->ndim >= 1) {
      int64_t cols = sig->operands[0].layout == dsl::Layout::ChannelsLast &&
                             t0->ndim >= 2
                         ? t0->shape[1]
                         : t0->shape[t0->ndim - 1];
      auto d = defFor(cols);
      if (!d)
        return d.takeError();
      holder = *d;
      def = holder.get();
    }
  }

  LaunchBinding b;
  if (llvm::Error e = bindTensors(*def, tensors, numTensors, b))
    return e;
  if (numScalars != int(def->scalars.size()) || (numScalars > 0 && !scalars)) {
    std::string names;
    for (const dsl::ScalarDecl &s : def->scalars)
      names += (names.empty() ? "" : ", ") + s.name;
    return runtimeError(
        BITFOLD_ERROR_INVALID_ARGUMENT,
        llvm::formatv("{0} takes {1} scalar(s) ({2}); {3}", def->name,
                      def->scalars.size(), names,
                      numScalars > 0 && !scalars
                          ? std::string("scalars is NULL")
                          : std::to_string(numScalars) + " given"));
  }
  if (b.totalRows == 0)
    return llvm::Error::success(); // nothing to do

  SpecKey key{};
  key.cols = b.cols;
  // With a tune DB, rows pick the winner (by power-of-two bucket).
  key.rowBucket = rt.tunePolicy() ? autotune::rowBucket(b.totalRows) : 0;
  key.device = b.device;
  key.wide = b.maxElementOffset > int64_t(INT32_MAX);
  // Read once: the specialisation and the launch must agree.
  const bool wantPdl = programmatic.load(std::memory_order_relaxed);
  key.pdl = wantPdl;
  for (size_t i = 0; i < def->operands.size(); ++i)
    key.align[i] = uint8_t(b.alignBytes[i]);
  const ClassEntry *entry = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    key.configSerial = configSerial;
    auto it = specs.find(key);
    if (it != specs.end())
      entry = it->second.get();
  }
  if (!entry) {
    auto made = specialise(key, b);
    if (!made)
      return made.takeError();
    entry = *made;
  }
  if (last.load(std::memory_order_relaxed) != entry)
    last.store(entry, std::memory_order_relaxed);
  Specialisation *s = entry->spec;

  auto api = driver(); // loaded: specialise() needed it
  if (!api)
    return noDriver("cannot launch " + templateName, api.takeError());
  CUcontext cur = nullptr;
  api->cuCtxGetCurrent(&cur);
  CUfunction fn = s->find(cur, b.device);
  std::optional<ScopedContext> scoped;
  if (!fn) {
    auto sc = ScopedContext::forDevice(b.device);
    if (!sc)
      return runtimeError(BITFOLD_ERROR_DEVICE,
                          "cannot launch " + templateName + ": " +
                              llvm::toString(sc.takeError()));
    scoped.emplace(std::move(*sc));
    auto f = functionFor(*s, scoped->get(), b.device);
    if (!f)
      return f.takeError();
    fn = *f;
  }

  const int64_t grid = (b.totalRows + s->rowsPerCta - 1) / s->rowsPerCta;
  if (grid > int64_t(INT32_MAX))
    return runtimeError(BITFOLD_ERROR_UNSUPPORTED,
                        llvm::formatv("{0}: {1} rows need {2} CTAs of {3} "
                                      "rows, above the grid limit 2^31-1",
                                      def->name, b.totalRows, grid,
                                      s->rowsPerCta));

  // Parameters in the ABI order of codegen/Codegen.h.
  uint64_t values[kMaxParams];
  void *params[kMaxParams];
  int p = 0;
  const int nOps = int(def->operands.size());
  for (int g = 0; g < def->groups; ++g)
    for (int i = 0; i < nOps; ++i) {
      values[p++] = uint64_t(b.views[g][i].base);
      values[p++] = uint64_t(b.views[g][i].rowStride);
    }
  for (int g = 0; g < def->groups; ++g)
    values[p++] = uint64_t(b.groupRows[g]);
  for (size_t d = 0; d < def->dims.size(); ++d)
    values[p++] = uint64_t(b.dims[d]);
  for (int i = 0; i < numScalars; ++i) {
    values[p] = 0;
    std::memcpy(&values[p++], &scalars[i], sizeof(float));
  }
  for (int i = 0; i < p; ++i)
    params[i] = &values[i];

  const bool pdl = wantPdl && s->gridDependencyWait && api->cuLaunchKernelEx;
  CUresult r;
  if (pdl) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig lc{};
    lc.gridDimX = unsigned(grid);
    lc.gridDimY = lc.gridDimZ = 1;
    lc.blockDimX = s->blockX;
    lc.blockDimY = lc.blockDimZ = 1;
    lc.hStream = stream;
    lc.attrs = &attr;
    lc.numAttrs = 1;
    r = api->cuLaunchKernelEx(&lc, fn, params, nullptr);
  } else {
    r = api->cuLaunchKernel(fn, unsigned(grid), 1, 1, s->blockX, 1, 1, 0,
                            stream, params, nullptr);
  }
  if (r != CUDA_SUCCESS)
    return runtimeError(
        BITFOLD_ERROR_CUDA,
        llvm::toString(checkCuda(
            r, llvm::formatv("{0}: {1}(grid {2}, block {3}, config {4})",
                             def->name,
                             pdl ? "cuLaunchKernelEx with programmatic "
                                   "stream serialization"
                                 : "cuLaunchKernel",
                             grid, s->blockX, s->configText))));
  return llvm::Error::success();
}

// ---- Runtime ---------------------------------------------------------------

namespace {

/// The cache's warning sink, or stderr unless $BITFOLD_QUIET=1.
std::function<void(llvm::StringRef)>
warningSink(const std::function<void(llvm::StringRef)> &given) {
  if (given)
    return given;
  return [](llvm::StringRef msg) {
    const char *quiet = std::getenv("BITFOLD_QUIET");
    if (quiet && llvm::StringRef(quiet) == "1")
      return;
    llvm::errs() << "bitfold: warning: " << msg << "\n";
  };
}

} // namespace

Runtime::Runtime(RuntimeOptions options)
    : kernelCache(options.cache),
      comp(options.compiler ? std::move(*options.compiler)
                            : defaultCompiler()) {
  toolchainText = comp.toolchainVersion ? comp.toolchainVersion() : "";
  if (!options.tuneDb.empty()) {
    autotune::PolicyOptions po;
    po.onMiss = autotune::OnMiss::UseDefault; // never tune or stall here
    po.dbPath = options.tuneDb;
    po.warn = warningSink(options.cache.warn);
    auto p = autotune::TunePolicy::open(po);
    if (p)
      policy = std::move(*p);
    else
      po.warn("tune DB '" + options.tuneDb + "' not used (every shape class "
              "gets the default config): " + llvm::toString(p.takeError()));
  }
}

Runtime::~Runtime() = default;

llvm::Expected<std::string> Runtime::gpuName(int device) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = gpuNames.find(device);
  if (it != gpuNames.end())
    return it->second;
  auto info = queryDriver();
  if (!info)
    return info.takeError();
  for (const DeviceInfo &d : info->devices)
    gpuNames[d.ordinal] = d.name;
  it = gpuNames.find(device);
  if (it == gpuNames.end())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("no CUDA device {0}", device).str());
  return it->second;
}

llvm::Expected<Kernel *> Runtime::findKernel(llvm::StringRef name,
                                             llvm::StringRef params) {
  const templates::TemplateInfo *info = templates::findTemplate(name);
  if (!info) {
    std::string names;
    for (const templates::TemplateInfo &t : templates::allTemplates())
      names += (names.empty() ? "" : ", ") + t.name;
    return runtimeError(BITFOLD_ERROR_UNKNOWN_TEMPLATE,
                        "no template '" + name + "' (templates: " + names +
                            ")");
  }
  auto args = parseTemplateParams(name, params);
  if (!args)
    return args.takeError();
  std::string id = llvm::formatv("{0}|{1}|{2}|{3}|{4}", name,
                                 int(args->dtype), int(args->biasDtype),
                                 int(args->residual), int(args->gate));
  std::lock_guard<std::mutex> lock(mu);
  auto it = kernels.find(id);
  if (it != kernels.end())
    return it->second.get();

  // A template whose fold order does not depend on D builds with cols = 0;
  // one that does (rmsnorm_modulate) is built per column count at launch,
  // and probed here with a few column counts for its signature.
  auto def = info->build(*args);
  std::string defError;
  if (!def) {
    defError = llvm::toString(def.takeError());
    for (int64_t cols : {2048, 4096, 128, 1024, 3072, 6144, 64}) {
      templates::TemplateArgs probe = *args;
      probe.cols = cols;
      def = info->build(probe);
      if (def)
        break;
      llvm::consumeError(def.takeError());
    }
    if (!def)
      return runtimeError(BITFOLD_ERROR_INVALID_ARGUMENT,
                          name + ": " + defError);
  }
  if (llvm::Error e = checkDefLimits(**def))
    return std::move(e);
  auto k = std::make_unique<Kernel>(*this, name.str(), *args, *def, defError);
  Kernel *raw = k.get();
  kernels.emplace(id, std::move(k));
  return raw;
}
