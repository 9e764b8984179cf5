//===- tests/fuzz/cache_entry/CacheEntryFuzz.cpp - The cache entry decoder -===//
//
// Input: a raw entry file ("BITFOLD-KERNEL ..."), decoded as is; or
// "<metadata JSON>\0<PTX>\0<cubin>", assembled into an entry with a correct
// header and checksum, so mutations reach the metadata checks instead of
// dying at the checksum. Properties: decoding never crashes or throws; what
// decodes is self-consistent (config and ABI in range) and decodes again,
// equal, after encodeEntry.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "runtime/KernelCache.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace bitfold;
using namespace bitfold::runtime;

using bitfold::fuzz::check;
using bitfold::fuzz::Reader;

namespace {

std::string assemble(llvm::StringRef in) {
  auto [meta, rest] = in.split('\0');
  auto [ptx, cubin] = rest.split('\0');
  std::string payload = (meta + ptx + cubin).str();
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "BITFOLD-KERNEL " << kCacheFormat << "\n"
     << meta.size() << " " << ptx.size() << " " << cubin.size() << " "
     << llvm::format_hex_no_prefix(llvm::xxh3_64bits(llvm::StringRef(payload)),
                                   16)
     << "\n"
     << payload;
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef in(reinterpret_cast<const char *>(data), size);
  std::string bytes =
      in.starts_with("BITFOLD-KERNEL") ? in.str() : assemble(in);
  auto e = decodeEntry(bytes);
  if (!e) {
    llvm::consumeError(e.takeError());
    return 0;
  }
  const codegen::CompiledKernel &k = e->kernel;
  check(k.config.rowsPerCta >= 1 && k.config.threadsPerRow >= 1 &&
            k.config.ctaThreads() <= 1024 && k.config.vectorElems >= 1,
        "a decoded config is out of range");
  check(k.abi.numGroups >= 1 && k.abi.numOperands >= 0 &&
            k.abi.paramCount() < 100000,
        "a decoded ABI is out of range");
  check(!k.entryName.empty() && !e->keyText.empty(), "no entry name or key");
  CacheKey key;
  key.kernelName = "fuzz";
  auto again = decodeEntry(encodeEntry(key, k, 1.0));
  check(bool(again), "a decoded kernel does not re-encode");
  check(again->kernel.ptx == k.ptx && again->kernel.cubin == k.cubin &&
            again->kernel.config == k.config &&
            again->kernel.abi.paramCount() == k.abi.paramCount(),
        "a re-encoded kernel differs");
  return 0;
}
