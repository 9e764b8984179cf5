//===- tests/runtime/DriverProbe.cpp - Print queryDriver() ----------------===//
//
// A fresh process per driver scenario (the driver is loaded once per
// process): prints the devices, or "error: <message>" and exits 1.
//
//===----------------------------------------------------------------------===//

#include "cuda/Driver.h"

#include "llvm/Support/raw_ostream.h"

int main() {
  auto info = bitfold::cuda::queryDriver();
  if (!info) {
    llvm::outs() << "error: " << llvm::toString(info.takeError()) << "\n";
    return 1;
  }
  llvm::outs() << "driver " << info->versionString() << " ("
               << info->libraryPath << ")\n";
  for (const auto &d : info->devices)
    llvm::outs() << "cuda:" << d.ordinal << " " << d.name << " " << d.arch()
                 << "\n";
  return 0;
}
