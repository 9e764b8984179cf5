// A small shared library linked the way the release libbitfold.so is (LLVM
// Support, libstdc++, libgcc, zlib and zstd from their archives, plus
// release/GlibcCompat.c), so CI checks the portable link in seconds instead
// of the release build's long static link. bitfold_probe() exercises what
// the compat shims stand in for: threads, a C++ exception unwound through
// the shimmed _dl_find_object, stat, LLVM's random numbers, both
// compressors. Returns 0 when all of it works.
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Compression.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ThreadPool.h"

#include <cmath>
#include <random>
#include <stdexcept>
#include <thread>

namespace {
int roundTrip(llvm::compression::Format format) {
  const char text[] = "bitfold bitfold bitfold bitfold bitfold bitfold";
  llvm::ArrayRef<uint8_t> in(reinterpret_cast<const uint8_t *>(text), sizeof text);
  llvm::SmallVector<uint8_t, 0> packed, unpacked;
  llvm::compression::compress({format}, in, packed);
  if (llvm::Error e = llvm::compression::decompress(format, packed, unpacked, sizeof text)) {
    llvm::consumeError(std::move(e));
    return 1;
  }
  return llvm::ArrayRef<uint8_t>(unpacked) == in ? 0 : 1;
}
} // namespace

extern "C" __attribute__((visibility("default"))) int bitfold_probe(const char *path) {
  int failures = 0;
  bool caught = false;
  std::thread worker([&] {
    try {
      throw std::runtime_error("unwound");
    } catch (const std::exception &) {
      caught = true;
    }
  });
  worker.join();
  failures += caught ? 0 : 1;
  llvm::StdThreadPool pool(llvm::hardware_concurrency(2));
  pool.async([] { (void)llvm::sys::Process::GetRandomNumber(); });
  pool.wait();
  std::random_device device;
  (void)device();
  llvm::sys::fs::file_status status;
  failures += bool(llvm::sys::fs::status(path, status)) ? 1 : 0;
  failures += std::pow(2.0, 10.0) == 1024.0 && std::log(1.0) == 0.0 ? 0 : 1;
  failures += roundTrip(llvm::compression::Format::Zlib);
  failures += roundTrip(llvm::compression::Format::Zstd);
  return failures;
}
