//===- codegen/Codegen.cpp - The compile driver: a list of stages ---------===//
//
// First the target (checkTargetArch) and the dump folder are checked; then
//   plan            TileConfig + shape -> Plan (legality, fold mapping)
//   rewrites        the exact rewrites the program gets (ExactRewrites.h)
//   fold-knowledge  constant lane fields, dead keep-selects (FoldKnowledge.h)
//   mlir-build      KernelDef + Plan + facts -> MLIR (arith, scf, llvm, nvvm)
//   scf-to-cf, arith-to-llvm, cf-to-llvm, reconcile-casts
//                   -> MLIR in the LLVM + NVVM dialects
//   llvm-translate  -> LLVM IR
//   llvm-opt        LLVM O3 with the NVPTX target machine (no contraction)
//   ptx             NVPTX -> PTX text
//   cubin           nvJitLink / driver / ptxas
//
// With dumpDir every stage's output lands there (NN-stage.ext; MLIR with
// locations naming the DSL nodes); a failing stage leaves its input IR
// there and its error names the stage.
//
//===----------------------------------------------------------------------===//

#include "codegen/Backend.h"
#include "codegen/LinkLibdevice.h"
#include "codegen/Lowering.h"
#include "fileio/File.h"

#include "bitfold/Config.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace bitfold;
using namespace bitfold::codegen;
using namespace bitfold::keys;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Creates the dump folder, or says why it cannot be used.
llvm::Error prepareDumpDir(llvm::StringRef dir) {
  if (dir.empty())
    return fail("--dump-dir: the folder name is empty");
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return fail("--dump-dir " + dir + ": " + ec.message());
  if (!llvm::sys::fs::is_directory(dir))
    return fail("--dump-dir " + dir + ": not a folder");
  if (llvm::sys::fs::access(dir, llvm::sys::fs::AccessMode::Write))
    return fail("--dump-dir " + dir + ": not writable");
  return llvm::Error::success();
}

/// Runs named stages in order: times each, dumps its output, and turns a
/// failure into an error that names the stage. A dump that cannot be
/// written is reported by `finish`.
class Stages {
public:
  Stages(const CompileOptions &opts, CompiledKernel &out)
      : dir(opts.dumpDir.value_or("")), out(out) {}

  template <typename Fn> llvm::Error run(llvm::StringRef name, Fn &&fn) {
    auto t0 = std::chrono::steady_clock::now();
    llvm::Error e = fn();
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    out.times.push_back({name.str(), ms});
    if (e)
      return fail(llvm::formatv(
          "codegen stage '{0}' failed{1}: {2}", name,
          dir.empty() ? std::string() : " (its input IR is in " + dir + ")",
          llvm::toString(std::move(e))));
    ++index;
    return llvm::Error::success();
  }

  /// Writes dumpDir/NN-name (no-op without dumpDir).
  void dump(llvm::StringRef name,
            llvm::function_ref<void(llvm::raw_ostream &)> write) {
    if (dir.empty())
      return;
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, llvm::formatv("{0:2}-{1}", index, name).str());
    std::string text;
    llvm::raw_string_ostream os(text);
    write(os);
    if (llvm::Error e = fileio::writeFileAtomically(path, text, "dump file")) {
      if (dumpFailure.empty())
        dumpFailure = llvm::toString(std::move(e));
      else
        llvm::consumeError(std::move(e));
    }
  }
  void dumpText(llvm::StringRef name, llvm::StringRef text) {
    dump(name, [&](llvm::raw_ostream &os) { os << text; });
  }
  void dumpMLIR(llvm::StringRef name, mlir::ModuleOp m) {
    dump(name, [&](llvm::raw_ostream &os) {
      m->print(os, mlir::OpPrintingFlags().enableDebugInfo(
                       /*enable=*/true, /*prettyForm=*/false));
    });
  }

  /// The first dump failure, if any.
  llvm::Error finish() {
    if (dumpFailure.empty())
      return llvm::Error::success();
    return fail("--dump-dir: " + dumpFailure);
  }

private:
  std::string dir;
  CompiledKernel &out;
  int index = 0;
  std::string dumpFailure;
};

std::string entryNameFor(const dsl::KernelDef &def, const TileConfig &c) {
  std::string cfg = c.str();
  std::replace(cfg.begin(), cfg.end(), '.', '_');
  return "bitfold_" + def.name + "_" + def.hash.substr(0, 12) + "_" + cfg;
}

