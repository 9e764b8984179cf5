//===- codegen/Codegen.cpp - The compile driver: a list of stages ---------===//
//
//   plan            TileConfig + shape -> Plan (legality, fold mapping)
//   mlir-build      KernelDef + Plan -> MLIR (arith, scf, llvm, nvvm)
//   scf-to-cf, arith-to-llvm, cf-to-llvm, reconcile-casts
//                   -> MLIR in the LLVM + NVVM dialects
//   llvm-translate  -> LLVM IR
//   llvm-opt        LLVM O3 with the NVPTX target machine (no contraction)
//   ptx             NVPTX -> PTX text
//   cubin           nvJitLink / driver / ptxas
//
// With dumpDir every stage's output lands there (NN-stage.ext); a failing
// stage leaves its input IR there and its error names the stage.
//
//===----------------------------------------------------------------------===//

#include "codegen/Backend.h"
#include "codegen/Lowering.h"

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

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace bitfold;
using namespace bitfold::codegen;

namespace {

/// Runs named stages in order: times each, dumps its output, and turns a
/// failure into an error that names the stage.
class Stages {
public:
  Stages(const CompileOptions &opts, CompiledKernel &out)
      : opts(opts), out(out) {}

  template <typename Fn> llvm::Error run(llvm::StringRef name, Fn &&fn) {
    auto t0 = std::chrono::steady_clock::now();
    llvm::Error e = fn();
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    out.times.push_back({name.str(), ms});
    if (e)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("codegen stage '{0}' failed{1}: {2}", name,
                        opts.dumpDir.empty()
                            ? std::string()
                            : " (its input IR is in " + opts.dumpDir + ")",
                        llvm::toString(std::move(e))));
    ++index;
    return llvm::Error::success();
  }

  /// Writes `text` as dumpDir/NN-name (no-op without dumpDir).
  void dump(llvm::StringRef name, llvm::function_ref<void(llvm::raw_ostream &)> write) {
    if (opts.dumpDir.empty())
      return;
    llvm::sys::fs::create_directories(opts.dumpDir);
    llvm::SmallString<256> path(opts.dumpDir);
    llvm::sys::path::append(path, llvm::formatv("{0:2}-{1}", index, name).str());
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (!ec)
      write(os);
  }
  void dumpText(llvm::StringRef name, llvm::StringRef text) {
    dump(name, [&](llvm::raw_ostream &os) { os << text; });
  }

private:
  const CompileOptions &opts;
  CompiledKernel &out;
  int index = 0;
};

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string entryNameFor(const dsl::KernelDef &def, const TileConfig &c) {
  std::string cfg = c.str();
  std::replace(cfg.begin(), cfg.end(), '.', '_');
  return "bitfold_" + def.name + "_" + def.hash.substr(0, 12) + "_" + cfg;
}

/// One MLIR conversion pass as a stage of its own (so each can be dumped).
llvm::Error runPass(mlir::ModuleOp module, std::unique_ptr<mlir::Pass> pass) {
  mlir::PassManager pm(module.getContext());
  pm.addPass(std::move(pass));
  if (mlir::failed(pm.run(module)))
    return fail("the pass reported failure (see the MLIR dump)");
  return llvm::Error::success();
}

} // namespace

