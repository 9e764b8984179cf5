//===- tests/runtime/CApiRawTest.cpp - bitfold_launch_raw on a fake driver ===//
//
// The flat-array launch must launch exactly what the DLTensor launch does
// (same parameters), fail with the same statuses and messages, reject
// malformed arrays with a message, and allocate nothing when warm; so must
// a prepared launch (bitfold_prepare_raw + bitfold_launch_prepared), which
// validates every launch's addresses.
//
//===----------------------------------------------------------------------===//

#include "AllocationCounter.h"
#include "FakeCuda.h"

#include "runtime/bitfold.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  ::setenv("BITFOLD_DISK_CACHE", "0", 1);
  return true;
}();

constexpr DLDataType kBF16{kDLBfloat, 16, 1};

FakeLaunch lastLaunch() {
  void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW);
  EXPECT_NE(lib, nullptr);
  return reinterpret_cast<FakeLastLaunchFn>(
      dlsym(lib, "fake_cuda_last_launch"))();
}

void expectParams(int n) {
  void *lib = dlopen(BITFOLD_FAKE_CUDA_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  reinterpret_cast<FakeExpectParamsFn>(dlsym(lib, "fake_cuda_expect_params"))(
      n);
}

/// One tensor, both as a DLTensor and as raw words.
struct Tensor {
  std::vector<int64_t> shape, strides;
  uintptr_t addr;
  DLDataType dtype = kBF16;
  int device = 0;
  DLTensor t{};
  Tensor(std::vector<int64_t> shp, uintptr_t a, std::vector<int64_t> str)
      : shape(std::move(shp)), strides(std::move(str)), addr(a) {}
  const DLTensor *dl() {
    t.data = reinterpret_cast<void *>(addr);
    t.device = {kDLCUDA, device};
    t.ndim = int(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.data();
    return &t;
  }
  void appendRaw(std::vector<const void *> &data,
                 std::vector<int64_t> &w) const {
    data.push_back(reinterpret_cast<const void *>(addr));
    w.push_back(int64_t(dtype.code | dtype.bits << 8 | dtype.lanes << 16 |
                        uint64_t(device) << 32));
    w.push_back(int64_t(shape.size()));
    w.insert(w.end(), shape.begin(), shape.end());
    w.insert(w.end(), strides.begin(), strides.end());
  }
};

class Raw : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(fakeDriver);
    ASSERT_EQ(bitfold_runtime_create(nullptr, &rt), BITFOLD_SUCCESS)
        << bitfold_last_error();
    ASSERT_EQ(bitfold_template(rt, "ln_modulate", "", &k), BITFOLD_SUCCESS);
  }
  void TearDown() override { bitfold_runtime_destroy(rt); }
  /// x (2, 4, 64); scale and shift chunks of a (2, 256) tensor; y.
  std::vector<Tensor> lnTensors() {
    return {Tensor({2, 4, 64}, 0x10000000, {256, 64, 1}),
            Tensor({2, 64}, 0x20000000, {256, 1}),
            Tensor({2, 64}, 0x20000080, {256, 1}),
            Tensor({2, 4, 64}, 0x40000000, {256, 64, 1})};
  }
  bitfold_status launchBoth(std::vector<Tensor> &ts, bitfold_status &dlStatus,
                            std::string &dlMessage) {
    std::vector<const DLTensor *> dl;
    std::vector<const void *> data;
    std::vector<int64_t> words;
    for (Tensor &t : ts) {
      dl.push_back(t.dl());
      t.appendRaw(data, words);
    }
    dlStatus = bitfold_launch(k, dl.data(), int(dl.size()), &eps, 1, nullptr);
    dlMessage = bitfold_last_error();
    return bitfold_launch_raw(k, int(ts.size()), data.data(), words.data(),
                              int(words.size()), &eps, 1, nullptr);
  }
  bitfold_runtime *rt = nullptr;
  bitfold_kernel *k = nullptr;
  float eps = 1e-6f;
};

TEST_F(Raw, LaunchesTheSameParametersAsDLTensors) {
  std::vector<Tensor> ts = lnTensors();
  std::vector<const DLTensor *> dl;
  std::vector<const void *> data;
  std::vector<int64_t> words;
  for (Tensor &t : ts) {
    dl.push_back(t.dl());
    t.appendRaw(data, words);
  }
  expectParams(11);
  ASSERT_EQ(bitfold_launch(k, dl.data(), 4, &eps, 1, nullptr), BITFOLD_SUCCESS)
      << bitfold_last_error();
  FakeLaunch viaDl = lastLaunch();
  expectParams(11);
  CUstream stream = reinterpret_cast<CUstream>(uintptr_t(0xABC0));
  ASSERT_EQ(bitfold_launch_raw(k, 4, data.data(), words.data(),
                               int(words.size()), &eps, 1, stream),
            BITFOLD_SUCCESS)
      << bitfold_last_error();
  FakeLaunch viaRaw = lastLaunch();
  EXPECT_EQ(viaRaw.stream, stream);
  EXPECT_EQ(viaRaw.grid[0], viaDl.grid[0]);
  EXPECT_EQ(viaRaw.block[0], viaDl.block[0]);
  for (int i = 0; i < 11; ++i)
    EXPECT_EQ(viaRaw.params[i], viaDl.params[i]) << "parameter " << i;
  EXPECT_EQ(viaRaw.params[3], 256u); // scale's row stride, from the array
}

