//===- tests/fuzz/codegen/CodegenFuzz.cpp - Program text into LLVM --------===//
//
// The path from outside input into LLVM's NVPTX backend: kernel text (what
// bitfold_kernel_from_source and `bitfold compile --program` take) is
// parsed and verified, then compiled to PTX for a target, options, shape
// and tile config derived from a hash of the input (so every mutation also
// varies them): every target LLVM's NVPTX backend knows plus some it does
// not, PDL on or off, odd column counts and alignments, legal configs and
// raw ones. compile() must return a kernel or an error; an LLVM fatal
// error (which LLVM allows no recovery from) is a finding: the handler
// names it and aborts, so the fuzzer keeps the input.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "codegen/Codegen.h"
#include "dsl/Parser.h"

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/xxhash.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace bitfold;

namespace {

// Targets LLVM 22's NVPTX backend knows from sm_80 on, then ones bitfold
// or LLVM must refuse with a message.
const char *const kArchs[] = {
    "sm_80",   "sm_86",   "sm_87",   "sm_88",   "sm_89",   "sm_90",
    "sm_90a",  "sm_100",  "sm_100a", "sm_100f", "sm_101",  "sm_101a",
    "sm_101f", "sm_103",  "sm_103a", "sm_103f", "sm_110",  "sm_110a",
    "sm_110f", "sm_120",  "sm_120a", "sm_120f", "sm_121",  "sm_121a",
    "sm_121f", "sm_75",   "sm_60",   "sm_90f",  "sm_999",  "compute_90",
    "x86_64",  ""};
constexpr int kNumArchs = sizeof(kArchs) / sizeof(kArchs[0]);

const int64_t kCols[] = {1, 2, 7, 64, 96, 128, 1000, 2048, 4096, 4097,
                         65536, int64_t(1) << 24};
const int kAligns[] = {1, 2, 4, 8, 16};

[[noreturn]] void onFatalError(void *, const char *reason, bool) {
  std::fprintf(stderr, "fuzz finding: fatal error in LLVM: %s\n", reason);
  std::abort();
}

/// Takes `bits` bits off the hash.
uint64_t take(uint64_t &h, int bits) {
  uint64_t v = h & ((uint64_t(1) << bits) - 1);
  h >>= bits;
  return v;
}

keys::ShapeSpec shapeFor(const dsl::KernelDef &def, uint64_t &h) {
  keys::ShapeSpec shape;
  shape.cols = kCols[take(h, 4) % (sizeof(kCols) / sizeof(kCols[0]))];
  for (size_t i = 0; i < def.operands.size(); ++i)
    shape.alignBytes.push_back(take(h, 1) ? 16 : kAligns[take(h, 3) % 5]);
  shape.maxElementOffset = take(h, 1) ? shape.cols * 4096 : int64_t(1) << 33;
  return shape;
}

keys::TileConfig configFor(const dsl::KernelDef &def,
                              const keys::ShapeSpec &shape, uint64_t &h) {
  if (take(h, 2) == 0) { // raw: compile() must vet it
    keys::TileConfig c;
    c.rowsPerCta = int(take(h, 4));
    c.threadsPerRow = 1 << take(h, 4);
    c.vectorElems = int(take(h, 4));
    c.twoPass = take(h, 1);
    return c;
  }
  std::vector<keys::TileConfig> legal = codegen::enumerateConfigs(def, shape);
  if (legal.empty())
    return codegen::defaultConfig(def, shape);
  return legal[take(h, 8) % legal.size()];
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const bool handlers = [] {
    llvm::install_fatal_error_handler(onFatalError);
    return true;
  }();
  (void)handlers;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto def = dsl::parseKernel(text, "fuzz");
  if (!def) {
    llvm::consumeError(def.takeError());
    return 0;
  }
  uint64_t h = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(data, size));
  keys::CompileOptions options;
  options.arch = kArchs[take(h, 6) % kNumArchs];
  options.emitCubin = false; // PTX -> cubin is NVIDIA's, not LLVM's
  options.gridDependencyControl = take(h, 1);
  keys::ShapeSpec shape = shapeFor(**def, h);
  keys::TileConfig config = configFor(**def, shape, h);
  auto k = codegen::compile(**def, shape, config, options);
  if (!k) {
    std::string why = llvm::toString(k.takeError());
    bitfold::fuzz::check(!why.empty(), "a failed compile has no message");
    return 0;
  }
  bitfold::fuzz::check(!k->ptx.empty(), "a compile succeeded without PTX");
  return 0;
}
