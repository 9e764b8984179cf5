//===- cuda/PerDevice.h - A value per CUDA ordinal, computed once -*- C++ -*-===//
//
// What a device answers once (its arch, its retained primary context, its
// name) is remembered per ordinal under one mutex. The value is computed
// under the lock, so it is computed at most once per ordinal (a primary
// context is retained once); a failure is not remembered, so a later call
// tries again.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CUDA_PERDEVICE_H
#define BITFOLD_CUDA_PERDEVICE_H

#include "llvm/Support/Error.h"

#include <map>
#include <mutex>

namespace bitfold::cuda {

template <typename T> class PerDevice {
public:
  /// The value of `ordinal`: remembered, else `make()` (an
  /// llvm::Expected<T>), remembered when it succeeds.
  template <typename Make> llvm::Expected<T> get(int ordinal, Make &&make) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = values.find(ordinal);
    if (it != values.end())
      return it->second;
    llvm::Expected<T> made = make();
    if (!made)
      return made.takeError();
    values.emplace(ordinal, *made);
    return std::move(*made);
  }

private:
  std::mutex mu;
  std::map<int, T> values;
};

} // namespace bitfold::cuda

#endif // BITFOLD_CUDA_PERDEVICE_H
