//===- tests/dsl/ApproxModelsTest.cpp - sm_90 approximation tables --------===//
//
// Integrity of the committed sm_90 tables (dsl/approx/sm90): they decode to
// the captured checksums, keep the monotonic shape of 1/x, 1/sqrt(x) and
// 2^x, stay within the PTX ISA's error bounds of the reference values, and
// reproduce values read on the H200. The exhaustive proof against the
// hardware is tests/gpu/approx/check.cu (docs/approx-models.md).
//
//===----------------------------------------------------------------------===//

#include "dsl/ApproxModels.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

using namespace bitfold;
using namespace bitfold::dsl::approx;

namespace {

const std::vector<uint32_t> &table(Table t) {
  llvm::Expected<const std::vector<uint32_t> &> tab = dsl::sm90Table(t);
  if (!tab) {
    ADD_FAILURE() << llvm::toString(tab.takeError());
    static const std::vector<uint32_t> empty;
    return empty;
  }
  return *tab;
}

const char *name(Table t) { return tableFileName(t); }

constexpr Table kTables[] = {Table::Rcp, Table::Rsqrt, Table::Ex2};

TEST(ApproxModels, EmbeddedTablesDecodeToTheCapturedChecksums) {
  for (Table t : kTables) {
    const std::vector<uint32_t> &tab = table(t);
    ASSERT_EQ(tab.size(), tableEntries(t)) << name(t);
    EXPECT_EQ(checksum(tab), expectedChecksum(t)) << name(t);
  }
}

TEST(ApproxModels, TablesFollowTheShapeOfTheirFunction) {
  // rcp and rsqrt fall over their base interval ([1,2), and [1,4) for rsqrt
  // with the parity bit on top), ex2 rises over [0,1): as bit patterns of
  // positive floats, too.
  for (Table t : kTables) {
    const std::vector<uint32_t> &tab = table(t);
    bool rising = t == Table::Ex2;
    for (size_t i = 1; i < tab.size(); ++i)
      if (rising ? tab[i] < tab[i - 1] : tab[i] > tab[i - 1]) {
        ADD_FAILURE() << name(t) << ": not monotonic at entry " << i << ": "
                      << llvm::formatv("{0:x8} after {1:x8}", tab[i], tab[i - 1]).str();
        break;
      }
  }
}

TEST(ApproxModels, TablesStayWithinTheIsaErrorOfTheReference) {
  // rcp and ex2 within 1 ulp, rsqrt within 2 (what the capture measured;
  // a table outside that was corrupted or captured from other hardware).
  for (Table t : kTables) {
    const std::vector<uint32_t> &tab = table(t);
    const int64_t bound = t == Table::Rsqrt ? 2 : 1;
    int64_t corrected = 0;
    for (uint32_t i = 0; i < tab.size(); ++i) {
      uint32_t ref = t == Table::Rcp     ? rcpReference(i)
                     : t == Table::Ex2 ? ex2Reference(i)
                                       : rsqrtReference(i);
      int64_t d = int64_t(tab[i]) - int64_t(ref);
      corrected += d != 0;
      if (d < -bound || d > bound) {
        ADD_FAILURE() << name(t) << ": entry " << i << " is " << d
                      << " ulps from its reference";
        break;
      }
    }
    // The hardware is not correctly rounded: an all-zero table is as wrong.
    EXPECT_GT(corrected, 1000) << name(t);
  }
}

struct Spot {
  uint32_t x, rcp, rsqrt, ex2;
};

// Read on the H200 (sm_90), 2026-12-01; the ex2 of negative inputs shows
// the ones'-complement fraction (-2^-23 -> 0x3f7ffffe, not 0x3f7fffff) and
// the exact powers at integers (-3 -> 0x3e000000).
constexpr Spot kSpots[] = {
    {0x3fc00000u, 0x3f2aaaabu, 0x3f5105ebu, 0x403504f3u}, // 1.5
    {0x40400000u, 0x3eaaaaabu, 0x3f13cd3au, 0x41000000u}, // 3
    {0x3f000000u, 0x40000000u, 0x3fb504f2u, 0x3fb504f3u}, // 0.5
    {0xb4000000u, 0xcb000000u, 0x7fffffffu, 0x3f7ffffeu}, // -2^-23
    {0xc0400000u, 0xbeaaaaabu, 0x7fffffffu, 0x3e000000u}, // -3
    {0xc0400002u, 0xbeaaaaa9u, 0x7fffffffu, 0x3dfffffau}, // -3.0000005
    {0x42f00001u, 0x3c088888u, 0x3dbaf4bau, 0x7b80002du}, // 120.00001
    {0x3dcccccdu, 0x41200000u, 0x404a62c2u, 0x3f892fdfu}, // 0.1
    {0xbdcccccdu, 0xc1200000u, 0x7fffffffu, 0x3f6edb40u}, // -0.1
    {0x7e800001u, 0x00000000u, 0x1ffffffeu, 0x7f800000u}, // 2^126: rcp flushed
    {0x00000001u, 0x7f800000u, 0x7f800000u, 0x3f800000u}, // subnormal: as +0
    {0x80000000u, 0xff800000u, 0xff800000u, 0x3f800000u}, // -0
    {0x7f800000u, 0x00000000u, 0x00000000u, 0x7f800000u}, // +inf
    {0xff800000u, 0x80000000u, 0x7fffffffu, 0x00000000u}, // -inf
    {0x7fc00001u, 0x7fffffffu, 0x7fffffffu, 0x7fffffffu}, // NaN
    {0xc2fd0000u, 0xbc01848eu, 0x7fffffffu, 0x00000000u}, // -126.5: flushed
    {0x7f7fffffu, 0x00000000u, 0x1f800000u, 0x7f800000u}, // FLT_MAX
};

TEST(ApproxModels, Sm90UnitReproducesValuesReadOnTheH200) {
  llvm::Expected<const dsl::ApproxUnit &> unit = dsl::sm90Approx();
  ASSERT_TRUE(bool(unit)) << llvm::toString(unit.takeError());
  for (const Spot &s : kSpots) {
    float x = bitsFloat(s.x);
    std::string at = llvm::formatv("x = {0:x8} ({1})", s.x, x).str();
    EXPECT_EQ(floatBits(unit->rcpApproxFtz(x)), s.rcp) << "rcp, " << at;
    EXPECT_EQ(floatBits(unit->rsqrtApproxFtz(x)), s.rsqrt) << "rsqrt, " << at;
    EXPECT_EQ(floatBits(unit->ex2ApproxFtz(x)), s.ex2) << "ex2, " << at;
  }
}

TEST(ApproxModels, ExpLibdeviceWithTheSm90UnitReproducesTheH200) {
  // nvcc's expf on the H200, 2026-12-01 (-87.5 has a subnormal result: the
  // final multiplication does not flush).
  const std::pair<uint32_t, uint32_t> spots[] = {
      {0x3f800000u, 0x402df854u}, {0xbf800000u, 0x3ebc5ab3u},
      {0x3f000000u, 0x3fd3094cu}, {0x41200000u, 0x46ac14efu},
      {0xc1200000u, 0x383e6bceu}, {0x42b00000u, 0x7ef882b7u},
      {0xc2af0000u, 0x006cb2bcu}, {0x3a83126fu, 0x3f8020c9u}};
  llvm::Expected<const dsl::ApproxUnit &> unit = dsl::sm90Approx();
  ASSERT_TRUE(bool(unit)) << llvm::toString(unit.takeError());
  for (auto [x, want] : spots)
    EXPECT_EQ(floatBits(dsl::expLibdevice(bitsFloat(x), *unit)), want)
        << llvm::formatv("expf({0:x8})", x).str();
}

TEST(ApproxModels, Sm90SelectsTheExactModelOtherArchsSaySoAndFallBack) {
  dsl::ApproxChoice sm90 = dsl::approxForArch("sm_90");
  EXPECT_TRUE(sm90.exact) << sm90.note;
  EXPECT_EQ(floatBits(sm90.unit->rsqrtApproxFtz(2.0f)), 0x3f3504f2u);
  dsl::ApproxChoice sm80 = dsl::approxForArch("sm_80");
  EXPECT_FALSE(sm80.exact);
  EXPECT_EQ(sm80.unit, &dsl::correctlyRoundedApprox());
  EXPECT_NE(sm80.note.find("sm_80"), std::string::npos) << sm80.note;
}

} // namespace