/// "sm_90", "sm_90a": 90 (checkTargetArch accepted the spelling).
int smVersionOf(llvm::StringRef arch) {
  unsigned sm = 0;
  arch.consume_front("sm_");
  arch.take_while(llvm::isDigit).getAsInteger(10, sm);
  return int(sm);
}

/// What one thread's compiles reuse, because building it costs more than
/// some kernels' stages: an MLIRContext with codegen's dialects and the
/// LLVM IR translations loaded, and an NVPTX target machine per arch.
/// Neither may be used by two compiles at once, hence one set per thread.
/// The context interns every attribute and location a compile creates, so
/// it is replaced every kCompilesPerContext compiles: memory stays bounded
/// in a process that compiles for as long as it serves.
class ThreadTools {
public:
  static ThreadTools &forThisThread() {
    thread_local ThreadTools tools;
    return tools;
  }

  /// The context for the next compile.
  mlir::MLIRContext &nextContext() {
    if (!ctx || ++uses > kCompilesPerContext) {
      ctx.reset(); // the old one first: never two alive at once.
      ctx = std::make_unique<mlir::MLIRContext>(
          mlir::MLIRContext::Threading::DISABLED);
      loadCodegenDialects(*ctx);
      mlir::registerBuiltinDialectTranslation(*ctx);
      mlir::registerLLVMDialectTranslation(*ctx);
      mlir::registerNVVMDialectTranslation(*ctx);
      ctx->printOpOnDiagnostic(false);
      uses = 1;
    }
    return *ctx;
  }

  /// The target machine for `arch` (created on first use).
  llvm::Expected<llvm::TargetMachine *> targetMachine(llvm::StringRef arch) {
    std::unique_ptr<llvm::TargetMachine> &tm = machines[arch];
    if (tm)
      return tm.get();
    llvm::Expected<std::unique_ptr<llvm::TargetMachine>> made =
        createNVPTXTargetMachine(arch);
    if (!made) {
      machines.erase(arch);
      return made.takeError();
    }
    tm = std::move(*made);
    return tm.get();
  }

private:
  static constexpr int kCompilesPerContext = 64;
  std::unique_ptr<mlir::MLIRContext> ctx;
  int uses = 0;
  llvm::StringMap<std::unique_ptr<llvm::TargetMachine>> machines;
};

/// The MLIR pass manager verifies the module after every pass: a check of
/// the passes themselves, worth its cost only in debug builds (the module
/// is verified once after it is built, in every build).
#ifdef NDEBUG
constexpr bool kVerifyEachPass = false;
#else
constexpr bool kVerifyEachPass = true;
#endif

/// One compilation's state; one method per stage, in order.
class Compilation {
public:
  Compilation(const dsl::KernelDef &def, const ShapeSpec &shape,
              const TileConfig &config, const CompileOptions &options)
      : def(def), shape(shape), options(options), stages(options, out),
        tools(ThreadTools::forThisThread()), ctx(tools.nextContext()) {
    out.config = config;
    out.entryName = entryNameFor(def, config);
    out.abi = KernelABI::of(def);
  }

  llvm::Error plan();
  llvm::Error staticFacts();
  llvm::Error buildMLIR();
  llvm::Error lowerMLIR();
  llvm::Error translate();
  llvm::Error optimize();
  llvm::Error emitPTX();
  llvm::Error assemble();
  llvm::Expected<CompiledKernel> result() {
    if (llvm::Error e = stages.finish())
      return std::move(e);
    return std::move(out);
  }

  CompiledKernel out;

private:
  void setUpContext();

  const dsl::KernelDef &def;
  const ShapeSpec &shape;
  const CompileOptions &options;
  Stages stages;
  Plan thePlan;
  LoweringFacts facts;
  ThreadTools &tools;
  mlir::MLIRContext &ctx;
  std::string diagnostics;
  std::optional<mlir::ScopedDiagnosticHandler> diag;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  llvm::LLVMContext llctx;
  std::unique_ptr<llvm::Module> llmod;
  llvm::TargetMachine *tm = nullptr; ///< the thread's, for options.arch.
};

