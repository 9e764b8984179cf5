//===- tests/runtime/GatedCompiler.h - Held compiles for thread tests -*- C++ -*-===//
//
// Shared by the prewarm and async compile tests: ln_modulate's tensors on
// the fake driver, a gate that holds compiles of one column count until
// the test opens it, and the fake compiler wired to it.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_RUNTIME_GATEDCOMPILER_H
#define BITFOLD_TESTS_RUNTIME_GATEDCOMPILER_H

#include "FakeCodegen.h"

#include "runtime/Runtime.h"
#include "runtime/Status.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <mutex>

namespace bitfold::runtime::fake {

/// The fake libcuda, chosen before any runtime loads a driver.
inline const bool fakeDriver = [] {
  ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
  return true;
}();

constexpr DLDataType kBF16{kDLBfloat, 16, 1};

/// ln_modulate's four tensors for {1, rows, cols}, densely packed.
struct LnTensors {
  std::vector<int64_t> xShape, vShape;
  DLTensor t[4]{};
  LnTensors(int64_t rows, int64_t cols)
      : xShape{1, rows, cols}, vShape{1, cols} {
    for (int i = 0; i < 4; ++i) {
      bool perBatch = i == 1 || i == 2;
      t[i].data = reinterpret_cast<void *>(uintptr_t(i + 1) << 28);
      t[i].device = {kDLCUDA, 0};
      t[i].ndim = perBatch ? 2 : 3;
      t[i].dtype = kBF16;
      t[i].shape = perBatch ? vShape.data() : xShape.data();
    }
  }
  llvm::Error launch(Kernel *k, CUstream stream = nullptr) const {
    const DLTensor *ts[] = {&t[0], &t[1], &t[2], &t[3]};
    float eps = 1e-6f;
    return k->launch(ts, 4, &eps, 1, stream);
  }
};

/// A gate compiles of one column count wait at until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> waiting{0};
  void pass() {
    std::unique_lock<std::mutex> lock(mu);
    ++waiting;
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

/// The fake compiler, with compiles of `slowCols` columns held at `gate`
/// and toolchain probes counted in `probes`.
inline Compiler gatedCompiler(Gate *gate, int64_t slowCols,
                       std::atomic<int> *probes) {
  Compiler c = fake::fakeCompiler();
  auto inner = c.compile;
  c.compile = [=](const dsl::KernelDef &def, const keys::ShapeSpec &shape,
                  const keys::TileConfig &config,
                  const keys::CompileOptions &options) {
    if (gate && shape.cols == slowCols)
      gate->pass();
    return inner(def, shape, config, options);
  };
  c.toolchainVersion = [probes] {
    ++*probes;
    return std::string("fake-toolchain 1.0");
  };
  c.toolchainFingerprint = [] { return std::string("fake tools, same files"); };
  return c;
}

/// A launch's status code (BITFOLD_SUCCESS when it launched).
inline bitfold_status statusOf(llvm::Error e) {
  std::string msg;
  return takeStatus(std::move(e), msg);
}

/// The runtime's ln_modulate kernel (bf16); null after a failed check.
inline Kernel *lnModulate(Runtime &rt) {
  auto k = rt.findKernel("ln_modulate", "");
  EXPECT_TRUE(bool(k)) << llvm::toString(k.takeError());
  return k ? *k : nullptr;
}

struct TempDir {
  std::string path;
  TempDir() {
    llvm::SmallString<128> p;
    llvm::sys::fs::createUniqueDirectory("bitfold-prewarm", p);
    path = std::string(p);
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
};

} // namespace bitfold::runtime::fake

#endif // BITFOLD_TESTS_RUNTIME_GATEDCOMPILER_H
