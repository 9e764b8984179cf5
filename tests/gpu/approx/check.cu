// Exhaustive check of the interpreter's sm_90 approximation models
// (dsl/ApproxTables.{h,cpp} over the committed tables) against the GPU:
// every one of the 2^32 inputs of rcp/rsqrt/ex2.approx.ftz.f32 and of
// nvcc's expf, the GPU's bits against the host model's bits.
//
// Build: nvcc -O2 -std=c++20 -arch=sm_90 -I<repo> check.cu
//            <repo>/dsl/ApproxTables.cpp -o check -l:libzstd.so.1
// Run:   check <repo>/dsl/approx/sm90   (exit 0 when every op matches)
#include "dsl/ApproxTables.h"
#include "tests/gpu/approx/CudaCheck.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

using namespace bitfold::dsl::approx;

// libzstd's two entry points (declared here: the GPU image need not have
// the development headers, only libzstd.so.1).
extern "C" size_t ZSTD_decompress(void *dst, size_t dstCapacity,
                                  const void *src, size_t compressedSize);
extern "C" unsigned ZSTD_isError(size_t code);


enum { kRcp, kRsqrt, kEx2, kExpf, kOps };
const char *kOpNames[kOps] = {"rcp.approx.ftz.f32", "rsqrt.approx.ftz.f32",
                              "ex2.approx.ftz.f32", "expf (libdevice)"};

__global__ void evaluate(int op, uint32_t base, uint32_t *out) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = __uint_as_float(base + i), r;
  switch (op) {
  case kRcp: asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
  case kRsqrt: asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
  case kEx2: asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); break;
  default: r = expf(x); break;
  }
  out[i] = __float_as_uint(r);
}

static std::vector<uint32_t> loadTable(const std::string &dir, Table t) {
  std::string path = dir + "/" + tableFileName(t);
  std::ifstream f(path, std::ios::binary);
  std::vector<char> z((std::istreambuf_iterator<char>(f)), {});
  std::vector<uint8_t> raw(tableEntries(t) / 2);
  size_t n = ZSTD_decompress(raw.data(), raw.size(), z.data(), z.size());
  if (z.empty() || ZSTD_isError(n) || n != raw.size()) {
    fprintf(stderr, "%s: cannot decompress\n", path.c_str());
    exit(2);
  }
  std::string error;
  std::vector<uint32_t> tab = decodeTable(t, raw.data(), raw.size(), error);
  if (!error.empty() || checksum(tab) != expectedChecksum(t)) {
    fprintf(stderr, "%s: %s checksum %016llx, expected %016llx\n", path.c_str(),
            error.c_str(), (unsigned long long)checksum(tab),
            (unsigned long long)expectedChecksum(t));
    exit(2);
  }
  return tab;
}

struct Tables {
  std::vector<uint32_t> rcp, rsqrt, ex2;
  uint32_t model(int op, uint32_t x) const {
    switch (op) {
    case kRcp: return rcpModel(x, rcp.data());
    case kRsqrt: return rsqrtModel(x, rsqrt.data());
    case kEx2: return ex2Model(x, ex2.data());
    default:
      return floatBits(expfSequence(bitsFloat(x), [&](float r) {
        return bitsFloat(ex2Model(floatBits(r), ex2.data()));
      }));
    }
  }
};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: check DATA_DIR (dsl/approx/sm90)\n");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s sm_%d%d\n", prop.name, prop.major, prop.minor);
  Tables tabs{loadTable(argv[1], Table::Rcp), loadTable(argv[1], Table::Rsqrt),
              loadTable(argv[1], Table::Ex2)};

  const uint32_t chunk = 1u << 28;
  uint32_t *dOut, *hOut;
  CK(cudaMalloc(&dOut, size_t(chunk) * 4));
  CK(cudaMallocHost(&hOut, size_t(chunk) * 4));
  unsigned nThreads = std::max(1u, std::thread::hardware_concurrency());
  int failed = 0;
  for (int op = 0; op < kOps; ++op) {
    std::atomic<unsigned long long> mismatches{0};
    std::atomic<int> shown{0};
    for (uint64_t base = 0; base < (1ull << 32); base += chunk) {
      evaluate<<<chunk / 256, 256>>>(op, uint32_t(base), dOut);
      CK(cudaMemcpy(hOut, dOut, size_t(chunk) * 4, cudaMemcpyDeviceToHost));
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < nThreads; ++t)
        pool.emplace_back([&, t] {
          unsigned long long bad = 0;
          for (uint32_t i = t; i < chunk; i += nThreads) {
            uint32_t x = uint32_t(base) + i, want = tabs.model(op, x);
            if (hOut[i] == want)
              continue;
            ++bad;
            if (shown.fetch_add(1) < 5)
              printf("  %s x=%08x: GPU %08x model %08x\n", kOpNames[op], x,
                     hOut[i], want);
          }
          mismatches += bad;
        });
      for (std::thread &th : pool)
        th.join();
    }
    printf("%s: %llu of 2^32 inputs differ\n", kOpNames[op],
           (unsigned long long)mismatches);
    failed |= mismatches != 0;
  }
  // Spot values for tests/dsl/ApproxModelsTest.cpp.
  const float spots[] = {1.0f, -1.0f, 0.5f, 10.0f, -10.0f, 88.0f, -87.5f, 1e-3f};
  for (float s : spots) {
    evaluate<<<1, 1>>>(kExpf, floatBits(s), dOut);
    uint32_t v;
    CK(cudaMemcpy(&v, dOut, 4, cudaMemcpyDeviceToHost));
    printf("spot expf(%08x) = %08x\n", floatBits(s), v);
  }
  printf(failed ? "FAIL\n" : "PASS: every model equals the GPU on all 2^32 inputs\n");
  return failed;
}