TEST_F(Raw, RejectionsMatchTheDLTensorPath) {
  struct Case {
    const char *what;
    void (*edit)(std::vector<Tensor> &);
    bitfold_status expect;
  };
  const Case cases[] = {
      {"f16 x",
       [](std::vector<Tensor> &t) {
         t[0].dtype = {kDLFloat, 16, 1};
       },
       BITFOLD_ERROR_DTYPE},
      {"x on cuda:1", [](std::vector<Tensor> &t) { t[0].device = 1; },
       BITFOLD_ERROR_DEVICE},
      {"misaligned y", [](std::vector<Tensor> &t) { t[3].addr += 2; },
       BITFOLD_ERROR_ALIGNMENT},
      {"columns differ", [](std::vector<Tensor> &t) { t[1].shape[1] = 32; },
       BITFOLD_ERROR_SHAPE},
      {"last dim not packed",
       [](std::vector<Tensor> &t) { t[0].strides[2] = 2; },
       BITFOLD_ERROR_STRIDE},
  };
  for (const Case &c : cases) {
    std::vector<Tensor> ts = lnTensors();
    c.edit(ts);
    bitfold_status dlStatus;
    std::string dlMessage;
    bitfold_status raw = launchBoth(ts, dlStatus, dlMessage);
    EXPECT_EQ(dlStatus, c.expect) << c.what << ": " << dlMessage;
    EXPECT_EQ(raw, dlStatus) << c.what;
    EXPECT_EQ(std::string(bitfold_last_error()), dlMessage) << c.what;
  }
}

/// A prepared launch of `ts`'s layout (metadata and eps).
bitfold_prepared *prepare(bitfold_kernel *k, const std::vector<Tensor> &ts,
                          const float &eps, std::vector<const void *> &data) {
  std::vector<int64_t> words;
  data.clear();
  for (const Tensor &t : ts)
    t.appendRaw(data, words);
  bitfold_prepared *p = nullptr;
  EXPECT_EQ(bitfold_prepare_raw(k, int(ts.size()), words.data(),
                                int(words.size()), &eps, 1, &p),
            BITFOLD_SUCCESS)
      << bitfold_last_error();
  return p; // the words were copied: they may go now
}

TEST_F(Raw, PreparedLaunchesTheParametersOfTheRawLaunch) {
  std::vector<Tensor> ts = lnTensors();
  std::vector<const void *> data;
  bitfold_prepared *p = prepare(k, ts, eps, data);
  ASSERT_NE(p, nullptr);
  std::vector<const void *> rawData;
  std::vector<int64_t> words;
  for (const Tensor &t : ts)
    t.appendRaw(rawData, words);
  expectParams(11);
  ASSERT_EQ(bitfold_launch_raw(k, 4, rawData.data(), words.data(),
                               int(words.size()), &eps, 1, nullptr),
            BITFOLD_SUCCESS);
  FakeLaunch viaRaw = lastLaunch();
  expectParams(11);
  CUstream stream = reinterpret_cast<CUstream>(uintptr_t(0xABC0));
  ASSERT_EQ(bitfold_launch_prepared(p, data.data(), stream), BITFOLD_SUCCESS)
      << bitfold_last_error();
  FakeLaunch viaPrepared = lastLaunch();
  EXPECT_EQ(viaPrepared.stream, stream);
  for (int i = 0; i < 11; ++i)
    EXPECT_EQ(viaPrepared.params[i], viaRaw.params[i]) << "parameter " << i;
  // New addresses, same layout: the launch takes this call's addresses.
  data[3] = reinterpret_cast<const void *>(uintptr_t(0x50000000));
  expectParams(11);
  ASSERT_EQ(bitfold_launch_prepared(p, data.data(), nullptr), BITFOLD_SUCCESS);
  EXPECT_EQ(lastLaunch().params[6], 0x50000000u);
  bitfold_prepared_destroy(p);
}

