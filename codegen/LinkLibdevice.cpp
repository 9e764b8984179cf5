//===- codegen/LinkLibdevice.cpp - libdevice into the LLVM module ---------===//
//
// nvcc without fast math links libdevice with __CUDA_FTZ=0 and
// __CUDA_PREC_SQRT=1 and inlines it (its functions are alwaysinline); so
// does this step, with the same bitcode, so a kernel's logf/tanhf/erff are
// nvcc's instruction for instruction (the interpreter's transcriptions are
// dsl/LibdeviceSequences.h).
//
// The functions are inlined here rather than by O3 so that the translated
// IR already holds every fma the kernel will execute: the PTX audit counts
// fmas before and after O3 and calls a new one contraction. libdevice
// writes its fmas as llvm.nvvm.fma.rn.f, which O3's InstCombine turns into
// llvm.fma anyway; they become llvm.fma here and join `fmaWritten`. The
// .ftz variants sit in branches NVVMReflect removes in O3 (__CUDA_FTZ=0),
// so none of them reaches the PTX (the audit would reject it).
//
//===----------------------------------------------------------------------===//

#include "codegen/LinkLibdevice.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Transforms/Utils/Cloning.h"

using namespace bitfold;
using namespace bitfold::codegen;

// The toolkit's bitcode, assembled into .rodata (the path comes from CMake).
__asm__(".section .rodata\n.balign 16\n"
        ".hidden bitfold_libdevice\n.globl bitfold_libdevice\n"
        "bitfold_libdevice:\n.incbin \"" BITFOLD_LIBDEVICE_FILE "\"\n"
        ".hidden bitfold_libdevice_end\n.globl bitfold_libdevice_end\n"
        "bitfold_libdevice_end:\n.previous\n");
// Its hash, in the preprocessed text too: compiler caches that hash only
// that text must not reuse an object assembled from another libdevice.
[[maybe_unused]] static const char kLibdeviceHash[] = BITFOLD_LIBDEVICE_SHA256;
extern "C" const char bitfold_libdevice[], bitfold_libdevice_end[];

llvm::StringRef codegen::embeddedLibdevice() {
  return {bitfold_libdevice, size_t(bitfold_libdevice_end - bitfold_libdevice)};
}

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "libdevice: " + msg);
}

/// Names of the libdevice functions `m` declares (calls without a body).
std::vector<std::string> wantedFunctions(const llvm::Module &m) {
  std::vector<std::string> names;
  for (const llvm::Function &f : m)
    if (f.isDeclaration() && f.getName().starts_with("__nv_"))
      names.push_back(f.getName().str());
  return names;
}

/// Inlines every call of the (now linked) function `name`, then erases it.
llvm::Error inlineEverywhere(llvm::Module &m, llvm::StringRef name) {
  llvm::Function *f = m.getFunction(name);
  if (!f || f->isDeclaration())
    return fail("the bitcode has no function " + name);
  llvm::SmallVector<llvm::CallBase *> calls;
  for (llvm::User *u : f->users())
    if (auto *call = llvm::dyn_cast<llvm::CallBase>(u))
      calls.push_back(call);
  for (llvm::CallBase *call : calls) {
    llvm::InlineFunctionInfo info;
    llvm::InlineResult r = llvm::InlineFunction(*call, info);
    if (!r.isSuccess())
      return fail("cannot inline " + name + ": " + r.getFailureReason());
  }
  if (!f->use_empty())
    return fail(name + " is used other than by calls");
  f->eraseFromParent();
  return llvm::Error::success();
}

/// llvm.nvvm.fma.rn.f -> llvm.fma (the same operation); returns how many.
int64_t canonicalizeFmas(llvm::Module &m) {
  llvm::SmallVector<llvm::IntrinsicInst *> fmas;
  for (llvm::Function &f : m)
    for (llvm::Instruction &i : llvm::instructions(f))
      if (auto *ii = llvm::dyn_cast<llvm::IntrinsicInst>(&i))
        if (ii->getIntrinsicID() == llvm::Intrinsic::nvvm_fma_rn_f)
          fmas.push_back(ii);
  for (llvm::IntrinsicInst *ii : fmas) {
    llvm::IRBuilder<> b(ii);
    llvm::Value *fma = b.CreateIntrinsic(
        llvm::Intrinsic::fma, {ii->getType()},
        {ii->getArgOperand(0), ii->getArgOperand(1), ii->getArgOperand(2)});
    ii->replaceAllUsesWith(fma);
    ii->eraseFromParent();
  }
  return int64_t(fmas.size());
}

} // namespace

llvm::Error codegen::linkLibdevice(llvm::Module &m,
                                   CompiledKernel::IRFacts &ir) {
  std::vector<std::string> wanted = wantedFunctions(m);
  if (wanted.empty())
    return llvm::Error::success();
  llvm::Expected<std::unique_ptr<llvm::Module>> lib =
      llvm::getLazyBitcodeModule(
          llvm::MemoryBufferRef(embeddedLibdevice(), "libdevice.10.bc"),
          m.getContext());
  if (!lib)
    return fail("cannot read the embedded bitcode: " +
                llvm::toString(lib.takeError()));
  // Same target as the kernel: no triple or data layout mismatch warnings.
  (*lib)->setTargetTriple(m.getTargetTriple());
  (*lib)->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(*lib),
                                llvm::Linker::Flags::LinkOnlyNeeded))
    return fail("linking the bitcode failed");
  // nvcc's settings without fast math; LLVM's NVVMReflect reads these flags.
  m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t(0));
  m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-prec-sqrt", uint32_t(1));
  for (const std::string &name : wanted)
    if (llvm::Error e = inlineEverywhere(m, name))
      return e;
  ir.fmaWritten += canonicalizeFmas(m);
  return llvm::Error::success();
}
