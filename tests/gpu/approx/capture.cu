// Capture and probe of the sm_90 approximate instructions bitfold emits
// (rcp/rsqrt/ex2.approx.ftz.f32, and libdevice expf built on ex2).
//
// 1. Tables: the hardware's output for every base input (rcp: 1.m; rsqrt:
//    1.m and 2*1.m; ex2: f*2^-23 and -f*2^-23, f < 2^23), written as signed
//    4-bit corrections against dsl/ApproxReference.h (-8 = out of range).
// 2. Probe: every one of the 2^32 inputs through the hardware and through
//    the table model with three candidate rules for the uncertain parts
//    (NaN payloads, subnormal results, how ex2 splits a negative input into
//    integer and fraction); mismatches counted per (sign, exponent) bucket
//    with up to 8 examples each, so one run decides every rule.
// 3. The codegen's expf sequence (fma/fma.rm/ex2) against nvcc's expf, all
//    2^32 inputs.
// 4. Raw fallback data (4-bit deltas against candidate 1/2 predictions) for
//    the two regions a candidate might miss: rcp of [2^126, 2^128) and ex2
//    of [-1, -0.25).
//
// The table model candidates below are the probe's; the model that won is
// dsl/ApproxTables.cpp (candidate 0 for rcp/rsqrt; for ex2 candidate 2 with
// integer inputs exact, which the probe's examples showed).
//
// Build: nvcc -O2 -std=c++20 -arch=sm_90 -I<repo> capture.cu
//            <repo>/dsl/ApproxTables.cpp -o capture
// Run:   capture OUTDIR   (writes rcp.nib rsqrt.nib ex2pos.nib ex2neg.nib
//                          rcpsub.nib ex2raw.nib report.txt)
#include "dsl/ApproxTables.h"
#include "tests/gpu/approx/CudaCheck.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace bitfold::dsl::approx;

#define BITFOLD_HD __host__ __device__
constexpr uint32_t kRcpEntries = 1u << 23, kRsqrtEntries = 1u << 24,
                   kEx2Entries = 1u << 23;


__device__ __forceinline__ float hwRcp(float x) {
  float r;
  asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float hwRsqrt(float x) {
  float r;
  asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float hwEx2(float x) {
  float r;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

enum { kRcp, kRsqrt, kEx2, kExpSeq, kOps };
constexpr int kCands = 3, kBuckets = 512, kExamples = 8;
const char *kOpNames[kOps] = {"rcp", "rsqrt", "ex2", "expseq"};

struct Example {
  uint32_t in, hw, pred;
};
__device__ unsigned long long gCount[kOps][kCands][kBuckets];
__device__ unsigned gSlot[kOps][kCands][kBuckets];
__device__ Example gEx[kOps][kCands][kBuckets][kExamples];

// ---- candidate models (integer only; host and device) ----------------------

BITFOLD_HD inline uint32_t nanRule(uint32_t x, int cand) {
  return cand == 0 ? 0x7fffffffu : cand == 1 ? (x | 0x00400000u) : 0x7fc00000u;
}

/// A subnormal result: cand 0 flushes, 1 truncates the 24-bit significand
/// of the table entry, 2 rounds it to nearest even.
BITFOLD_HD inline uint32_t subnormalRule(uint32_t t, int expField, int cand) {
  if (cand == 0)
    return 0;
  uint32_t sig = (t & 0x7fffffu) | 0x800000u;
  int sh = 1 - expField;
  if (sh >= 25)
    return 0;
  uint32_t q = sig >> sh;
  if (cand == 2) {
    uint32_t rem = sig & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1)))
      ++q;
  }
  return q;
}

BITFOLD_HD inline uint32_t predRcp(uint32_t x, int cand, const uint32_t *t) {
  uint32_t s = x & 0x80000000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 0)
    return s | 0x7f800000u;
  if (e == 255)
    return m ? nanRule(x, cand) : s;
  int r = int(t[m]) - (int(e) - 127) * (1 << 23);
  if (r >= 0x00800000)
    return s | uint32_t(r);
  return s | subnormalRule(t[m], r >> 23, cand);
}

