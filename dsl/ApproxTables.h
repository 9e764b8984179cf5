//===- dsl/ApproxTables.h - sm_90 approximate instructions, exactly -*- C++ -*-===//
//
// Bit-exact models of what an H200 (sm_90) computes for the approximate
// instructions bitfold emits, as captured and verified over all 2^32 inputs
// by tests/gpu/approx (docs/approx-models.md):
//
//  rcp.approx.ftz.f32   x = ±1.m * 2^e:  ±T[m] * 2^-e, subnormal results
//                       flushed to ±0; ±0/subnormal -> ±inf; ±inf -> ±0.
//  rsqrt.approx.ftz.f32 x = 1.m * 2^e:  T[p][m] * 2^-(e-p)/2 with p = e & 1;
//                       ±0/subnormal -> ±inf; x < 0 -> NaN; +inf -> +0.
//  ex2.approx.ftz.f32   n = |x| * 2^23 truncated; for x < 0 the hardware
//                       takes 1 - frac as the ones' complement of the 23
//                       fraction bits unless they are all zero:
//                       n' = x >= 0 || (n & 0x7fffff) == 0 ? ±n : ~n;
//                       result G[n' & 0x7fffff] * 2^(n' >> 23) (arithmetic
//                       shift), subnormal -> +0; |x| >= 128 -> +inf / +0;
//                       subnormal inputs count as 0.
//  NaN inputs (and rsqrt of negatives) give 0x7fffffff.
//
// T and G hold the hardware's output bits for the base inputs. They are
// stored as signed 4-bit corrections (two per byte, low nibble first)
// against the reference values below, each computed with IEEE double
// operations only (no libm), so every host decodes the same bits.
//
// Dependency-free on purpose: the GPU check program compiles it with nvcc.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_APPROXTABLES_H
#define BITFOLD_DSL_APPROXTABLES_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace bitfold::dsl::approx {

enum class Table { Rcp, Rsqrt, Ex2 };

/// Entries: rcp and ex2 are indexed by 23 bits, rsqrt by 24 (exponent
/// parity above the mantissa).
uint32_t tableEntries(Table t);
/// File name of the table's compressed corrections ("rcp.nib.zst", ...).
const char *tableFileName(Table t);
/// FNV-1a 64 of the decoded table (its uint32 entries, little-endian).
uint64_t expectedChecksum(Table t);
uint64_t checksum(const std::vector<uint32_t> &table);

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// RN(1 / 1.m): the correctly rounded reciprocal of 1 + m * 2^-23.
inline uint32_t rcpReference(uint32_t m) {
  double x = 1.0 + double(m) * 0x1p-23;
  return floatBits(float(1.0 / x));
}

/// RN(RN(1 / RN(sqrt(x)))) in double, x = 1.m (parity 0) or 2 * 1.m
/// (parity 1), index = parity << 23 | m.
inline uint32_t rsqrtReference(uint32_t index) {
  double x = (1.0 + double(index & 0x7fffffu) * 0x1p-23) *
             ((index >> 23) ? 2.0 : 1.0);
  return floatBits(float(1.0 / std::sqrt(x)));
}

/// 2^(f * 2^-23) for f < 2^23 by a 22-term Taylor series of e^t in double
/// (Horner with fma, every step an IEEE operation), rounded to float.
inline uint32_t ex2Reference(uint32_t f) {
  const double ln2 = 0x1.62e42fefa39efp-1;
  double t = double(f) * 0x1p-23 * ln2;
  double p = 1.0;
  for (int n = 22; n >= 1; --n)
    p = std::fma(t / double(n), p, 1.0);
  return floatBits(float(p));
}

/// The table from its packed corrections; an error message (and an empty
/// table) when the size is wrong or a correction is out of range.
std::vector<uint32_t> decodeTable(Table t, const uint8_t *nibbles, size_t bytes,
                                  std::string &error);

/// The models, on bit patterns, given the decoded table.
uint32_t rcpModel(uint32_t x, const uint32_t *rcpTable);
uint32_t rsqrtModel(uint32_t x, const uint32_t *rsqrtTable);
uint32_t ex2Model(uint32_t x, const uint32_t *ex2Table);

/// libdevice's __nv_expf as nvcc compiles it for sm_90 (and as the codegen
/// emits it): t = fma(a, log2e/252, 0.5); s = sat(t); j = fma.rm(s, 252,
/// 2^23*1.5 + 1); k = -(j - (2^23*1.5 + 127)); r = fma(a, log2e_hi, k);
/// r = fma(a, log2e_lo, r); ex2.approx.ftz(r) * bits(bits(j) << 23).
template <typename Ex2> float expfSequence(float a, Ex2 ex2) {
  const float log2eHi = bitsFloat(1069066811u);
  const float log2eLo = bitsFloat(849703008u);
  const float magic = bitsFloat(1262485504u); // 1.5 * 2^23
  const float step = log2eHi / 252.0f;
  float t = std::fma(a, step, 0.5f);
  float s = t > 0.0f ? (t < 1.0f ? t : 1.0f) : 0.0f; // saturate, NaN -> 0
  float bias = (-126.0f + magic) + 127.0f;
  // fma.rm(s, 252, bias): s*252 + bias is exact in double and lies in
  // [2^23, 2^24), where floats are integers, so rounding down is floor.
  float j = float(std::floor(double(s) * 252.0 + double(bias)));
  float k = -(j - (magic + 127.0f));
  float r = std::fma(a, log2eHi, k);
  r = std::fma(a, log2eLo, r);
  float scale = bitsFloat(floatBits(j) << 23);
  return ex2(r) * scale;
}

} // namespace bitfold::dsl::approx

#endif // BITFOLD_DSL_APPROXTABLES_H
