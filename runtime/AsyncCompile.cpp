//===- runtime/AsyncCompile.cpp - Launches that never wait for a compile --===//
//
// Async mode (RuntimeOptions::asyncCompile, Runtime::setAsyncCompile): a
// launch at a shape class that is not resolved queues its specialisation
// on the runtime's compile threads (the prewarm pool) and returns
// BITFOLD_STATUS_NOT_READY at once; the caller serves the call another way
// (bitfold.torch: the eager chain, which gives the same bits). Many
// threads meeting one new class queue one compile; a failed compile is
// recorded once and refuses the class from then on; destroying the
// runtime skips queued compiles and joins running ones (~Runtime).
//
// Quick-first mode (Runtime::setQuickFirst): a class whose chosen config is
// in neither cache is first compiled at the quick config (quickInstead),
// and the chosen one then compiles on the same threads (upgradeLater).
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"

#include "runtime/Status.h"

#include "keys/CacheKey.h"

#include "llvm/Support/Error.h"

#include <new>

using namespace bitfold;
using namespace bitfold::runtime;
using dsl::KernelDef;

llvm::Expected<const Kernel::ClassEntry *>
Kernel::specialiseAsync(const SpecKey &key, int64_t cols) {
  std::lock_guard<std::mutex> guard(asyncMu);
  {
    // Resolved since the caller looked (its compile finished meanwhile).
    std::shared_lock<std::shared_mutex> lock(mu);
    auto it = specs.find(key);
    if (it != specs.end())
      return it->second.get();
  }
  auto [it, fresh] = asyncClasses.try_emplace(key);
  if (!fresh && it->second.code != BITFOLD_SUCCESS)
    return runtimeError(it->second.code, it->second.error);
  if (fresh) {
    rt.prewarmQueued(1);
    rt.runInBackground([this, key, cols] { compileInBackground(key, cols); });
  }
  return runtimeError(BITFOLD_STATUS_NOT_READY,
                      "the kernel " + templateName + " for shape class " +
                          key.shape.str() +
                          " is compiling in the background; launch again "
                          "later (async compile mode)");
}

void Kernel::compileInBackground(const SpecKey &key, int64_t cols) {
  llvm::Error result = llvm::Error::success();
  if (rt.stopping()) {
    result = runtimeError(BITFOLD_STATUS_NOT_READY,
                          "compile of " + templateName +
                              " cancelled: the runtime is being destroyed");
  } else if (auto entry = specialise(key, cols, /*replace=*/false,
                                     Tier::QuickFirst);
             !entry) {
    result = entry.takeError();
  }
  {
    std::lock_guard<std::mutex> guard(asyncMu);
    if (!result) {
      asyncClasses.erase(key); // specs has it now
    } else {
      std::string msg;
      bitfold_status code = takeStatus(std::move(result), msg);
      AsyncClass &c = asyncClasses[key];
      c.code = code == BITFOLD_STATUS_NOT_READY ? BITFOLD_ERROR_COMPILE : code;
      c.error = msg;
      result = runtimeError(c.code, msg);
    }
  }
  rt.prewarmFinished(std::move(result));
}

void Runtime::setAsyncCompile(bool on) {
  async.store(on, std::memory_order_release);
  if (on)
    startWarmUp();
}

void Runtime::setQuickFirst(bool on) {
  quick.store(on, std::memory_order_release);
  if (on)
    startWarmUp();
}

void Runtime::startWarmUp() {
  std::call_once(warmUpOnce, [&] {
    runInBackground([this] {
      if (stopping())
        return;
      (void)toolchain();
      if (comp.warmUp && !stopping())
        comp.warmUp();
    });
  });
}

std::optional<keys::TileConfig>
Kernel::quickInstead(const KernelDef &def, const SpecKey &key,
                     const std::string &arch, const keys::TileConfig &chosen) {
  const Compiler &comp = rt.compiler();
  if (!rt.quickFirst() || !comp.quickConfig || rt.stopping())
    return std::nullopt;
  const keys::ShapeSpec shape = key.shape.shapeSpec();
  keys::TileConfig quick = comp.quickConfig(def, shape);
  // Where the quick config is the chosen one, its quick build differs only
  // in synchronous mode (quickOptions: rows rolled, ptxas -O0), and there
  // the caller waits for the shorter compile (ln_modulate at 4096 columns:
  // 58 ms against 72 on the CPU box); in async mode it would be the same
  // kernel twice.
  if ((quick == chosen && rt.asyncCompile()) ||
      llvm::errorToBool(comp.checkConfig(def, shape, quick)) ||
      rt.isCached(def, shape, chosen, keys::launchOptions(arch, key.pdl)))
    return std::nullopt;
  return quick;
}

keys::CompileOptions Kernel::quickOptions(const std::string &arch,
                                          bool pdl) const {
  return keys::launchOptions(arch, pdl, /*fastCompile=*/!rt.asyncCompile());
}

void Kernel::upgradeLater(const SpecKey &key, int64_t cols) {
  rt.prewarmQueued(1);
  rt.runInBackground([this, key, cols] {
    if (rt.stopping()) { // the quick kernel served; nothing is lost
      rt.prewarmFinished(llvm::Error::success());
      return;
    }
    auto entry = specialise(key, cols, /*replace=*/true);
    rt.prewarmFinished(entry ? llvm::Error::success() : entry.takeError());
  });
}