BITFOLD_HD inline uint32_t predRsqrt(uint32_t x, int cand, const uint32_t *t) {
  uint32_t s = x & 0x80000000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 0)
    return s | 0x7f800000u;
  if (e == 255 && m)
    return nanRule(x, cand);
  if (s)
    return cand == 1 ? 0xffc00000u : nanRule(x, cand);
  if (e == 255)
    return 0;
  int u = int(e) - 127, p = u & 1;
  return uint32_t(int(t[uint32_t(p) << 23 | m]) - ((u - p) / 2) * (1 << 23));
}

/// x * 2^23 as an integer, for |x| < 128: cand 0 rounds down, 1 truncates
/// the magnitude, 2 takes the ones' complement of the truncated magnitude.
BITFOLD_HD inline int ex2Fixed(uint32_t x, int cand) {
  uint32_t e = (x >> 23) & 0xff, sig = (x & 0x7fffffu) | 0x800000u;
  int sh = int(e) - 127;
  uint32_t mag, rem;
  if (sh >= 0) {
    mag = sig << sh;
    rem = 0;
  } else if (sh > -32) {
    mag = sig >> -sh;
    rem = sig & ((1u << -sh) - 1);
  } else {
    mag = 0;
    rem = sig;
  }
  if (!(x >> 31))
    return int(mag);
  if (cand == 0)
    return -int(mag) - (rem != 0);
  if (cand == 1)
    return -int(mag);
  return -int(mag) - 1;
}

BITFOLD_HD inline uint32_t predEx2(uint32_t x, int cand, const uint32_t *g) {
  uint32_t s = x >> 31, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e == 255)
    return m ? nanRule(x, cand) : (s ? 0u : 0x7f800000u);
  if (e == 0)
    return g[0];
  if (e >= 134)
    return s ? 0u : 0x7f800000u;
  int n = ex2Fixed(x, cand);
  int i = n >> 23; // arithmetic: floor
  int r = int(g[uint32_t(n) & 0x7fffffu]) + i * (1 << 23);
  if (r < 0x00800000)
    return 0;
  if (r >= 0x7f800000)
    return 0x7f800000u;
  return uint32_t(r);
}

struct ExpConsts {
  float step, bias, magic127;
};

/// The codegen's expf sequence (codegen/LowerToMLIR.cpp expLibdevice).
__device__ float expSeq(float a, ExpConsts c) {
  const float log2eHi = __uint_as_float(1069066811u);
  const float log2eLo = __uint_as_float(849703008u);
  float t = __fmaf_rn(a, c.step, 0.5f);
  float s = t > 0.0f ? (t < 1.0f ? t : 1.0f) : 0.0f;
  float j = __fmaf_rd(s, 252.0f, c.bias);
  float k = -__fsub_rn(j, c.magic127);
  float r = __fmaf_rn(a, log2eHi, k);
  r = __fmaf_rn(a, log2eLo, r);
  float scale = __uint_as_float(__float_as_uint(j) << 23);
  return __fmul_rn(hwEx2(r), scale);
}

// ---- kernels ---------------------------------------------------------------

__device__ void record(int op, int cand, uint32_t x, uint32_t hw,
                       uint32_t pred) {
  uint32_t b = x >> 23;
  atomicAdd(&gCount[op][cand][b], 1ull);
  unsigned slot = atomicAdd(&gSlot[op][cand][b], 1u);
  if (slot < kExamples)
    gEx[op][cand][b][slot] = Example{x, hw, pred};
}

__global__ void buildTables(uint32_t *rcpT, uint32_t *rsqT, uint32_t *ex2G,
                            uint32_t *ex2H) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kRsqrtEntries)
    return;
  rsqT[i] = __float_as_uint(
      hwRsqrt(__uint_as_float(((127u + (i >> 23)) << 23) | (i & 0x7fffffu))));
  if (i >= kRcpEntries)
    return;
  rcpT[i] = __float_as_uint(hwRcp(__uint_as_float((127u << 23) | i)));
  float f = float(i) * 0x1p-23f; // exact
  ex2G[i] = __float_as_uint(hwEx2(f));
  ex2H[i] = __float_as_uint(hwEx2(-f));
}

