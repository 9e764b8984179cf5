// The C++ wrapper (bitfold.hpp) against the installed package: C++17, no
// LLVM. Without a driver: a host tensor is rejected, a device one cannot be
// launched, and both say why.
#include <bitfold/bitfold.hpp>

#include <cstdio>

int main() {
  auto rt = bitfold::Runtime::create({"", /*diskCache=*/false});
  if (!rt) {
    std::fprintf(stderr, "create: %s\n", rt.status().message().c_str());
    return 1;
  }
  auto k = rt->kernel("residual_gate", "dtype=bf16 gate=global");
  if (!k) {
    std::fprintf(stderr, "kernel: %s\n", k.status().message().c_str());
    return 1;
  }
  int64_t shape[2] = {4, 64}, gshape[1] = {64};
  DLTensor r{}, u{}, g{}, y{};
  r.data = reinterpret_cast<void *>(uintptr_t(0x10000000));
  r.device = {kDLCPU, 0};
  r.ndim = 2;
  r.dtype = {kDLBfloat, 16, 1};
  r.shape = shape;
  u = r, y = r;
  u.data = reinterpret_cast<void *>(uintptr_t(0x20000000));
  y.data = reinterpret_cast<void *>(uintptr_t(0x30000000));
  g = r;
  g.ndim = 1;
  g.shape = gshape;
  g.data = reinterpret_cast<void *>(uintptr_t(0x40000000));
  bitfold::Status s = k->launch({&r, &u, &g, &y});
  std::printf("%s: %s\n", s.codeName(), s.message().c_str());
  if (s.code() != BITFOLD_ERROR_DEVICE)
    return 1;
  r.device = u.device = g.device = y.device = {kDLCUDA, 0};
  s = k->launch({&r, &u, &g, &y});
  std::printf("%s: %s\n", s.codeName(), s.message().c_str());
  return s.code() == BITFOLD_ERROR_NO_DRIVER ? 0 : 1;
}
