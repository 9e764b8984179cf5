//===- keys/TuneKey.cpp - What a tuning result is keyed on ----------------===//

#include "keys/TuneKey.h"

#include "bitfold/Config.h"

#include "llvm/Support/FormatVariadic.h"

#include <vector>

using namespace bitfold;
using namespace bitfold::keys;

std::string TuneEnvironment::mismatch(const TuneEnvironment &cur) const {
  if (gpuName != cur.gpuName || arch != cur.arch)
    return llvm::formatv("tuned on GPU '{0}' ({1}), this is '{2}' ({3})",
                         gpuName, arch, cur.gpuName, cur.arch);
  std::vector<std::string> diffs;
  auto cmp = [&](const char *what, const std::string &a, const std::string &b) {
    if (a != b)
      diffs.push_back(llvm::formatv("{0} '{1}', this is '{2}'", what, a, b));
  };
  cmp("bitfold", bitfoldVersion, cur.bitfoldVersion);
  cmp("LLVM", llvmVersion, cur.llvmVersion);
  cmp("toolchain", toolchain, cur.toolchain);
  if (diffs.empty())
    return "";
  std::string s = "tuned with ";
  for (size_t i = 0; i < diffs.size(); ++i)
    s += (i ? "; " : "") + diffs[i];
  return s;
}

std::string TuneKey::problemText() const {
  return "kernelHash: " + kernelHash + "\nshapeClass: " + shapeClass +
         "\ndtypes: " + dtypes + "\n";
}

std::string TuneKey::text() const {
  return problemText() + "gpu: " + env.gpuName + "\narch: " + env.arch +
         "\nbitfold: " + env.bitfoldVersion + "\nllvm: " + env.llvmVersion +
         "\ntoolchain: " + env.toolchain + "\n";
}

std::string keys::dtypesText(const dsl::KernelDef &def) {
  std::string s;
  for (size_t i = 0; i < def.operands.size(); ++i)
    s += (i ? "," : "") + def.operands[i].name + ":" +
         dsl::dtypeName(def.operands[i].dtype).str();
  return s;
}

TuneEnvironment keys::currentEnvironment(llvm::StringRef gpuName,
                                        llvm::StringRef arch,
                                        llvm::StringRef toolchain) {
  return TuneEnvironment{gpuName.str(), arch.str(), BITFOLD_VERSION,
                         BITFOLD_LLVM_VERSION, toolchain.str()};
}

TuneKey keys::tuneKeyFor(const dsl::KernelDef &def, llvm::StringRef shapeClass,
                         const TuneEnvironment &env) {
  return TuneKey{def.name, def.hash, shapeClass.str(), dtypesText(def), env};
}