llvm::Expected<CompiledKernel> codegen::compile(const dsl::KernelDef &def,
                                                const ShapeSpec &shape,
                                                const TileConfig &config,
                                                const CompileOptions &options) {
  CompiledKernel out;
  out.config = config;
  out.entryName = entryNameFor(def, config);
  out.abi = KernelABI::of(def);
  Stages stages(options, out);

  stages.dumpText("program.txt", def.canonicalText);
  Plan plan;
  if (llvm::Error e = stages.run("plan", [&]() -> llvm::Error {
        llvm::Expected<Plan> p = makePlan(def, shape, config);
        if (!p)
          return p.takeError();
        plan = std::move(*p);
        // "sm_90", "sm_90a": the digits; anything else fails later, in the
        // target machine, with its own message.
        unsigned sm = 0;
        llvm::StringRef arch(options.arch);
        if (arch.consume_front("sm_") &&
            !arch.take_while(llvm::isDigit).getAsInteger(10, sm))
          plan.smVersion = int(sm);
        plan.gridDependencyControl = options.gridDependencyControl;
        return llvm::Error::success();
      }))
    return std::move(e);
  out.sharedBytes = plan.sharedBytes;

  mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
  loadCodegenDialects(ctx);
  mlir::registerBuiltinDialectTranslation(ctx);
  mlir::registerLLVMDialectTranslation(ctx);
  mlir::registerNVVMDialectTranslation(ctx);
  ctx.printOpOnDiagnostic(false);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler diag(&ctx, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });

  mlir::OwningOpRef<mlir::ModuleOp> module;
  LoweringStats stats;
  if (llvm::Error e = stages.run("mlir-build", [&]() -> llvm::Error {
        module = lowerToMLIR(ctx, def, plan, out.entryName, stats);
        if (mlir::failed(mlir::verify(*module)))
          return fail("the built module does not verify:\n" + diagnostics);
        return llvm::Error::success();
      })) {
    if (module)
      stages.dump("mlir-build.failed.mlir",
                  [&](llvm::raw_ostream &os) { module->print(os); });
    return std::move(e);
  }
  out.ir.fmaWritten = stats.fmaWritten;
  out.ir.narrowArith = stats.narrowArith;
  out.gridDependencyWait = stats.gridDependencyWait;
  stages.dump("mlir-built.mlir", [&](llvm::raw_ostream &os) { module->print(os); });

  struct PassStage {
    const char *name;
    std::unique_ptr<mlir::Pass> (*make)();
  };
  const PassStage passes[] = {
      {"scf-to-cf", [] { return mlir::createSCFToControlFlowPass(); }},
      {"arith-to-llvm", [] { return mlir::createArithToLLVMConversionPass(); }},
      {"cf-to-llvm", [] { return mlir::createConvertControlFlowToLLVMPass(); }},
      {"reconcile-casts", [] { return mlir::createReconcileUnrealizedCastsPass(); }},
  };
  for (const PassStage &p : passes) {
    if (llvm::Error e = stages.run(p.name, [&] {
          return runPass(*module, p.make());
        })) {
      stages.dump(std::string(p.name) + ".failed.mlir",
                  [&](llvm::raw_ostream &os) { module->print(os); });
      return fail(llvm::toString(std::move(e)) + "\n" + diagnostics);
    }
    stages.dump(std::string(p.name) + ".mlir",
                [&](llvm::raw_ostream &os) { module->print(os); });
  }

  llvm::LLVMContext llctx;
  std::unique_ptr<llvm::Module> llmod;
  if (llvm::Error e = stages.run("llvm-translate", [&]() -> llvm::Error {
        llmod = mlir::translateModuleToLLVMIR(*module, llctx, "bitfold");
        if (!llmod)
          return fail("translateModuleToLLVMIR failed:\n" + diagnostics);
        if (llvm::verifyModule(*llmod, &llvm::errs()))
          return fail("the LLVM module does not verify");
        return llvm::Error::success();
      }))
    return std::move(e);
  stages.dump("llvm-before-opt.ll",
              [&](llvm::raw_ostream &os) { llmod->print(os, nullptr); });
  bool contraction = false;
  int64_t foldable = 0;
  countIRFacts(*llmod, out.ir.fmaBeforeOpt, foldable, contraction);

  std::unique_ptr<llvm::TargetMachine> tm;
  if (llvm::Error e = stages.run("llvm-opt", [&]() -> llvm::Error {
        llvm::Expected<std::unique_ptr<llvm::TargetMachine>> t =
            createNVPTXTargetMachine(options.arch);
        if (!t)
          return t.takeError();
        tm = std::move(*t);
        llmod->setDataLayout(tm->createDataLayout());
        llmod->setTargetTriple(tm->getTargetTriple());
        optimizeModule(*llmod, *tm);
        return llvm::Error::success();
      }))
    return std::move(e);
  stages.dump("llvm-after-opt.ll",
              [&](llvm::raw_ostream &os) { llmod->print(os, nullptr); });
  bool contractionAfter = false;
  countIRFacts(*llmod, out.ir.fmaAfterOpt, out.ir.fmaFoldable,
               contractionAfter);
  out.ir.contractionAllowed = contraction || contractionAfter;

  if (llvm::Error e = stages.run("ptx", [&]() -> llvm::Error {
        llvm::Expected<std::string> ptx = emitPTX(*llmod, *tm);
        if (!ptx)
          return ptx.takeError();
        out.ptx = std::move(*ptx);
        return llvm::Error::success();
      }))
    return std::move(e);
  stages.dumpText("kernel.ptx", out.ptx);
  if (!options.emitCubin)
    return out;

  if (llvm::Error e = stages.run("cubin", [&]() -> llvm::Error {
        llvm::Expected<AssembledCubin> c =
            assemble(out.ptx, options.arch, options.cubinTool);
        if (!c)
          return c.takeError();
        out.cubin = std::move(c->cubin);
        out.cubinTool = c->tool;
        out.assemblerLog = std::move(c->log);
        return llvm::Error::success();
      }))
    return std::move(e);
  stages.dump("kernel.cubin", [&](llvm::raw_ostream &os) {
    os.write(out.cubin.data(), out.cubin.size());
  });
  stages.dumpText(out.cubinTool + "-v.txt", out.assemblerLog);
  stages.dump("times.txt", [&](llvm::raw_ostream &os) {
    for (const StageTime &t : out.times)
      os << llvm::formatv("{0,-16} {1,8:f3} ms\n", t.stage, t.ms);
  });
  return out;
}

std::string codegen::toolchainVersion() {
  return std::string("bitfold ") + BITFOLD_VERSION + "; LLVM " +
         BITFOLD_LLVM_VERSION + "; " + assemblerVersion();
}