__global__ void probe(const uint32_t *rcpT, const uint32_t *rsqT,
                      const uint32_t *ex2G, ExpConsts c) {
  uint32_t x = uint32_t(uint64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  float xf = __uint_as_float(x);
  uint32_t hw[3] = {__float_as_uint(hwRcp(xf)), __float_as_uint(hwRsqrt(xf)),
                    __float_as_uint(hwEx2(xf))};
  for (int cand = 0; cand < kCands; ++cand) {
    uint32_t p[3] = {predRcp(x, cand, rcpT), predRsqrt(x, cand, rsqT),
                     predEx2(x, cand, ex2G)};
    for (int op = 0; op < 3; ++op)
      if (p[op] != hw[op])
        record(op, cand, x, hw[op], p[op]);
  }
  uint32_t e = __float_as_uint(expf(xf)), s = __float_as_uint(expSeq(xf, c));
  if (e != s)
    record(kExpSeq, 0, x, e, s);
}

__global__ void rawRange(uint32_t first, int op, uint32_t *out) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  float xf = __uint_as_float(first + i);
  out[i] = __float_as_uint(op == kRcp ? hwRcp(xf) : hwEx2(xf));
}

// ---- host --------------------------------------------------------------------

/// Packs signed 4-bit values, two per byte, low nibble first.
struct Nibbles {
  std::vector<uint8_t> bytes;
  long escapes = 0, nonzero = 0;
  explicit Nibbles(size_t n) : bytes((n + 1) / 2, 0) {}
  void set(size_t i, long d) {
    if (d < -7 || d > 7) {
      d = -8;
      ++escapes;
    }
    nonzero += d != 0;
    bytes[i / 2] |= uint8_t((d & 0xf) << ((i & 1) * 4));
  }
  void write(const std::string &path) const {
    FILE *f = fopen(path.c_str(), "wb");
    if (!f || fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      fprintf(stderr, "cannot write %s\n", path.c_str());
      exit(1);
    }
    fclose(f);
  }
};

