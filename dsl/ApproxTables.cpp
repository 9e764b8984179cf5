//===- dsl/ApproxTables.cpp - sm_90 approximate instructions, exactly -----===//
//
// Plain C++ (no LLVM): tests/gpu/approx/check.cu compiles this file too.
//
//===----------------------------------------------------------------------===//

#include "dsl/ApproxTables.h"

using namespace bitfold::dsl::approx;

uint32_t bitfold::dsl::approx::tableEntries(Table t) {
  return t == Table::Rsqrt ? 1u << 24 : 1u << 23;
}

const char *bitfold::dsl::approx::tableFileName(Table t) {
  switch (t) {
  case Table::Rcp: return "rcp.nib.zst";
  case Table::Rsqrt: return "rsqrt.nib.zst";
  case Table::Ex2: return "ex2.nib.zst";
  }
  return "";
}

uint64_t bitfold::dsl::approx::expectedChecksum(Table t) {
  // Of the tables captured on an H200 on 2026-12-01 (docs/approx-models.md).
  switch (t) {
  case Table::Rcp: return 0xf6c4479b058c7200ull;
  case Table::Rsqrt: return 0x7fd5ee41cc331920ull;
  case Table::Ex2: return 0x83cc80f65499677full;
  }
  return 0;
}

uint64_t bitfold::dsl::approx::checksum(const std::vector<uint32_t> &table) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t v : table)
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  return h;
}

static uint32_t reference(Table t, uint32_t i) {
  switch (t) {
  case Table::Rcp: return rcpReference(i);
  case Table::Rsqrt: return rsqrtReference(i);
  case Table::Ex2: return ex2Reference(i);
  }
  return 0;
}

std::vector<uint32_t> bitfold::dsl::approx::decodeTable(Table t,
                                                        const uint8_t *nibbles,
                                                        size_t bytes,
                                                        std::string &error) {
  const uint32_t n = tableEntries(t);
  if (bytes != n / 2) {
    error = std::string(tableFileName(t)) + ": " + std::to_string(bytes) +
            " bytes of corrections, expected " + std::to_string(n / 2);
    return {};
  }
  std::vector<uint32_t> table(n);
  for (uint32_t i = 0; i < n; ++i) {
    int d = (nibbles[i / 2] >> ((i & 1) * 4)) & 0xf;
    if (d == 8) { // the capture's out-of-range marker
      error = std::string(tableFileName(t)) + ": entry " + std::to_string(i) +
              " has no correction";
      return {};
    }
    table[i] = reference(t, i) + uint32_t(d >= 8 ? d - 16 : d);
  }
  return table;
}

uint32_t bitfold::dsl::approx::rcpModel(uint32_t x, const uint32_t *table) {
  uint32_t s = x & 0x80000000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 0) // ±0 and subnormals (flushed): ±inf
    return s | 0x7f800000u;
  if (e == 255)
    return m ? 0x7fffffffu : s;
  int r = int(table[m]) - (int(e) - 127) * (1 << 23);
  return r >= 0x00800000 ? s | uint32_t(r) : s; // subnormal results flushed
}

uint32_t bitfold::dsl::approx::rsqrtModel(uint32_t x, const uint32_t *table) {
  uint32_t s = x & 0x80000000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 0)
    return s | 0x7f800000u;
  if (s || (e == 255 && m))
    return 0x7fffffffu;
  if (e == 255)
    return 0;
  int u = int(e) - 127, p = u & 1;
  // Results lie in (2^-64, 2^63]: always normal.
  return uint32_t(int(table[uint32_t(p) << 23 | m]) - ((u - p) / 2) * (1 << 23));
}

uint32_t bitfold::dsl::approx::ex2Model(uint32_t x, const uint32_t *table) {
  uint32_t neg = x >> 31, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 255)
    return m ? 0x7fffffffu : (neg ? 0u : 0x7f800000u);
  if (e == 0)
    return table[0];
  if (e >= 134) // |x| >= 128
    return neg ? 0u : 0x7f800000u;
  // |x| * 2^23 truncated to an integer (|x| < 128: fits in 31 bits).
  uint32_t sig = m | 0x800000u;
  int sh = int(e) - 127;
  uint32_t mag = sh >= 0 ? sig << sh : (sh > -32 ? sig >> -sh : 0);
  int n = int(mag);
  if (neg)
    n = (mag & 0x7fffffu) ? ~n : -n;
  int r = int(table[uint32_t(n) & 0x7fffffu]) + (n >> 23) * (1 << 23);
  if (r < 0x00800000)
    return 0; // subnormal results flushed
  return r >= 0x7f800000 ? 0x7f800000u : uint32_t(r);
}
