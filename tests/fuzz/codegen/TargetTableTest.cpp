//===- tests/fuzz/codegen/TargetTableTest.cpp - Every target into LLVM ----===//
//
// The deterministic half of the codegen fuzz target: every processor
// LLVM's NVPTX backend lists (read from the backend, so a newer LLVM's are
// covered too) plus malformed names, for one kernel with PDL on; and every
// stock kernel for the oldest supported, the sm_90a and the newest target.
// A target bitfold supports must compile to PTX for it; any other must be
// refused by checkTargetArch's message. An LLVM fatal error ends the
// process: the handler below names the case first.
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "templates/Problem.h"
#include "templates/Registry.h"

#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/TargetParser/Triple.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace bitfold;

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();

namespace {

std::string currentCase; // what is being compiled, for the fatal handler

void onFatalError(void *, const char *reason, bool) {
  std::fprintf(stderr, "bitfold test: fatal error in LLVM compiling %s: %s\n",
               currentCase.c_str(), reason);
}

const bool handlers = [] {
  llvm::install_fatal_error_handler(onFatalError);
  return true;
}();

/// Every processor name of LLVM's NVPTX backend, in its table's order.
std::vector<std::string> nvptxProcessors() {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string err;
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  EXPECT_NE(t, nullptr) << err;
  std::vector<std::string> names;
  if (!t)
    return names;
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      t->createMCSubtargetInfo(triple, "sm_80", ""));
  for (const llvm::SubtargetSubTypeKV &kv : sti->getAllProcessorDescriptions())
    names.push_back(kv.Key);
  return names;
}

struct Shaped {
  std::string name;
  templates::KernelDefRef def;
  keys::ShapeSpec shape;
};

/// `desc` with its default parameters at its first seed shape.
Shaped shaped(const templates::KernelDescriptor &desc) {
  Shaped s{desc.name, nullptr, {}};
  auto params = desc.parseParams("");
  auto sig = params ? desc.signature(*params)
                    : llvm::Expected<templates::KernelDefRef>(params.takeError());
  auto dims = templates::parseDims(desc.seedShapes.at(0));
  if (!sig || !dims) {
    ADD_FAILURE() << desc.name << ": "
                  << (sig ? llvm::toString(dims.takeError())
                          : llvm::toString(sig.takeError()));
    return s;
  }
  auto problem = templates::shapeFromDims(**sig, *dims);
  if (!problem) {
    ADD_FAILURE() << desc.name << ": " << llvm::toString(problem.takeError());
    return s;
  }
  auto def = desc.build(*params, problem->cols);
  if (!def) {
    ADD_FAILURE() << desc.name << ": " << llvm::toString(def.takeError());
    return s;
  }
  s.def = *def;
  s.shape.cols = problem->cols;
  s.shape.alignBytes.assign(s.def->operands.size(), 16);
  s.shape.maxElementOffset = problem->totalRows() * problem->cols;
  return s;
}

/// Compiles `s` to PTX for `arch` with PDL; "" on success, else the error.
std::string compileFor(const Shaped &s, const std::string &arch) {
  currentCase = s.name + " for '" + arch + "' with PDL";
  keys::CompileOptions options;
  options.arch = arch;
  options.emitCubin = false;
  options.gridDependencyControl = true;
  auto k = codegen::compile(*s.def, s.shape,
                            codegen::defaultConfig(*s.def, s.shape), options);
  if (!k)
    return llvm::toString(k.takeError());
  if (k->ptx.find(".target " + arch) == std::string::npos)
    return "PTX without '.target " + arch + "'";
  return "";
}

std::string errorOf(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

} // namespace

TEST(LlvmTargets, EveryTargetTheBackendListsCompilesOrIsRefusedUpFront) {
  ASSERT_TRUE(handlers);
  auto desc = templates::Registry::global().lookup("ln_modulate");
  ASSERT_TRUE(bool(desc)) << llvm::toString(desc.takeError());
  Shaped s = shaped(**desc);
  ASSERT_TRUE(s.def);
  std::vector<std::string> archs = nvptxProcessors();
  ASSERT_GE(archs.size(), 10u);
  for (const char *bad : {"", "sm_", "sm_90x", "sm_80a", "sm_999", "compute_90",
                          "x86_64", "sm_90 ", "SM_90", "sm_0090"})
    archs.push_back(bad);
  int supported = 0;
  for (const std::string &arch : archs) {
    std::string refused = errorOf(codegen::checkTargetArch(arch));
    std::string got = compileFor(s, arch);
    if (refused.empty()) {
      ++supported;
      EXPECT_EQ(got, "") << "ln_modulate " << s.shape.str() << " for '" << arch
                         << "' with PDL";
    } else {
      EXPECT_EQ(got, refused) << "'" << arch << "' must be refused up front";
      EXPECT_NE(refused.find("'" + arch + "'"), std::string::npos) << refused;
    }
  }
  EXPECT_GE(supported, 10) << "of " << archs.size() << " targets";
}

TEST(LlvmTargets, EveryStockKernelCompilesForTheOldestSm90aAndTheNewestTarget) {
  ASSERT_TRUE(handlers);
  std::vector<std::string> archs = nvptxProcessors();
  std::string newest;
  for (const std::string &a : archs)
    if (!codegen::checkTargetArch(a).operator bool() &&
        (newest.empty() || std::stoi(a.substr(3)) > std::stoi(newest.substr(3))))
      newest = a;
  ASSERT_FALSE(newest.empty());
  for (const templates::DescriptorRef &desc : templates::Registry::global().all()) {
    Shaped s = shaped(*desc);
    if (!s.def)
      continue;
    for (const std::string &arch : {std::string("sm_80"), std::string("sm_90a"), newest})
      EXPECT_EQ(compileFor(s, arch), "")
          << desc->name << " " << s.shape.str() << " for '" << arch << "' with PDL";
  }
}