std::vector<uint32_t> toHost(const uint32_t *d, size_t n) {
  std::vector<uint32_t> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: capture OUTDIR\n");
    return 2;
  }
  std::string dir = argv[1];
  FILE *rep = fopen((dir + "/report.txt").c_str(), "w");
  if (!rep)
    return 1;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  fprintf(rep, "device %s sm_%d%d\n", prop.name, prop.major, prop.minor);

  uint32_t *rcpT, *rsqT, *ex2G, *ex2H, *raw;
  CK(cudaMalloc(&rcpT, kRcpEntries * 4));
  CK(cudaMalloc(&rsqT, kRsqrtEntries * 4));
  CK(cudaMalloc(&ex2G, kEx2Entries * 4));
  CK(cudaMalloc(&ex2H, kEx2Entries * 4));
  CK(cudaMalloc(&raw, (1u << 24) * 4));
  buildTables<<<kRsqrtEntries / 256, 256>>>(rcpT, rsqT, ex2G, ex2H);
  CK(cudaDeviceSynchronize());

  std::vector<uint32_t> hRcp = toHost(rcpT, kRcpEntries),
                        hRsq = toHost(rsqT, kRsqrtEntries),
                        hG = toHost(ex2G, kEx2Entries),
                        hH = toHost(ex2H, kEx2Entries);
  Nibbles nRcp(kRcpEntries), nRsq(kRsqrtEntries), nG(kEx2Entries),
      nH(kEx2Entries);
  for (uint32_t i = 0; i < kRcpEntries; ++i) {
    nRcp.set(i, long(hRcp[i]) - long(rcpReference(i)));
    nG.set(i, long(hG[i]) - long(ex2Reference(i)));
    // -f*2^-23 = -1 + (2^23 - f)*2^-23: 2^-1 times the ex2Reference of the
    // complement (f = 0 gives 1.0).
    uint32_t ref = i ? ex2Reference(kEx2Entries - i) - (1u << 23) : 0x3f800000u;
    nH.set(i, long(hH[i]) - long(ref));
  }
  for (uint32_t i = 0; i < kRsqrtEntries; ++i)
    nRsq.set(i, long(hRsq[i]) - long(rsqrtReference(i)));
  nRcp.write(dir + "/rcp.nib");
  nRsq.write(dir + "/rsqrt.nib");
  nG.write(dir + "/ex2pos.nib");
  nH.write(dir + "/ex2neg.nib");
  fprintf(rep, "table rcp nonzero %ld escapes %ld\n", nRcp.nonzero, nRcp.escapes);
  fprintf(rep, "table rsqrt nonzero %ld escapes %ld\n", nRsq.nonzero, nRsq.escapes);
  fprintf(rep, "table ex2pos nonzero %ld escapes %ld\n", nG.nonzero, nG.escapes);
  fprintf(rep, "table ex2neg nonzero %ld escapes %ld\n", nH.nonzero, nH.escapes);
  // What dsl/ApproxTables.cpp's expectedChecksum() pins.
  fprintf(rep, "checksum rcp %016llx rsqrt %016llx ex2 %016llx\n",
          (unsigned long long)checksum(hRcp), (unsigned long long)checksum(hRsq),
          (unsigned long long)checksum(hG));
  fprintf(rep, "rcp(1)=%08x rsqrt(1)=%08x rsqrt(2)=%08x ex2(0)=%08x ex2(-0.5)=%08x\n",
          hRcp[0], hRsq[0], hRsq[1u << 23], hG[0], hH[1u << 22]);

  // Raw fallback regions.
  struct Region {
    const char *file;
    int op;
    uint32_t first;
    int cand;
  } regions[2] = {{"rcpsub.nib", kRcp, 0x7e800000u, 1},
                  {"ex2raw.nib", kEx2, 0xbe800000u, 2}};
  for (const Region &r : regions) {
    rawRange<<<(1u << 24) / 256, 256>>>(r.first, r.op, raw);
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> h = toHost(raw, 1u << 24);
    Nibbles n(1u << 24);
    for (uint32_t i = 0; i < (1u << 24); ++i) {
      uint32_t x = r.first + i;
      uint32_t p = r.op == kRcp ? predRcp(x, r.cand, hRcp.data())
                                : predEx2(x, r.cand, hG.data());
      n.set(i, long(h[i]) - long(p));
    }
    n.write(dir + "/" + r.file);
    fprintf(rep, "raw %s vs cand %d: nonzero %ld escapes %ld\n", r.file,
            r.cand, n.nonzero, n.escapes);
  }

  volatile float log2eHi = bitsFloat(1069066811u), magic = bitsFloat(1262485504u);
  ExpConsts c;
  c.step = log2eHi / 252.0f;
  c.bias = (-126.0f + magic) + 127.0f;
  c.magic127 = magic + 127.0f;
  probe<<<1u << 24, 256>>>(rcpT, rsqT, ex2G, c);
  CK(cudaDeviceSynchronize());

  static unsigned long long count[kOps][kCands][kBuckets];
  static Example ex[kOps][kCands][kBuckets][kExamples];
  CK(cudaMemcpyFromSymbol(count, gCount, sizeof count));
  CK(cudaMemcpyFromSymbol(ex, gEx, sizeof ex));
  for (int op = 0; op < kOps; ++op)
    for (int cand = 0; cand < (op == kExpSeq ? 1 : kCands); ++cand) {
      unsigned long long total = 0;
      for (int b = 0; b < kBuckets; ++b)
        total += count[op][cand][b];
      fprintf(rep, "probe %s cand %d mismatches %llu\n", kOpNames[op], cand,
              total);
      printf("probe %s cand %d mismatches %llu\n", kOpNames[op], cand, total);
      for (int b = 0; b < kBuckets; ++b) {
        if (!count[op][cand][b])
          continue;
        fprintf(rep, "  bucket sign %d exp %3d: %llu", b >> 8, b & 255,
                count[op][cand][b]);
        for (int k = 0; k < kExamples && k < int(count[op][cand][b]); ++k) {
          const Example &q = ex[op][cand][b][k];
          fprintf(rep, " [%08x hw %08x pred %08x]", q.in, q.hw, q.pred);
        }
        fprintf(rep, "\n");
      }
    }
  fclose(rep);
  printf("done\n");
  return 0;
}