TEST_F(Raw, PreparedLaunchesValidateEachLaunchsAddresses) {
  std::vector<Tensor> ts = lnTensors();
  std::vector<const void *> data;
  bitfold_prepared *p = prepare(k, ts, eps, data);
  ASSERT_NE(p, nullptr);
  ts[3].addr += 2; // y misaligned: what the raw launch says, the prepared says
  bitfold_status dlStatus;
  std::string dlMessage;
  EXPECT_EQ(launchBoth(ts, dlStatus, dlMessage), BITFOLD_ERROR_ALIGNMENT);
  data[3] = reinterpret_cast<const void *>(ts[3].addr);
  EXPECT_EQ(bitfold_launch_prepared(p, data.data(), nullptr),
            BITFOLD_ERROR_ALIGNMENT);
  EXPECT_EQ(std::string(bitfold_last_error()), dlMessage);
  EXPECT_EQ(bitfold_launch_prepared(p, nullptr, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_launch_prepared(nullptr, data.data(), nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  bitfold_prepared_destroy(p);
  bitfold_prepared_destroy(nullptr);
}

TEST_F(Raw, WarmPreparedLaunchesMatchTheRawLaunchAtEveryAddress) {
  // A prepared launch binds its layouts once and then checks only the
  // addresses: at each address set (another alignment class, misaligned,
  // NULL, overlapping, back to the first) it must do what the raw launch
  // does: the same status and message, the same kernel and parameters.
  std::vector<Tensor> ts = lnTensors();
  std::vector<const void *> data;
  bitfold_prepared *p = prepare(k, ts, eps, data);
  ASSERT_NE(p, nullptr);
  const std::vector<uintptr_t> home{ts[0].addr, ts[1].addr, ts[2].addr,
                                    ts[3].addr};
  struct Move {
    const char *what;
    uintptr_t x, scale, shift, y;
    bool ok = true;
  };
  const uintptr_t X = home[0], Y = home[3], S = home[1], H = home[2];
  const Move moves[] = {
      {"first", X, S, H, Y},
      {"x and y 8-byte aligned (another class)", X + 8, S, H, Y + 8},
      {"back", X, S, H, Y},
      {"y misaligned", X, S, H, Y + 2, false},
      {"x NULL", 0, S, H, Y, false},
      {"y over x", X, S, H, X, false},
      {"y over x, shifted", X, S, H, X + 64, false},
      {"y over scale", X, S, H, S, false},
      {"shift 2 elements on", X, S, H + 4, Y},
      {"all moved", X + 0x1000, S + 0x100, H + 0x100, Y + 0x2000},
  };
  std::vector<CUfunction> functions;
  for (const Move &m : moves) {
    const uintptr_t at[] = {m.x, m.scale, m.shift, m.y};
    for (int i = 0; i < 4; ++i) {
      ts[i].addr = at[i];
      data[i] = reinterpret_cast<const void *>(at[i]);
    }
    std::vector<const void *> rawData;
    std::vector<int64_t> words;
    for (const Tensor &t : ts)
      t.appendRaw(rawData, words);
    expectParams(11);
    bitfold_status raw = bitfold_launch_raw(k, 4, rawData.data(), words.data(),
                                            int(words.size()), &eps, 1, nullptr);
    const std::string rawMessage = bitfold_last_error();
    FakeLaunch viaRaw = lastLaunch();
    expectParams(11);
    bitfold_status prepared = bitfold_launch_prepared(p, data.data(), nullptr);
    EXPECT_EQ(prepared, raw) << m.what;
    EXPECT_EQ(raw == BITFOLD_SUCCESS, m.ok) << m.what << ": " << rawMessage;
    EXPECT_EQ(std::string(bitfold_last_error()), rawMessage) << m.what;
    if (raw != BITFOLD_SUCCESS || prepared != BITFOLD_SUCCESS)
      continue;
    FakeLaunch viaPrepared = lastLaunch();
    functions.push_back(viaPrepared.function);
    EXPECT_EQ(viaPrepared.function, viaRaw.function) << m.what;
    EXPECT_EQ(viaPrepared.grid[0], viaRaw.grid[0]) << m.what;
    EXPECT_EQ(viaPrepared.block[0], viaRaw.block[0]) << m.what;
    for (int i = 0; i < 11; ++i)
      EXPECT_EQ(viaPrepared.params[i], viaRaw.params[i])
          << m.what << ", parameter " << i;
  }
  ASSERT_EQ(functions.size(), 5u);
  EXPECT_NE(functions[1], functions[0]) << "8-byte alignment: another kernel";
  EXPECT_EQ(functions[2], functions[0]) << "back at 16 bytes: the first";
  bitfold_prepared_destroy(p);
}

TEST_F(Raw, ManyThreadsShareOnePreparedLaunchFromCold) {
  // The first launches race to bind the layouts once (Kernel::Rebinding);
  // every launch, first or warm, succeeds with its own addresses.
  std::vector<const void *> data;
  bitfold_prepared *p = prepare(k, lnTensors(), eps, data);
  ASSERT_NE(p, nullptr);
  constexpr int kThreads = 8, kLaunches = 200;
  std::atomic<int> ready{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<const void *> mine = data;
      mine[3] = reinterpret_cast<const void *>(uintptr_t(0x60000000) +
                                               uintptr_t(t) * 0x100000);
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < kLaunches; ++i)
        if (bitfold_launch_prepared(p, mine.data(), nullptr) != BITFOLD_SUCCESS)
          failures.fetch_add(1);
    });
  for (std::thread &th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0) << bitfold_last_error();
  bitfold_prepared_destroy(p);
}

TEST_F(Raw, MalformedArraysAreRefusedWhenPrepared) {
  std::vector<const void *> data;
  std::vector<int64_t> words;
  for (const Tensor &t : lnTensors())
    t.appendRaw(data, words);
  int n = int(words.size());
  bitfold_prepared *p = reinterpret_cast<bitfold_prepared *>(uintptr_t(1));
  EXPECT_EQ(bitfold_prepare_raw(k, 4, words.data(), n - 1, &eps, 1, &p),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(p, nullptr);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_prepare_raw: tensor 3: ndim is negative or runs past "
               "the metadata");
  EXPECT_EQ(bitfold_prepare_raw(k, 4, words.data(), n, nullptr, 1, &p),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_prepare_raw(nullptr, 4, words.data(), n, &eps, 1, &p),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_prepare_raw(k, 4, words.data(), n, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_prepare_raw(k, 99, words.data(), n, &eps, 1, &p),
            BITFOLD_ERROR_INVALID_ARGUMENT);
}

TEST_F(Raw, MalformedArraysAreInvalidArguments) {
  std::vector<const void *> data;
  std::vector<int64_t> words;
  for (const Tensor &t : lnTensors())
    t.appendRaw(data, words);
  int n = int(words.size());
  const void *const *d = data.data();
  EXPECT_EQ(bitfold_launch_raw(k, 4, d, words.data(), n - 1, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_launch_raw: tensor 3: ndim is negative or runs past "
               "the metadata");
  EXPECT_EQ(bitfold_launch_raw(k, 3, d, words.data(), n, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_launch_raw: num_meta_words is not the length the "
               "tensors use");
  EXPECT_EQ(bitfold_launch_raw(k, 4, d, nullptr, 0, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(
      bitfold_launch_raw(k, 4, nullptr, words.data(), n, &eps, 1, nullptr),
      BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bitfold_launch_raw(k, 99, d, words.data(), n, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  words[1] = -1;
  EXPECT_EQ(bitfold_launch_raw(k, 4, d, words.data(), n, &eps, 1, nullptr),
            BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(bitfold_last_error(),
               "bitfold_launch_raw: tensor 0: ndim is negative or runs past "
               "the metadata");
  words[1] = 3;
  // The wrong tensor count for the kernel is bitfold_launch's own message.
  EXPECT_EQ(
      bitfold_launch_raw(k, 3, d, words.data(), 8 + 6 + 6, &eps, 1, nullptr),
      BITFOLD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(
      bitfold_launch_raw(nullptr, 4, d, words.data(), n, &eps, 1, nullptr),
      BITFOLD_ERROR_INVALID_ARGUMENT);
}

TEST_F(Raw, WarmLaunchesDoNotAllocate) {
  std::vector<const void *> data;
  std::vector<int64_t> words;
  for (const Tensor &t : lnTensors())
    t.appendRaw(data, words);
  int n = int(words.size());
  ASSERT_EQ(
      bitfold_launch_raw(k, 4, data.data(), words.data(), n, &eps, 1, nullptr),
      BITFOLD_SUCCESS)
      << bitfold_last_error();
  allocations = 0;
  countAllocations = true;
  bool ok = true;
  for (int i = 0; i < 100; ++i)
    ok &= bitfold_launch_raw(k, 4, data.data(), words.data(), n, &eps, 1,
                             nullptr) == BITFOLD_SUCCESS;
  countAllocations = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(allocations.load(), 0);
}

TEST_F(Raw, WarmPreparedLaunchesDoNotAllocate) {
  std::vector<const void *> data;
  bitfold_prepared *p = prepare(k, lnTensors(), eps, data);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(bitfold_launch_prepared(p, data.data(), nullptr), BITFOLD_SUCCESS)
      << bitfold_last_error();
  allocations = 0;
  countAllocations = true;
  bool ok = true;
  for (int i = 0; i < 100; ++i)
    ok &= bitfold_launch_prepared(p, data.data(), nullptr) == BITFOLD_SUCCESS;
  countAllocations = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(allocations.load(), 0);
  bitfold_prepared_destroy(p);
}

} // namespace
