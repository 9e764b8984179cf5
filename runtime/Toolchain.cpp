//===- runtime/Toolchain.cpp - The toolchain text, probed once per fingerprint -===//
//
// The cache key names the PTX -> cubin toolchain by its version text
// (codegen::toolchainVersion()), which costs a dlopen of nvJitLink and a
// `ptxas --version` process (8-9 ms). The fingerprint (the tool files'
// path, size, mtime and inode, the build's versions) costs a few stat calls;
// its version text is stored next to the kernels, so only the first process
// after a toolchain change probes.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"

#include "fileio/File.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"


using namespace bitfold;
using namespace bitfold::runtime;

namespace {

/// Toolchain texts are one short line; anything else is not ours.
constexpr uint64_t kMaxToolchainBytes = 4096;

std::string memoPath(llvm::StringRef cacheDir, llvm::StringRef fingerprint) {
  auto digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(fingerprint));
  llvm::SmallString<256> p(cacheDir);
  llvm::sys::path::append(p, "toolchain",
                          llvm::toHex(digest, true).substr(0, 32) + ".txt");
  return std::string(p);
}

/// Writes `text` to `path` (its folder created first), atomically.
llvm::Error writeAtomically(const std::string &path, llvm::StringRef text) {
  if (std::error_code ec = llvm::sys::fs::create_directories(
          llvm::sys::path::parent_path(path)))
    return llvm::errorCodeToError(ec);
  return fileio::writeFileAtomically(path, text, "toolchain memo");
}

} // namespace

std::string bitfold::runtime::resolveToolchain(const Compiler &comp,
                                              llvm::StringRef cacheDir) {
  if (!comp.toolchainVersion)
    return "";
  if (!comp.toolchainFingerprint || cacheDir.empty())
    return comp.toolchainVersion();
  const std::string fingerprint = comp.toolchainFingerprint();
  const std::string path = memoPath(cacheDir, fingerprint);
  // The stored file holds the fingerprint too: a hash collision or a file
  // from elsewhere is never trusted.
  if (auto bytes = readEntryFile(path, kMaxToolchainBytes)) {
    auto [stored, version] = llvm::StringRef(*bytes).split("\n--\n");
    if (stored == fingerprint && !version.empty() && !version.contains('\n'))
      return version.str();
  } else {
    llvm::consumeError(bytes.takeError());
  }
  std::string version = comp.toolchainVersion();
  if (version.empty() || version.find('\n') != std::string::npos)
    return version;
  // Not stored (a read-only shipped cache): the next process probes again,
  // which is all it costs, so no warning.
  llvm::consumeError(writeAtomically(path, fingerprint + "\n--\n" + version));
  return version;
}
