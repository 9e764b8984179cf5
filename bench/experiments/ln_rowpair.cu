// Timing probe (perf-notes.md section 14): LN+modulate rows of 2240 bf16
// columns, one warp a row, against
// two rows a warp (the second row's loads in flight during the first row's
// math and stores), and a copy of the same bytes. Not bit-exact with aten:
// the same kind and count of instructions per element, for timing only.
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int C = 2240, VEC = 8, NV = C / VEC; // 280 vectors a row
constexpr int PER = (NV + 31) / 32;            // 9 vectors a lane (last partial)

struct W { float m, m2, n; };
__device__ __forceinline__ void push(W &w, float x) {
  w.n += 1.f; float d = x - w.m; w.m += d * (1.f / w.n); w.m2 += d * (x - w.m);
}
__device__ __forceinline__ W comb(W a, W b) {
  float n = a.n + b.n; float d = b.m - a.m; float c = b.n / n;
  return {a.m + d * c, a.m2 + b.m2 + d * d * a.n * c, n};
}
__device__ __forceinline__ float bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ void loadRow(const uint4 *x, uint4 (&v)[PER], int lane) {
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    int c = lane + 32 * j;
    v[j] = c < NV ? x[c] : make_uint4(0, 0, 0, 0);
  }
}
__device__ __forceinline__ void rowMath(const uint4 (&v)[PER], uint4 *y, const uint4 *sc,
                                        const uint4 *sh, int lane) {
  W w{0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    if (lane + 32 * j >= NV) continue;
    const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&v[j]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) push(w, __bfloat162float(e[k]));
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    W b{__shfl_xor_sync(~0u, w.m, o), __shfl_xor_sync(~0u, w.m2, o), __shfl_xor_sync(~0u, w.n, o)};
    w = comb(w, b);
  }
  float rstd = rsqrtf(w.m2 / C + 1e-6f);
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    int c = lane + 32 * j;
    if (c >= NV) continue;
    uint4 s4 = sc[c], h4 = sh[c], o4;
    const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&v[j]);
    const __nv_bfloat162 *s = reinterpret_cast<const __nv_bfloat162 *>(&s4);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&h4);
    __nv_bfloat162 *out = reinterpret_cast<__nv_bfloat162 *>(&o4);
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) {
      float a = bf((__bfloat162float(e[2 * k]) - w.m) * rstd);
      float b = bf((__bfloat162float(e[2 * k + 1]) - w.m) * rstd);
      __nv_bfloat162 ab = __floats2bfloat162_rn(a, b);
      __nv_bfloat162 one = __floats2bfloat162_rn(1.f, 1.f);
      out[k] = __hadd2(__hmul2(ab, __hadd2(s[k], one)), h[k]);
    }
    y[c] = o4;
  }
}

// One warp a row.
__global__ void __launch_bounds__(32) one(const uint4 *x, uint4 *y, const uint4 *sc,
                                          const uint4 *sh, int rows, int rowsPerBatch) {
  int row = blockIdx.x, lane = threadIdx.x;
  if (row >= rows) return;
  int bt = row / rowsPerBatch;
  uint4 v[PER];
  loadRow(x + size_t(row) * NV, v, lane);
  rowMath(v, y + size_t(row) * NV, sc + bt * NV, sh + bt * NV, lane);
}

// Two adjacent rows a warp: both rows' loads first, then row a's math and
// stores while row b's loads land, then row b's.
__global__ void __launch_bounds__(32) two(const uint4 *x, uint4 *y, const uint4 *sc,
                                          const uint4 *sh, int rows, int rowsPerBatch) {
  int row = 2 * blockIdx.x, lane = threadIdx.x;
  uint4 a[PER], b[PER];
  loadRow(x + size_t(row) * NV, a, lane);
  loadRow(x + size_t(row + 1) * NV, b, lane);
  int bt = row / rowsPerBatch;
  rowMath(a, y + size_t(row) * NV, sc + bt * NV, sh + bt * NV, lane);
  bt = (row + 1) / rowsPerBatch;
  rowMath(b, y + size_t(row + 1) * NV, sc + bt * NV, sh + bt * NV, lane);
}

