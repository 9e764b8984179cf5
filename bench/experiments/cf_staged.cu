// Does staging the tile through shared memory close the channels-first gap?
//
// The Wan norm over dim 1 of a contiguous NCDHW bf16 tensor
// [1, 96, 4, 480, 832] (C = 96 planes of S = 1597440 pixels), written by
// hand with the fold of bitfold's exact x form (f32 sum of squares in
// aten's lane order, sqrt, max with eps) and five amounts of per-element
// math (`epilogue`, from the exact chain down to one product), in these
// plans:
//
//   direct:      bitfold's default r64.t4.v1.p1.o2: a CTA of 128 threads owns
//                64 pixels; its 4 warps are aten's 4 lanes (channels l,
//                l + 4, ...), each thread 2 adjacent pixels (4-byte
//                accesses), the row held in registers, the lane tree
//                through shared memory. Each plane is read in 128-byte runs.
//   staged<P>:   a CTA of 2P threads owns P pixels; it copies its [96][P]
//                tile to shared memory with 16-byte cp.async, folds and
//                normalises from there (same lanes, same order), writes the
//                results back into the tile and stores them with 16-byte
//                accesses: 2P-byte runs a plane, no row in registers
//                ("norm"), or the thread's channels read from the tile
//                once and held in registers as direct holds them ("regs").
//   bulk<P>:     the tile in (and, "in+out", out) by the bulk-copy engine:
//                one cp.async.bulk a plane, an mbarrier, no per-thread
//                accesses of the tile's global memory.
//   pipe<P>:     staged<P> in a persistent loop (grid = SMs x CTAs that
//                fit), the next tile's cp.async issued before this tile's
//                math.
//
// and, for the ceiling of each access pattern, a cudaMemcpyAsync of the same
// bytes and a staged copy (tile in, tile out) at each P. Every norm plan's
// output is compared bit for bit with direct's. Timed as bench_kernels.py's
// steady column: back to back over two rotating buffer sets (together
// larger than L2), cudaEvent time per launch, median of 7.
//
// Build (CUDA toolkit) and run (GPU host):
//   nvcc -O3 -arch=sm_90 bench/experiments/cf_staged.cu -o /tmp/cf_staged && /tmp/cf_staged
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int C = 96, LANES = 4, PER_LANE = C / LANES;
constexpr long S = 4L * 480 * 832;
constexpr float EPS = 1e-12f;

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));    \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

const char *const kLevel[] = {"heavy", "light", "floor", "medium", "low"};

__device__ inline float bf(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

/// The x form's per-element chain: y = silu(bf(bf(bf(x / d) * scale) * g)).
/// Heavy: div.rn twice and expf, as the plain exact chain. Light: about
/// the work of bitfold's fast paths (a reciprocal with one correction step
/// for x / d, SiLU by ex2.approx and rcp.approx), not exact. Floor
/// (Light = 2): x times the pixel's reciprocal, nothing else. Medium (3)
/// and low (4) lie between: the approximate SiLU with one bf16 rounding or
/// none, to find the level whose direct time is bitfold's.
template <int Light>
__device__ inline float epilogue(float x, float d, float r, float scale,
                                 float g) {
  if (Light == 0) {
    float w = bf(bf(bf(__fdiv_rn(x, d)) * scale) * g);
    return __fdiv_rn(w, 1.0f + expf(-w));
  }
  if (Light == 2) // the floor: one product a element
    return x * r;
  if (Light == 3) { // medium: one rounding, approximate SiLU
    float w = bf(x * r * g);
    return __fdividef(w, 1.0f + __expf(-w));
  }
  if (Light == 4) { // low: approximate SiLU alone
    float w = x * r * g;
    return __fdividef(w, 1.0f + __expf(-w));
  }
  float q = x * r;
  q = fmaf(fmaf(-q, d, x), r, q);
  float w = bf(bf(bf(q) * scale) * g);
  return __fdividef(w, 1.0f + __expf(-w));
}

template <int Light>
__device__ inline __nv_bfloat162 epilogue2(__nv_bfloat162 x, float2 d,
                                           float2 r, float scale, float g) {
  float2 f = __bfloat1622float2(x);
  return __floats2bfloat162_rn(epilogue<Light>(f.x, d.x, r.x, scale, g),
                               epilogue<Light>(f.y, d.y, r.y, scale, g));
}

__device__ inline float2 rcp2(float2 d) {
  return make_float2(__frcp_rn(d.x), __frcp_rn(d.y));
}

/// A lane's fold of its pixel pair over its channels l, l + 4, ... (`v(k)`
/// is channel l + 4k) into four accumulators round robin, merged serially
/// (aten's lane order).
template <typename Get> __device__ inline float2 laneSum(Get v) {
  float a[2][4] = {};
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k) {
    float2 f = __bfloat1622float2(v(k));
    a[0][k % 4] = fmaf(f.x, f.x, a[0][k % 4]);
    a[1][k % 4] = fmaf(f.y, f.y, a[1][k % 4]);
  }
  return make_float2(((a[0][0] + a[0][1]) + a[0][2]) + a[0][3],
                     ((a[1][0] + a[1][1]) + a[1][2]) + a[1][3]);
}

