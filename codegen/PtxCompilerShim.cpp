//===- codegen/PtxCompilerShim.cpp - libbitfold-ptxc.so -----------------===//
//
// NVIDIA's PTX Compiler API (libnvptxcompiler_static.a) behind one C entry
// point, built as its own shared library so that the 40 MB compiler is one
// file that codegen loads on demand (codegen/Assemble.cpp), not a copy in
// every binary that links codegen. Exports only bitfold_ptxc_* (ptxc.map).
//
//===----------------------------------------------------------------------===//

#include "nvPTXCompiler.h"

#include <cstddef>
#include <string>

namespace {

/// The handle's lifetime, whatever path leaves the compile.
struct Compiler {
  nvPTXCompilerHandle h = nullptr;
  ~Compiler() {
    if (h)
      nvPTXCompilerDestroy(&h);
  }
};

using Sink = void (*)(void *ctx, int what, const char *data, size_t n);

/// Hands one of the compiler's outputs to `sink` (empty outputs too).
template <typename SizeFn, typename GetFn>
void emit(nvPTXCompilerHandle h, SizeFn size, GetFn get, int what, Sink sink,
          void *ctx) {
  size_t n = 0;
  if (size(h, &n) != NVPTXCOMPILE_SUCCESS)
    n = 0;
  std::string buf(n, '\0');
  if (n && get(h, buf.data()) != NVPTXCOMPILE_SUCCESS)
    buf.clear();
  // Logs are NUL-terminated strings; the cubin is bytes.
  if (what != 0)
    buf.resize(buf.find('\0') == std::string::npos ? buf.size()
                                                   : buf.find('\0'));
  sink(ctx, what, buf.data(), buf.size());
}

} // namespace

extern "C" {

/// The library's version (major, minor); nvPTXCompileResult.
__attribute__((visibility("default"))) int
bitfold_ptxc_version(unsigned *major, unsigned *minor) {
  return nvPTXCompilerGetVersion(major, minor);
}

/// Which build of the library this is (e.g. "nvidia-nvptxcompiler
/// 13.0.88"): the minor version alone does not name the compiler.
__attribute__((visibility("default"))) const char *bitfold_ptxc_id() {
  return BITFOLD_PTXC_ID;
}

/// Compiles `ptx` with `options` (e.g. --gpu-name=sm_90). `sink` receives
/// what = 0: the cubin (on success), 1: the info log, 2: the error log.
/// Returns the nvPTXCompileResult of the first step that failed, else 0.
__attribute__((visibility("default"))) int
bitfold_ptxc_compile(const char *ptx, size_t ptxLen, int numOptions,
                     const char *const *options, Sink sink, void *ctx) {
  Compiler c;
  if (nvPTXCompileResult rc = nvPTXCompilerCreate(&c.h, ptxLen, ptx))
    return rc;
  nvPTXCompileResult rc = nvPTXCompilerCompile(c.h, numOptions, options);
  emit(c.h, nvPTXCompilerGetInfoLogSize, nvPTXCompilerGetInfoLog, 1, sink,
       ctx);
  if (rc != NVPTXCOMPILE_SUCCESS) {
    emit(c.h, nvPTXCompilerGetErrorLogSize, nvPTXCompilerGetErrorLog, 2, sink,
         ctx);
    return rc;
  }
  emit(c.h, nvPTXCompilerGetCompiledProgramSize, nvPTXCompilerGetCompiledProgram,
       0, sink, ctx);
  return 0;
}

} // extern "C"
