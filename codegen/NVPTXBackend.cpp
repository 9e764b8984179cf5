//===- codegen/NVPTXBackend.cpp - LLVM IR -> optimized IR -> PTX ----------===//
//
// The bit-exactness settings live here: FPOpFusion::Strict (no contraction
// of fmul + fadd, so NVPTX prints add.rn / sub.rn / mul.rn), no unsafe or
// approximate FP options, IEEE denormals (no "denormal-fp-math" override:
// no .ftz on generic ops).
//
//===----------------------------------------------------------------------===//

#include "codegen/Backend.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Operator.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

using namespace bitfold::codegen;

static constexpr const char *kNVPTXTriple = "nvptx64-nvidia-cuda";

/// Code generation verifies its input module first: a check of the
/// optimizer, worth its cost in debug builds only (codegen/Codegen.cpp
/// verifies the translated module in every build).
#ifdef NDEBUG
static constexpr bool kReleaseBuild = true;
#else
static constexpr bool kReleaseBuild = false;
#endif

extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

static llvm::Expected<const llvm::Target *> nvptxTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string err;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(llvm::Triple(kNVPTXTriple), err);
  if (!target)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "NVPTX target: " + err);
  return target;
}

llvm::Error bitfold::codegen::checkTargetArch(llvm::StringRef arch) {
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("target arch '{0}': {1} (bitfold needs sm_{2} or later, "
                      "e.g. sm_80, sm_90, sm_100)",
                      arch, why, kMinSmVersion));
  };
  llvm::StringRef rest = arch;
  if (!rest.consume_front("sm_"))
    return bad("not an NVIDIA GPU target of the form sm_XY");
  llvm::StringRef digits = rest.take_while(llvm::isDigit);
  llvm::StringRef suffix = rest.drop_front(digits.size());
  unsigned sm = 0;
  if (digits.empty() || digits.getAsInteger(10, sm) ||
      !(suffix.empty() || suffix == "a" || suffix == "f"))
    return bad("not an NVIDIA GPU target of the form sm_XY");
  if (sm < unsigned(kMinSmVersion))
    return bad(llvm::formatv("sm_{0} is older than the minimum", sm));
  // Every compile checks its arch: remember the ones the backend knows
  // (creating its subtarget info costs about a millisecond).
  static std::mutex mu;
  static llvm::StringSet<> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (known.contains(arch))
      return llvm::Error::success();
  }
  llvm::Expected<const llvm::Target *> target = nvptxTarget();
  if (!target)
    return target.takeError();
  // Created for the default CPU: LLVM warns on stderr about an unknown one.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      (*target)->createMCSubtargetInfo(llvm::Triple(kNVPTXTriple), "", ""));
  if (!sti || !sti->isCPUStringValid(arch))
    return bad("not a target LLVM " LLVM_VERSION_STRING "'s NVPTX backend knows");
  std::lock_guard<std::mutex> lock(mu);
  known.insert(arch);
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
bitfold::codegen::createNVPTXTargetMachine(llvm::StringRef arch) {
  if (llvm::Error e = checkTargetArch(arch))
    return std::move(e);
  llvm::Expected<const llvm::Target *> target = nvptxTarget();
  if (!target)
    return target.takeError();
  llvm::Triple triple(kNVPTXTriple);
  llvm::TargetOptions opts;
  opts.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  opts.NoInfsFPMath = false;
  opts.NoNaNsFPMath = false;
  opts.NoSignedZerosFPMath = false;
  // Default, not Aggressive: at Aggressive NVPTX's code generation runs GVN
  // twice more on a module optimizeModule has already run GVN on. Those
  // runs found nothing (the PTX of every stock kernel and config is the
  // same) and were about a third of the ptx stage.
  std::unique_ptr<llvm::TargetMachine> tm((*target)->createTargetMachine(
      triple, arch, /*Features=*/"", opts, llvm::Reloc::Static, std::nullopt,
      llvm::CodeGenOptLevel::Default));
  if (!tm)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "NVPTX target machine for " + arch +
                                       " could not be created");
  return tm;
}

void bitfold::codegen::optimizeModule(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  // The vectorizers find nothing in bitfold's kernels (the lowering already
  // emits vector loads and stores; PTX is identical without them) and cost
  // about 15% of O3.
  llvm::PipelineTuningOptions tuning;
  tuning.SLPVectorization = false;
  tuning.LoopVectorization = false;
  llvm::PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm =
      pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

llvm::Expected<std::string> bitfold::codegen::emitPTX(llvm::Module &m,
                                                      llvm::TargetMachine &tm) {
  m.setDataLayout(tm.createDataLayout());
  m.setTargetTriple(tm.getTargetTriple());
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr,
                             llvm::CodeGenFileType::AssemblyFile,
                             /*DisableVerify=*/kReleaseBuild))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "NVPTX cannot emit assembly");
  pm.run(m);
  return std::string(text.str());
}

/// A constant, or an intrinsic call on constants only (the backend may
/// constant-fold it, e.g. rcp.approx(1.0) = 1.0).
static bool constantLike(const llvm::Value *v) {
  if (llvm::isa<llvm::Constant>(v))
    return true;
  if (auto *ii = llvm::dyn_cast<llvm::IntrinsicInst>(v))
    return llvm::all_of(ii->args(),
                        [](const llvm::Use &u) { return llvm::isa<llvm::Constant>(u.get()); });
  return false;
}

void bitfold::codegen::countIRFacts(const llvm::Module &m, int64_t &fmaCalls,
                                    int64_t &fmaFoldable,
                                    bool &contractionAllowed) {
  fmaCalls = 0;
  fmaFoldable = 0;
  contractionAllowed = false;
  for (const llvm::Function &f : m)
    for (const llvm::BasicBlock &bb : f)
      for (const llvm::Instruction &i : bb) {
        if (auto *ii = llvm::dyn_cast<llvm::IntrinsicInst>(&i)) {
          llvm::Intrinsic::ID id = ii->getIntrinsicID();
          if (id == llvm::Intrinsic::fma) {
            ++fmaCalls;
            int consts = 0;
            for (int a = 0; a < 3; ++a)
              consts += constantLike(ii->getArgOperand(a));
            fmaFoldable += consts >= 2;
          }
          if (id == llvm::Intrinsic::fmuladd)
            contractionAllowed = true;
        }
        if (llvm::isa<llvm::FPMathOperator>(&i)) {
          llvm::FastMathFlags fmf = i.getFastMathFlags();
          if (fmf.allowContract() || fmf.allowReassoc() || fmf.approxFunc() ||
              fmf.noNaNs() || fmf.noInfs() || fmf.noSignedZeros() ||
              fmf.allowReciprocal())
            contractionAllowed = true;
        }
      }
}
