// Shared helpers of the autotune tests.
#ifndef BITFOLD_TESTS_AUTOTUNE_TESTENV_H
#define BITFOLD_TESTS_AUTOTUNE_TESTENV_H

#include "autotune/TuneDB.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

namespace bitfold::autotune::test {

inline TuneEnvironment h200() {
  return {"NVIDIA H200", "sm_90", "0.1.0", "22.1.8", "nvJitLink 13.0"};
}

inline TuneKey keyFor(std::string hash, std::string cls,
                      TuneEnvironment env = h200()) {
  return TuneKey{"ln_modulate", std::move(hash), std::move(cls),
                 "x:bf16,scale:bf16,shift:bf16,y:bf16", std::move(env)};
}

inline Measurement meas(std::string config, double median, int samples = 20,
                        double spread = 0.5, bool cut = false) {
  Measurement m;
  m.config = std::move(config);
  m.medianUs = median;
  m.spreadUs = spread;
  m.minUs = median - spread;
  m.maxUs = median + 2 * spread;
  m.samples = samples;
  m.cut = cut;
  return m;
}

/// A fresh temporary directory, removed at the end of the test.
struct TempDir {
  llvm::SmallString<128> path;
  TempDir() {
    std::error_code ec =
        llvm::sys::fs::createUniqueDirectory("bitfold-autotune", path);
    EXPECT_FALSE(ec) << ec.message();
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(const char *name) const {
    return (path + "/" + name).str();
  }
};

} // namespace bitfold::autotune::test

#endif