llvm::Error Compilation::plan() {
  stages.dumpText("program.txt", def.canonicalText);
  if (llvm::Error e = stages.run("plan", [&]() -> llvm::Error {
        llvm::Expected<Plan> p =
            makePlan(def, shape, out.config, rolledRowsMode(options));
        if (!p) {
          // Said first where no config at all is legal at this shape (a
          // default config is then only a placeholder).
          if (!enumerateConfigs(def, shape).empty())
            return p.takeError();
          return llvm::createStringError(
              llvm::inconvertibleErrorCode(),
              llvm::formatv("no tile config is legal for '{0}' at {1} "
                            "columns; {2}",
                            def.name, shape.cols,
                            llvm::toString(p.takeError())));
        }
        thePlan = std::move(*p);
        thePlan.smVersion = smVersionOf(options.arch);
        thePlan.gridDependencyControl = options.gridDependencyControl;
        return llvm::Error::success();
      }))
    return e;
  out.sharedBytes = thePlan.sharedBytes;
  return llvm::Error::success();
}

llvm::Error Compilation::staticFacts() {
  if (llvm::Error e = stages.run("rewrites", [&] {
        facts.rewrites = findRewrites(def, thePlan.smVersion,
                                      dsl::isChannelsFirst(def) &&
                                          thePlan.config.threadsPerRow > 1);
        return llvm::Error::success();
      }))
    return e;
  stages.dump("rewrites.txt", [&](llvm::raw_ostream &os) {
    printRewrites(os, def, facts.rewrites);
  });
  if (llvm::Error e = stages.run("fold-knowledge", [&] {
        for (size_t f = 0; f < def.folds.size(); ++f)
          facts.folds.push_back(analyseFold(thePlan.folds[f],
                                            *def.folds[f].combiner, thePlan.cols,
                                            thePlan.config.threadsPerRow));
        return llvm::Error::success();
      }))
    return e;
  stages.dump("fold-knowledge.txt", [&](llvm::raw_ostream &os) {
    printFoldFacts(os, thePlan, facts.folds);
  });
  return llvm::Error::success();
}

