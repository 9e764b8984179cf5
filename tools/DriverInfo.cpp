//===- tools/DriverInfo.cpp - `bitfold version`'s driver lines ------------===//

#include "cuda/Driver.h"
#include "tools/Commands.h"

#include "llvm/Support/FormatVariadic.h"

void bitfold::tools::printDriverInfo(llvm::raw_ostream &out) {
  llvm::Expected<cuda::DriverInfo> info = cuda::queryDriver();
  if (!info) {
    out << "CUDA driver: unavailable (" << llvm::toString(info.takeError())
        << ")\n";
    return;
  }
  out << "CUDA driver " << info->versionString() << " (" << info->libraryPath
      << ")\n";
  if (info->devices.empty())
    out << "GPUs: none\n";
  for (const cuda::DeviceInfo &d : info->devices)
    out << llvm::formatv("GPU {0}: {1}, {2}, {3} SMs, {4:f1} GiB\n", d.ordinal,
                         d.name, d.arch(), d.multiprocessors,
                         double(d.totalMemBytes) / (1024.0 * 1024 * 1024));
}
