//===- tests/fuzz/capi/CApiFuzz.cpp - The C API's argument checks ---------===//
//
// Decodes the input into a C API session: a template (by index or a random
// name), its parameter text, a pinned config text, PDL on/off, then up to 8
// DLTensor structs (ndim, dtype, device, data address, byte_offset, shape,
// optional strides: every field from the input, the shape and stride arrays
// exactly ndim long so any read past them is an ASan report) and up to 4
// scalars, and launches. The driver is the fake libcuda and codegen the fake
// compiler, so launches that pass validation run to cuLaunchKernel.
// Property: no crash, and every call returns a status with a message on
// failure.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "runtime/bitfold.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using bitfold::fuzz::check;
using bitfold::fuzz::Reader;

namespace {

struct FuzzTensor {
  std::unique_ptr<int64_t[]> shape, strides;
  DLTensor t{};
};

void expectStatus(bitfold_status s) {
  check(s >= BITFOLD_SUCCESS && s <= BITFOLD_ERROR_INTERNAL,
        "a status outside the enum");
  check(s == BITFOLD_SUCCESS || bitfold_last_error()[0] != '\0',
        "an error without a message");
  if (s == BITFOLD_ERROR_INTERNAL)
    std::fprintf(stderr, "INTERNAL: %s\n", bitfold_last_error());
  check(s != BITFOLD_ERROR_INTERNAL, "an INTERNAL error on user input");
}

FuzzTensor readTensor(Reader &r) {
  FuzzTensor f;
  int ndim = int(r.get<uint8_t>() % 12) - 1; // -1 .. 10
  f.t.ndim = ndim;
  uint8_t code = r.get<uint8_t>();
  f.t.dtype.code = code < 200 ? uint8_t(code % 7) : code; // mostly kDL*
  uint8_t bits = r.get<uint8_t>();
  f.t.dtype.bits = bits < 200 ? uint8_t(8 << (bits % 3)) : bits;
  f.t.dtype.lanes = r.get<uint8_t>() < 240 ? 1 : r.get<uint16_t>();
  uint8_t dev = r.get<uint8_t>();
  f.t.device.device_type = dev < 220 ? kDLCUDA : DLDeviceType(dev % 20);
  f.t.device.device_id = int32_t(r.get<int8_t>() % 4);
  uint64_t addr = r.get<uint64_t>();
  f.t.data = reinterpret_cast<void *>(addr < (1ull << 63) ? (addr & ~0xFFFull) | (addr % 64) : 0);
  uint8_t off = r.get<uint8_t>();
  f.t.byte_offset = off < 200 ? off % 32 : r.get<uint64_t>();
  if (ndim > 0) {
    f.shape.reset(new int64_t[size_t(ndim)]);
    for (int i = 0; i < ndim; ++i) {
      int8_t small = r.get<int8_t>();
      f.shape[size_t(i)] = small == -128 ? r.get<int64_t>() : int64_t(small & 0x7F) * (small < 0 ? 64 : 1);
    }
    f.t.shape = f.shape.get();
    if (r.get<uint8_t>() & 1) {
      f.strides.reset(new int64_t[size_t(ndim)]);
      for (int i = 0; i < ndim; ++i) {
        int16_t s = r.get<int16_t>();
        f.strides[size_t(i)] = s == INT16_MIN ? r.get<int64_t>() : s;
      }
      f.t.strides = f.strides.get();
    }
  }
  return f;
}

bitfold_runtime *runtime() {
  static bitfold_runtime *rt = [] {
    ::setenv("BITFOLD_LIBCUDA", BITFOLD_FAKE_CUDA_PATH, 1);
    ::setenv("BITFOLD_DISK_CACHE", "0", 1);
    ::setenv("BITFOLD_QUIET", "1", 1);
    bitfold_runtime_options o;
    bitfold_runtime_options_init(&o);
    o.disk_cache = 0;
    bitfold_runtime *r = nullptr;
    check(bitfold_runtime_create(&o, &r) == BITFOLD_SUCCESS, "no runtime");
    return r;
  }();
  return rt;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r(data, size);
  int n = bitfold_num_templates();
  uint8_t which = r.get<uint8_t>();
  std::string name = which % (n + 1) == unsigned(n)
                         ? r.text(16)
                         : std::string(bitfold_template_name(which % (n + 1)));
  std::string params = r.text(48), config = r.text(24);
  bitfold_kernel *k = nullptr;
  bitfold_status s = bitfold_template(runtime(), name.c_str(), params.c_str(), &k);
  expectStatus(s);
  if (s != BITFOLD_SUCCESS)
    return 0;
  if (!config.empty())
    expectStatus(bitfold_kernel_set_config(k, config.c_str()));
  expectStatus(bitfold_kernel_set_pdl(k, r.get<uint8_t>() & 1));
  int numTensors = r.get<uint8_t>() % 9;
  std::vector<FuzzTensor> tensors;
  std::vector<const DLTensor *> ptrs;
  for (int i = 0; i < numTensors; ++i)
    tensors.push_back(readTensor(r));
  for (FuzzTensor &t : tensors)
    ptrs.push_back(r.get<uint8_t>() == 255 ? nullptr : &t.t);
  int numScalars = r.get<uint8_t>() % 5;
  std::vector<float> scalars;
  for (int i = 0; i < numScalars; ++i)
    scalars.push_back(r.get<float>());
  expectStatus(bitfold_launch(k, ptrs.empty() ? nullptr : ptrs.data(),
                              int(ptrs.size()),
                              scalars.empty() ? nullptr : scalars.data(),
                              int(scalars.size()),
                              reinterpret_cast<void *>(uintptr_t(0xABC0))));
  return 0;
}