/// block_y_reduce over the 4 lanes (offsets 2, 1), then the divisor.
__device__ inline float denom(const float *red, int stride, int px) {
  float t = (red[px] + red[2 * stride + px]) +
            (red[stride + px] + red[3 * stride + px]);
  return fmaxf(sqrtf(t), EPS);
}

template <int Light>
__global__ void __launch_bounds__(128)
direct(const __nv_bfloat16 *x, const __nv_bfloat16 *gamma, float scale,
       __nv_bfloat16 *y) {
  __shared__ float red[LANES * 64];
  const int lane = threadIdx.x / 32, pp = threadIdx.x % 32;
  const long p0 = blockIdx.x * 64L + 2 * pp;
  __nv_bfloat162 xs[PER_LANE];
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k)
    xs[k] = *reinterpret_cast<const __nv_bfloat162 *>(
        x + (lane + LANES * k) * S + p0);
  float2 s = laneSum([&](int k) { return xs[k]; });
  red[lane * 64 + 2 * pp] = s.x;
  red[lane * 64 + 2 * pp + 1] = s.y;
  __syncthreads();
  float2 d = make_float2(denom(red, 64, 2 * pp), denom(red, 64, 2 * pp + 1));
  float2 r = rcp2(d);
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k) {
    int c = lane + LANES * k;
    *reinterpret_cast<__nv_bfloat162 *>(y + c * S + p0) =
        epilogue2<Light>(xs[k], d, r, scale, __bfloat162float(gamma[c]));
  }
}

/// One tile of P pixels starting at `base`: fold, normalise, results back
/// into the tile (2P threads: lane = t / (P / 2), pixel pair t % (P / 2)).
template <int P, int Light>
__device__ inline void normTile(__nv_bfloat16 *tile, float *red,
                                const float *g, float scale) {
  const int lane = threadIdx.x / (P / 2), pp = threadIdx.x % (P / 2);
  auto at = [&](int c) {
    return reinterpret_cast<__nv_bfloat162 *>(tile + c * P + 2 * pp);
  };
  float2 s = laneSum([&](int k) { return *at(lane + LANES * k); });
  red[lane * P + 2 * pp] = s.x;
  red[lane * P + 2 * pp + 1] = s.y;
  __syncthreads();
  float2 d = make_float2(denom(red, P, 2 * pp), denom(red, P, 2 * pp + 1));
  float2 r = rcp2(d);
#pragma unroll 4
  for (int k = 0; k < PER_LANE; ++k) {
    int c = lane + LANES * k;
    *at(c) = epilogue2<Light>(*at(c), d, r, scale, g[c]);
  }
}

/// normTile with the pixel pair's channels read from the tile once and
/// held in registers (direct's registers, staged's accesses); each result
/// goes to `put(c, pp, value)`.
template <int P, int Light, typename Put>
__device__ inline void normTileRegs(__nv_bfloat16 *tile, float *red,
                                    const float *g, float scale, Put put) {
  const int lane = threadIdx.x / (P / 2), pp = threadIdx.x % (P / 2);
  auto at = [&](int c) {
    return reinterpret_cast<__nv_bfloat162 *>(tile + c * P + 2 * pp);
  };
  __nv_bfloat162 xs[PER_LANE];
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k)
    xs[k] = *at(lane + LANES * k);
  float2 s = laneSum([&](int k) { return xs[k]; });
  red[lane * P + 2 * pp] = s.x;
  red[lane * P + 2 * pp + 1] = s.y;
  __syncthreads();
  float2 d = make_float2(denom(red, P, 2 * pp), denom(red, P, 2 * pp + 1));
  float2 r = rcp2(d);
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k) {
    int c = lane + LANES * k;
    put(c, pp, epilogue2<Light>(xs[k], d, r, scale, g[c]));
  }
}