// Two rows a warp, staggered: row b's loads issued after row a's fold (before
// its stores), so reads and writes overlap.
__global__ void __launch_bounds__(32) stag(const uint4 *x, uint4 *y, const uint4 *sc,
                                           const uint4 *sh, int rows, int rowsPerBatch) {
  int row = 2 * blockIdx.x, lane = threadIdx.x;
  uint4 a[PER], b[PER];
  loadRow(x + size_t(row) * NV, a, lane);
  int bt = row / rowsPerBatch;
  // touch a (forces the wait), then issue b's loads
  asm volatile("" ::: "memory");
  loadRow(x + size_t(row + 1) * NV, b, lane);
  rowMath(a, y + size_t(row) * NV, sc + bt * NV, sh + bt * NV, lane);
  bt = (row + 1) / rowsPerBatch;
  rowMath(b, y + size_t(row + 1) * NV, sc + bt * NV, sh + bt * NV, lane);
}

// Four warps a CTA, one row each (r4.t32).
__global__ void __launch_bounds__(128) four(const uint4 *x, uint4 *y, const uint4 *sc,
                                            const uint4 *sh, int rows, int rowsPerBatch) {
  int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  int bt = row / rowsPerBatch;
  uint4 v[PER];
  loadRow(x + size_t(row) * NV, v, lane);
  rowMath(v, y + size_t(row) * NV, sc + bt * NV, sh + bt * NV, lane);
}

__global__ void copyk(const uint4 *x, uint4 *y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    y[i] = x[i];
}

#define CK(e) do { cudaError_t r_ = (e); if (r_ != cudaSuccess) { printf("%s: %s\n", #e, cudaGetErrorString(r_)); exit(1); } } while (0)

int main(int argc, char **argv) {
  int batches = argc > 1 ? atoi(argv[1]) : 2, rpb = argc > 2 ? atoi(argv[2]) : 1024;
  int rows = batches * rpb;
  size_t n = size_t(rows) * NV;
  const int SETS = 16, REPS = 400;
  std::vector<uint4 *> xs(SETS), ys(SETS);
  uint4 *sc, *sh;
  for (int s = 0; s < SETS; ++s) {
    CK(cudaMalloc(&xs[s], n * 16)); CK(cudaMalloc(&ys[s], n * 16));
    CK(cudaMemset(xs[s], 0x3c, n * 16));
  }
  CK(cudaMalloc(&sc, batches * NV * 16)); CK(cudaMalloc(&sh, batches * NV * 16));
  CK(cudaMemset(sc, 0x3c, batches * NV * 16)); CK(cudaMemset(sh, 0x3c, batches * NV * 16));
  cudaStream_t st; CK(cudaStreamCreate(&st));
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto run = [&](const char *name, auto launch) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < REPS; ++r) launch(r % SETS);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    float best = 1e30f;
    for (int t = 0; t < 7; ++t) {
      CK(cudaGraphLaunch(ge, st));
      cudaEventRecord(e0, st); CK(cudaGraphLaunch(ge, st)); cudaEventRecord(e1, st);
      CK(cudaEventSynchronize(e1));
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      best = ms < best ? ms : best;
    }
    printf("%-8s %8.2f us\n", name, best * 1000.f / REPS);
    CK(cudaGetLastError());
  };
  printf("rows %d x %d cols, %.1f MB moved\n", rows, C, 2.0 * n * 16 / 1e6);
  run("copy", [&](int s) { copyk<<<sms * 8, 256, 0, st>>>(xs[s], ys[s], n); });
  run("one", [&](int s) { one<<<rows, 32, 0, st>>>(xs[s], ys[s], sc, sh, rows, rpb); });
  run("four", [&](int s) { four<<<(rows + 3) / 4, 128, 0, st>>>(xs[s], ys[s], sc, sh, rows, rpb); });
  run("two", [&](int s) { two<<<rows / 2, 32, 0, st>>>(xs[s], ys[s], sc, sh, rows, rpb); });
  run("stag", [&](int s) { stag<<<rows / 2, 32, 0, st>>>(xs[s], ys[s], sc, sh, rows, rpb); });
  run("copy", [&](int s) { copyk<<<sms * 8, 256, 0, st>>>(xs[s], ys[s], n); });
  return 0;
}