void Compilation::setUpContext() {
  diag.emplace(&ctx, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
}

llvm::Error Compilation::buildMLIR() {
  setUpContext();
  LoweringStats stats;
  if (llvm::Error e = stages.run("mlir-build", [&]() -> llvm::Error {
        module = lowerToMLIR(ctx, def, thePlan, facts, out.entryName, stats);
        if (mlir::failed(mlir::verify(*module)))
          return fail("the built module does not verify:\n" + diagnostics);
        return llvm::Error::success();
      })) {
    if (module)
      stages.dumpMLIR("mlir-build.failed.mlir", *module);
    return e;
  }
  out.ir.fmaWritten = stats.fmaWritten;
  out.ir.narrowArith = stats.narrowArith;
  out.gridDependencyWait = stats.gridDependencyWait;
  stages.dumpMLIR("mlir-built.mlir", *module);
  return llvm::Error::success();
}

llvm::Error Compilation::lowerMLIR() {
  struct PassStage {
    const char *name;
    std::unique_ptr<mlir::Pass> (*make)();
  };
  const PassStage passes[] = {
      {"scf-to-cf", [] { return mlir::createSCFToControlFlowPass(); }},
      {"arith-to-llvm", [] { return mlir::createArithToLLVMConversionPass(); }},
      {"cf-to-llvm", [] { return mlir::createConvertControlFlowToLLVMPass(); }},
      {"reconcile-casts",
       [] { return mlir::createReconcileUnrealizedCastsPass(); }},
  };
  for (const PassStage &p : passes) {
    if (llvm::Error e = stages.run(p.name, [&]() -> llvm::Error {
          mlir::PassManager pm(&ctx);
          pm.enableVerifier(kVerifyEachPass);
          pm.addPass(p.make());
          if (mlir::failed(pm.run(*module)))
            return fail("the pass reported failure (see the MLIR dump)");
          return llvm::Error::success();
        })) {
      stages.dumpMLIR(std::string(p.name) + ".failed.mlir", *module);
      return fail(llvm::toString(std::move(e)) + "\n" + diagnostics);
    }
    stages.dumpMLIR(std::string(p.name) + ".mlir", *module);
  }
  return llvm::Error::success();
}

llvm::Error Compilation::translate() {
  if (llvm::Error e = stages.run("llvm-translate", [&]() -> llvm::Error {
        llmod = mlir::translateModuleToLLVMIR(*module, llctx, "bitfold");
        if (!llmod)
          return fail("translateModuleToLLVMIR failed:\n" + diagnostics);
        if (llvm::Error e = linkLibdevice(*llmod, out.ir))
          return e;
        if (llvm::verifyModule(*llmod, &llvm::errs()))
          return fail("the LLVM module does not verify");
        return llvm::Error::success();
      }))
    return e;
  stages.dump("llvm-before-opt.ll",
              [&](llvm::raw_ostream &os) { llmod->print(os, nullptr); });
  int64_t foldable = 0;
  countIRFacts(*llmod, out.ir.fmaBeforeOpt, foldable,
               out.ir.contractionAllowed);
  return llvm::Error::success();
}

llvm::Error Compilation::optimize() {
  if (llvm::Error e = stages.run("llvm-opt", [&]() -> llvm::Error {
        llvm::Expected<llvm::TargetMachine *> t =
            tools.targetMachine(options.arch);
        if (!t)
          return t.takeError();
        tm = *t;
        llmod->setDataLayout(tm->createDataLayout());
        llmod->setTargetTriple(tm->getTargetTriple());
        optimizeModule(*llmod, *tm);
        return llvm::Error::success();
      }))
    return e;
  stages.dump("llvm-after-opt.ll",
              [&](llvm::raw_ostream &os) { llmod->print(os, nullptr); });
  bool contractionAfter = false;
  countIRFacts(*llmod, out.ir.fmaAfterOpt, out.ir.fmaFoldable,
               contractionAfter);
  out.ir.contractionAllowed = out.ir.contractionAllowed || contractionAfter;
  return llvm::Error::success();
}

llvm::Error Compilation::emitPTX() {
  if (llvm::Error e = stages.run("ptx", [&]() -> llvm::Error {
        llvm::Expected<std::string> ptx = codegen::emitPTX(*llmod, *tm);
        if (!ptx)
          return ptx.takeError();
        out.ptx = std::move(*ptx);
        return llvm::Error::success();
      }))
    return e;
  stages.dumpText("kernel.ptx", out.ptx);
  return llvm::Error::success();
}

llvm::Error Compilation::assemble() {
  if (llvm::Error e = stages.run("cubin", [&]() -> llvm::Error {
        llvm::Expected<AssembledCubin> c =
            codegen::assemble(out.ptx, options.arch, options.cubinTool,
                              options.assemblerOptLevel);
        if (!c)
          return c.takeError();
        out.cubin = std::move(c->cubin);
        out.cubinTool = c->tool;
        out.assemblerLog = std::move(c->log);
        return llvm::Error::success();
      }))
    return e;
  stages.dump("kernel.cubin", [&](llvm::raw_ostream &os) {
    os.write(out.cubin.data(), out.cubin.size());
  });
  stages.dumpText(out.cubinTool + "-v.txt", out.assemblerLog);
  stages.dump("times.txt", [&](llvm::raw_ostream &os) {
    for (const StageTime &t : out.times)
      os << llvm::formatv("{0,-16} {1,8:f3} ms\n", t.stage, t.ms);
  });
  return llvm::Error::success();
}

} // namespace

llvm::Expected<CompiledKernel> codegen::compile(const dsl::KernelDef &def,
                                                const ShapeSpec &shape,
                                                const TileConfig &config,
                                                const CompileOptions &options) {
  if (llvm::Error e = checkTargetArch(options.arch))
    return std::move(e);
  if (options.dumpDir)
    if (llvm::Error e = prepareDumpDir(*options.dumpDir))
      return std::move(e);
  Compilation c(def, shape, config, options);
  if (llvm::Error e = c.plan())
    return std::move(e);
  if (llvm::Error e = c.staticFacts())
    return std::move(e);
  if (llvm::Error e = c.buildMLIR())
    return std::move(e);
  if (llvm::Error e = c.lowerMLIR())
    return std::move(e);
  if (llvm::Error e = c.translate())
    return std::move(e);
  if (llvm::Error e = c.optimize())
    return std::move(e);
  if (llvm::Error e = c.emitPTX())
    return std::move(e);
  if (options.emitCubin)
    if (llvm::Error e = c.assemble())
      return std::move(e);
  return c.result();
}

std::string codegen::toolchainVersion() {
  return std::string("bitfold ") + BITFOLD_VERSION + "; LLVM " +
         BITFOLD_LLVM_VERSION + "; " + assemblerVersion();
}