/// normTileRegs' results back into the tile, where the thread read them.
template <int P> struct IntoTile {
  __nv_bfloat16 *tile;
  __device__ void operator()(int c, int pp, __nv_bfloat162 v) const {
    *reinterpret_cast<__nv_bfloat162 *>(tile + c * P + 2 * pp) = v;
  }
};

template <int P>
__device__ inline void loadTile(__nv_bfloat16 *tile, const __nv_bfloat16 *x,
                                long base) {
  constexpr int chunks = C * P / 8, perPlane = P / 8;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    int c = i / perPlane, off = (i % perPlane) * 8;
    __pipeline_memcpy_async(tile + c * P + off, x + c * S + base + off, 16);
  }
  __pipeline_commit();
}

template <int P>
__device__ inline void storeTile(const __nv_bfloat16 *tile, __nv_bfloat16 *y,
                                 long base) {
  constexpr int chunks = C * P / 8, perPlane = P / 8;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    int c = i / perPlane, off = (i % perPlane) * 8;
    *reinterpret_cast<uint4 *>(y + c * S + base + off) =
        *reinterpret_cast<const uint4 *>(tile + c * P + off);
  }
}

template <int P> constexpr size_t tileSmem() {
  return C * P * sizeof(__nv_bfloat16) + LANES * P * sizeof(float) +
         C * sizeof(float);
}

/// tileSmem's three parts: the [C][P] tile, the lanes' partial sums, gamma.
struct TileParts {
  __nv_bfloat16 *tile;
  float *red, *g;
};
template <int P> __device__ inline TileParts tileParts(unsigned char *smem) {
  auto *tile = reinterpret_cast<__nv_bfloat16 *>(smem);
  auto *red = reinterpret_cast<float *>(tile + C * P);
  return {tile, red, red + LANES * P};
}

template <int P, int Light>
__global__ void staged(const __nv_bfloat16 *x, const __nv_bfloat16 *gamma,
                       float scale, __nv_bfloat16 *y, int normalise) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto [tile, red, g] = tileParts<P>(smem);
  const long base = blockIdx.x * long(P);
  loadTile<P>(tile, x, base);
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    g[c] = __bfloat162float(gamma[c]);
  __pipeline_wait_prior(0);
  __syncthreads();
  if (normalise == 1)
    normTile<P, Light>(tile, red, g, scale);
  if (normalise == 2)
    normTileRegs<P, Light>(tile, red, g, scale, IntoTile<P>{tile});
  if (normalise)
    __syncthreads();
  storeTile<P>(tile, y, base);
}

/// Persistent: tiles blockIdx.x, + gridDim.x, ...; two tile buffers, the
/// next tile's copy in flight during this tile's math and stores.
template <int P, int Light>
__global__ void pipe(const __nv_bfloat16 *x, const __nv_bfloat16 *gamma,
                     float scale, __nv_bfloat16 *y, long tiles) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto *buf0 = reinterpret_cast<__nv_bfloat16 *>(smem);
  auto *buf1 = buf0 + C * P;
  auto *red = reinterpret_cast<float *>(buf1 + C * P);
  float *g = red + LANES * P;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    g[c] = __bfloat162float(gamma[c]);
  long t = blockIdx.x;
  if (t < tiles)
    loadTile<P>(buf0, x, t * P);
  for (int i = 0; t < tiles; t += gridDim.x, ++i) {
    __nv_bfloat16 *cur = i % 2 ? buf1 : buf0, *nxt = i % 2 ? buf0 : buf1;
    long t2 = t + gridDim.x;
    if (t2 < tiles)
      loadTile<P>(nxt, x, t2 * P);
    else
      __pipeline_commit(); // an empty group keeps wait_prior(1) uniform
    __pipeline_wait_prior(1);
    __syncthreads();
    normTile<P, Light>(cur, red, g, scale);
    __syncthreads();
    storeTile<P>(cur, y, t * P);
    __syncthreads(); // cur is the tile after next's buffer
  }
}

