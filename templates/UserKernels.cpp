//===- templates/UserKernels.cpp - Programs a user adds at run time -------===//

#include "templates/UserKernels.h"

#include "keys/Errors.h"

#include "dsl/Parser.h"
#include "fileio/File.h"

using namespace bitfold;
using namespace bitfold::templates;

/// The program an existing entry stands for; null for a kernel with
/// parameters or a per-shape definition (a stock template).
static KernelDefRef programOf(const KernelDescriptor &d) {
  if (!d.params.empty() || d.dependsOnCols)
    return nullptr;
  auto values = d.parseParams("");
  if (!values) {
    llvm::consumeError(values.takeError());
    return nullptr;
  }
  auto sig = d.signature(*values);
  if (!sig) {
    llvm::consumeError(sig.takeError());
    return nullptr;
  }
  return *sig;
}

/// `existing` may serve for `def` only if it is the same program.
static llvm::Expected<DescriptorRef> reuse(DescriptorRef existing,
                                           const dsl::KernelDef &def) {
  KernelDefRef prior = programOf(*existing);
  if (!prior)
    return keys::usageError(
        "'" + def.name + "' is the name of a stock kernel; rename the program");
  if (prior->hash != def.hash)
    return keys::usageError("a different program named '" + def.name +
                            "' is already registered (hash " +
                            llvm::StringRef(prior->hash).take_front(12) +
                            " vs " + llvm::StringRef(def.hash).take_front(12) +
                            ")");
  return existing;
}

llvm::Expected<DescriptorRef> templates::addUserKernel(KernelDefRef def) {
  if (!def || def->name.empty())
    return keys::usageError("a user kernel needs a named, verified program");
  Registry &reg = Registry::global();
  if (DescriptorRef existing = reg.find(def->name))
    return reuse(existing, *def);
  if (llvm::Error e = reg.add(userKernel(def, "user program " +
                                                  def->hash.substr(0, 12),
                                         /*bitExact=*/true))) {
    // Lost a race with another thread adding the same name.
    llvm::consumeError(std::move(e));
    if (DescriptorRef existing = reg.find(def->name))
      return reuse(existing, *def);
    return keys::usageError("cannot register '" + def->name + "'");
  }
  return reg.find(def->name);
}

llvm::Expected<DescriptorRef>
templates::addUserKernelText(llvm::StringRef text,
                             llvm::StringRef sourceName) {
  auto def = dsl::parseKernel(text, sourceName);
  if (!def)
    return def.takeError();
  return addUserKernel(*def);
}

llvm::Expected<DescriptorRef>
templates::addUserKernelFile(llvm::StringRef path) {
  auto text =
      fileio::readBoundedFile(path, fileio::kMaxProgramBytes, "program file");
  if (!text)
    return keys::usageError(llvm::toString(text.takeError()));
  return addUserKernelText(*text, path);
}
