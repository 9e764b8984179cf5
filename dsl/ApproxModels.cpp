//===- dsl/ApproxModels.cpp - per-arch models of approx instructions ------===//
//
// The sm_90 tables are embedded in the library (zstd-compressed 4-bit
// corrections, about 0.5 MB) and decoded once, on first use.
//
//===----------------------------------------------------------------------===//

#include "dsl/ApproxModels.h"

#include "llvm/Support/Compression.h"
#include "llvm/Support/FormatVariadic.h"

#include <mutex>

using namespace bitfold::dsl;
using approx::Table;

// The committed files, assembled into .rodata (the path comes from CMake).
#define BITFOLD_EMBED(sym, file)                                               \
  __asm__(".section .rodata\n.balign 16\n.hidden " #sym "\n.globl " #sym     \
          "\n" #sym ":\n.incbin \"" BITFOLD_APPROX_DATA_DIR "/" file           \
          "\"\n.hidden " #sym "_end\n.globl " #sym "_end\n" #sym               \
          "_end:\n.previous\n");
BITFOLD_EMBED(bitfold_sm90_rcp, "rcp.nib.zst")
BITFOLD_EMBED(bitfold_sm90_rsqrt, "rsqrt.nib.zst")
BITFOLD_EMBED(bitfold_sm90_ex2, "ex2.nib.zst")
// The data's hash, in the preprocessed text too: compiler caches that hash
// only that text must not reuse an object assembled from other tables.
#define BITFOLD_STR2(x) #x
#define BITFOLD_STR(x) BITFOLD_STR2(x)
[[maybe_unused]] static const char kApproxDataHash[] =
    BITFOLD_STR(BITFOLD_APPROX_DATA_HASH);
extern "C" const uint8_t bitfold_sm90_rcp[], bitfold_sm90_rcp_end[];
extern "C" const uint8_t bitfold_sm90_rsqrt[], bitfold_sm90_rsqrt_end[];
extern "C" const uint8_t bitfold_sm90_ex2[], bitfold_sm90_ex2_end[];

namespace {

llvm::ArrayRef<uint8_t> embedded(Table t) {
  switch (t) {
  case Table::Rcp: return {bitfold_sm90_rcp, bitfold_sm90_rcp_end};
  case Table::Rsqrt: return {bitfold_sm90_rsqrt, bitfold_sm90_rsqrt_end};
  case Table::Ex2: return {bitfold_sm90_ex2, bitfold_sm90_ex2_end};
  }
  return {};
}

llvm::Expected<std::vector<uint32_t>> loadTable(Table t) {
  auto fail = [&](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "sm_90 approximation table " +
                                       llvm::Twine(approx::tableFileName(t)) +
                                       ": " + why);
  };
  if (!llvm::compression::zstd::isAvailable())
    return fail("LLVM was built without zstd");
  llvm::SmallVector<uint8_t, 0> raw;
  if (llvm::Error e = llvm::compression::zstd::decompress(
          embedded(t), raw, approx::tableEntries(t) / 2))
    return fail(llvm::toString(std::move(e)));
  std::string error;
  std::vector<uint32_t> table =
      approx::decodeTable(t, raw.data(), raw.size(), error);
  if (!error.empty())
    return fail(error);
  uint64_t sum = approx::checksum(table);
  if (sum != approx::expectedChecksum(t))
    return fail(llvm::formatv("checksum {0:x16}, expected {1:x16}", sum,
                              approx::expectedChecksum(t)));
  return table;
}

struct Slot {
  std::once_flag once;
  std::vector<uint32_t> table;
  std::string error;
};

Slot &slot(Table t) {
  static Slot slots[3];
  return slots[int(t)];
}

/// The models over decoded tables (all three loaded and checked first).
class Sm90Approx final : public ApproxUnit {
public:
  Sm90Approx(const uint32_t *rcp, const uint32_t *rsqrt, const uint32_t *ex2)
      : rcp(rcp), rsqrt(rsqrt), ex2(ex2) {}
  float rcpApproxFtz(float x) const override {
    return approx::bitsFloat(approx::rcpModel(approx::floatBits(x), rcp));
  }
  float rsqrtApproxFtz(float x) const override {
    return approx::bitsFloat(approx::rsqrtModel(approx::floatBits(x), rsqrt));
  }
  float ex2ApproxFtz(float x) const override {
    return approx::bitsFloat(approx::ex2Model(approx::floatBits(x), ex2));
  }

private:
  const uint32_t *rcp, *rsqrt, *ex2;
};

} // namespace

llvm::Expected<const std::vector<uint32_t> &> bitfold::dsl::sm90Table(Table t) {
  Slot &s = slot(t);
  std::call_once(s.once, [&] {
    llvm::Expected<std::vector<uint32_t>> tab = loadTable(t);
    if (tab)
      s.table = std::move(*tab);
    else
      s.error = llvm::toString(tab.takeError());
  });
  if (!s.error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), s.error);
  return s.table;
}

llvm::Expected<const ApproxUnit &> bitfold::dsl::sm90Approx() {
  const uint32_t *data[3];
  for (Table t : {Table::Rcp, Table::Rsqrt, Table::Ex2}) {
    llvm::Expected<const std::vector<uint32_t> &> tab = sm90Table(t);
    if (!tab)
      return tab.takeError();
    data[int(t)] = tab->data();
  }
  static Sm90Approx unit(data[0], data[1], data[2]);
  return unit;
}

ApproxChoice bitfold::dsl::approxForArch(llvm::StringRef arch) {
  ApproxChoice c;
  c.unit = &correctlyRoundedApprox();
  if (arch != "sm_90" && arch != "sm_90a") {
    c.note = ("no captured model of the approximate instructions for " + arch +
              ": the interpreter rounds rcp/rsqrt/ex2.approx correctly, so "
              "results that use them may differ from the GPU in the last "
              "place (docs/approx-models.md says how to capture one)")
                 .str();
    return c;
  }
  llvm::Expected<const ApproxUnit &> unit = sm90Approx();
  if (!unit) {
    c.note = llvm::toString(unit.takeError()) +
             "; using correctly rounded stand-ins instead";
    return c;
  }
  c.unit = &*unit;
  c.exact = true;
  return c;
}