/// The tile moved by the bulk-copy engine (cp.async.bulk, one 2P-byte copy
/// a plane issued by thread c, completion on an mbarrier): no per-thread
/// load or store instructions for the tile. The math reads the thread's
/// channels from the tile into registers; `out` 0 stores them from
/// registers as direct does, 1 writes them into the tile and bulk-copies
/// each plane's run out.
__device__ inline unsigned smemAddr(const void *p) {
  return unsigned(__cvta_generic_to_shared(p));
}

template <int P, int Light>
__global__ void bulk(const __nv_bfloat16 *x, const __nv_bfloat16 *gamma,
                     float scale, __nv_bfloat16 *y, int out) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto [tile, red, g] = tileParts<P>(smem);
  __shared__ __align__(8) unsigned long long mbar;
  const long base = blockIdx.x * long(P);
  const unsigned bar = smemAddr(&mbar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
    asm volatile("fence.mbarrier_init.release.cluster;");
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
        "r"(unsigned(C * P * 2)));
  }
  __syncthreads();
  if (threadIdx.x < C) {
    const int c = threadIdx.x;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx"
                 "::bytes [%0], [%1], %2, [%3];" ::"r"(smemAddr(tile + c * P)),
                 "l"(x + c * S + base), "r"(unsigned(P * 2)), "r"(bar)
                 : "memory");
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    g[c] = __bfloat162float(gamma[c]);
  asm volatile("{\n .reg .pred p;\n"
               "W%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               " @!p bra W%=;\n}" ::"r"(bar)
               : "memory");
  __syncthreads(); // g
  if (out)
    normTileRegs<P, Light>(tile, red, g, scale, IntoTile<P>{tile});
  else
    normTileRegs<P, Light>(tile, red, g, scale,
                           [&](int c, int pp, __nv_bfloat162 v) {
                             *reinterpret_cast<__nv_bfloat162 *>(
                                 y + c * S + base + 2 * pp) = v;
                           });
  if (!out)
    return;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x < C) {
    const int c = threadIdx.x;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(y + c * S + base), "r"(smemAddr(tile + c * P)),
                 "r"(unsigned(P * 2))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

__global__ void countDiff(const unsigned short *a, const unsigned short *b,
                          long n, unsigned long long *out) {
  unsigned long long k = 0;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    k += a[i] != b[i];
  atomicAdd(out, k);
}

__global__ void fill(__nv_bfloat16 *p, long n, unsigned seed, float amp) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    unsigned h = (unsigned(i) ^ seed) * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16_rn(amp * ((h & 0xffff) / 32768.0f - 1.0f));
  }
}

struct Set {
  __nv_bfloat16 *x, *y;
};

template <typename Launch>
float steadyUs(const std::vector<Set> &sets, Launch launch) {
  const int rounds = 20;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (const Set &s : sets)
    launch(s);
  std::vector<float> times;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < rounds; ++i)
      for (const Set &s : sets)
        launch(s);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms * 1e3f / (rounds * sets.size()));
  }
  CK(cudaGetLastError());
  std::sort(times.begin(), times.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return times[3];
}

unsigned long long diffs(const __nv_bfloat16 *a, const __nv_bfloat16 *b) {
  unsigned long long *d, h = 0;
  CK(cudaMalloc(&d, sizeof(h)));
  CK(cudaMemset(d, 0, sizeof(h)));
  countDiff<<<1024, 256>>>(reinterpret_cast<const unsigned short *>(a),
                           reinterpret_cast<const unsigned short *>(b), C * S,
                           d);
  CK(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return h;
}

template <int P, int Light>
void runStaged(const std::vector<Set> &sets, const __nv_bfloat16 *gamma,
               float scale, const __nv_bfloat16 *expect, double mb, int sms) {
  constexpr size_t smem = tileSmem<P>(), pipeSmem = smem + C * P * 2;
  CK(cudaFuncSetAttribute(staged<P, Light>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(pipe<P, Light>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          pipeSmem));
  const long tiles = S / P;
  for (int norm = 0; norm < 3; ++norm) {
    float us = steadyUs(sets, [&](const Set &s) {
      staged<P, Light><<<tiles, 2 * P, smem>>>(s.x, gamma, scale, s.y, norm);
    });
    unsigned long long bad = norm ? diffs(sets[0].y, expect) : 0;
    int fit = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, staged<P, Light>, 2 * P,
                                                     smem));
    std::printf("%s staged %-4s P=%-4d %4d thr %6zu B smem %d CTAs/SM  %8.2f us "
                "%5.2f TB/s%s\n",
                kLevel[Light], norm == 2 ? "regs" : norm ? "norm" : "copy", P, 2 * P, smem, fit, us, mb / us,
                norm ? (bad ? "  DIFFERS" : "  same bits") : "");
  }
  CK(cudaFuncSetAttribute(bulk<P, Light>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int out = 0; out < 2; ++out) {
    float us = steadyUs(sets, [&](const Set &s) {
      bulk<P, Light><<<tiles, 2 * P, smem>>>(s.x, gamma, scale, s.y, out);
    });
    unsigned long long bad = diffs(sets[0].y, expect);
    int fit = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, bulk<P, Light>,
                                                     2 * P, smem));
    std::printf("%s bulk %-6s P=%-4d %4d thr %6zu B smem %d CTAs/SM  %8.2f us "
                "%5.2f TB/s%s\n",
                kLevel[Light], out ? "in+out" : "in", P, 2 * P, smem, fit, us,
                mb / us, bad ? "  DIFFERS" : "  same bits");
  }
  int fit = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, pipe<P, Light>, 2 * P,
                                                   pipeSmem));
  if (!fit)
    return;
  const long grid = std::min<long>(tiles, long(fit) * sms);
  float us = steadyUs(sets, [&](const Set &s) {
    pipe<P, Light><<<grid, 2 * P, pipeSmem>>>(s.x, gamma, scale, s.y, tiles);
  });
  unsigned long long bad = diffs(sets[0].y, expect);
  std::printf("%s pipe   norm P=%-4d %4d thr %6zu B smem %d CTAs/SM  %8.2f us "
              "%5.2f TB/s%s\n",
              kLevel[Light], P, 2 * P, pipeSmem, fit, us, mb / us,
              bad ? "  DIFFERS" : "  same bits");
}

template <int Light>
void runAll(const std::vector<Set> &sets, const __nv_bfloat16 *gamma,
            float scale, __nv_bfloat16 *expect, double mb, int sms) {
  float us = steadyUs(sets, [&](const Set &s) {
    direct<Light><<<S / 64, 128>>>(s.x, gamma, scale, s.y);
  });
  CK(cudaMemcpy(expect, sets[0].y, C * S * 2, cudaMemcpyDeviceToDevice));
  std::printf("%s direct norm (bitfold's plan, 64 px, 128 thr)  %8.2f us "
              "%5.2f TB/s\n", kLevel[Light], us, mb / us);
  runStaged<64, Light>(sets, gamma, scale, expect, mb, sms);
  runStaged<128, Light>(sets, gamma, scale, expect, mb, sms);
  runStaged<256, Light>(sets, gamma, scale, expect, mb, sms);
}

} // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // lines survive a timeout
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const long n = C * S;
  const double mb = 2.0 * n * 2 / 1e6; // read + write, MB (so MB/us = TB/s)
  std::vector<Set> sets(2);
  for (unsigned i = 0; i < sets.size(); ++i) {
    CK(cudaMalloc(&sets[i].x, n * 2));
    CK(cudaMalloc(&sets[i].y, n * 2));
    fill<<<1024, 256>>>(sets[i].x, n, 17 + i, 3.0f);
  }
  __nv_bfloat16 *gamma, *expect;
  CK(cudaMalloc(&gamma, C * 2));
  CK(cudaMalloc(&expect, n * 2));
  fill<<<1, 128>>>(gamma, C, 5, 1.5f);
  const float scale = 9.797958971f; // sqrt(96)
  std::printf("%s, %d SMs; [1,96,4,480,832] bf16, %.1f MB a launch, 2 sets\n",
              prop.name, prop.multiProcessorCount, mb);
  float us = steadyUs(sets, [&](const Set &s) {
    CK(cudaMemcpyAsync(s.y, s.x, n * 2, cudaMemcpyDeviceToDevice));
  });
  std::printf("memcpy                                              %8.2f us "
              "%5.2f TB/s\n", us, mb / us);
  runAll<0>(sets, gamma, scale, expect, mb, prop.multiProcessorCount);
  runAll<1>(sets, gamma, scale, expect, mb, prop.multiProcessorCount);
  runAll<2>(sets, gamma, scale, expect, mb, prop.multiProcessorCount);
  runAll<3>(sets, gamma, scale, expect, mb, prop.multiProcessorCount);
  runAll<4>(sets, gamma, scale, expect, mb, prop.multiProcessorCount);
  return 0;
}
