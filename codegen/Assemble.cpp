//===- codegen/Assemble.cpp - PTX -> cubin: PTX Compiler, nvJitLink, ... -===//
//
// The PTX Compiler API (libbitfold-ptxc.so) and nvJitLink are loaded with
// dlopen (no link-time dependency on the CUDA toolkit); ptxas runs as a
// subprocess. The runtime may install a driver linker (cuLink*) through
// setDriverLinker.
//
//===----------------------------------------------------------------------===//

#include "codegen/Assemble.h"
#include "codegen/Backend.h"

#include "bitfold/Config.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <mutex>

using namespace bitfold::codegen;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// The first of `paths` that dlopen loads (its path in *loaded), or null.
/// A path with a '/' that is not there costs a failed stat, not a search.
void *openFirst(llvm::ArrayRef<std::string> paths, std::string *loaded) {
  for (const std::string &path : paths) {
    if (path.find('/') != std::string::npos && !llvm::sys::fs::exists(path))
      continue;
    if (void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *loaded = path;
      return h;
    }
  }
  return nullptr;
}

/// fn = the library's `name`; whether it has one.
template <typename Fn> bool symbol(void *h, Fn *&fn, const char *name) {
  fn = reinterpret_cast<Fn *>(dlsym(h, name));
  return fn != nullptr;
}

/// The nvJitLink entry points we use (CUDA 13 versioned symbols).
struct NvJitLink {
  using Handle = void *;
  int (*create)(Handle *, uint32_t, const char **) = nullptr;
  int (*destroy)(Handle *) = nullptr;
  int (*addData)(Handle, int, const void *, size_t, const char *) = nullptr;
  int (*complete)(Handle) = nullptr;
  int (*cubinSize)(Handle, size_t *) = nullptr;
  int (*cubin)(Handle, void *) = nullptr;
  int (*errorLogSize)(Handle, size_t *) = nullptr;
  int (*errorLog)(Handle, char *) = nullptr;
  int (*infoLogSize)(Handle, size_t *) = nullptr;
  int (*infoLog)(Handle, char *) = nullptr;
  int (*version)(unsigned *, unsigned *) = nullptr;
  bool ok = false;
  std::string why;
};

const NvJitLink &nvJitLink() {
  static NvJitLink lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string dir = BITFOLD_CUDA_LIBRARY_DIR;
    std::string loaded;
    void *h = openFirst({dir + "/libnvJitLink.so.13", "libnvJitLink.so.13"},
                        &loaded);
    if (!h) {
      lib.why = "libnvJitLink.so.13 not found";
      return;
    }
    lib.ok = symbol(h, lib.create, "__nvJitLinkCreate_13_0") &&
             symbol(h, lib.destroy, "__nvJitLinkDestroy_13_0") &&
             symbol(h, lib.addData, "__nvJitLinkAddData_13_0") &&
             symbol(h, lib.complete, "__nvJitLinkComplete_13_0") &&
             symbol(h, lib.cubinSize, "__nvJitLinkGetLinkedCubinSize_13_0") &&
             symbol(h, lib.cubin, "__nvJitLinkGetLinkedCubin_13_0") &&
             symbol(h, lib.errorLogSize, "__nvJitLinkGetErrorLogSize_13_0") &&
             symbol(h, lib.errorLog, "__nvJitLinkGetErrorLog_13_0") &&
             symbol(h, lib.infoLogSize, "__nvJitLinkGetInfoLogSize_13_0") &&
             symbol(h, lib.infoLog, "__nvJitLinkGetInfoLog_13_0") &&
             symbol(h, lib.version, "nvJitLinkVersion");
    if (!lib.ok)
      lib.why = "libnvJitLink.so.13 lacks the CUDA 13 entry points";
  });
  return lib;
}

llvm::Expected<AssembledCubin> viaNvJitLink(llvm::StringRef ptx,
                                            llvm::StringRef arch,
                                            int optLevel) {
  const NvJitLink &lib = nvJitLink();
  if (!lib.ok)
    return fail("nvJitLink: " + lib.why);
  std::string archOpt = ("-arch=" + arch).str();
  std::string opt = llvm::formatv("-Xptxas=-O{0}", optLevel).str();
  const char *opts[] = {archOpt.c_str(), "-Xptxas=-v", opt.c_str()};
  void *h = nullptr;
  if (int rc = lib.create(&h, 3, opts))
    return fail(llvm::formatv("nvJitLinkCreate failed ({0})", rc));
  auto logOf = [&](auto sizeFn, auto logFn) {
    size_t n = 0;
    std::string s;
    if (sizeFn(h, &n) == 0 && n > 1) {
      s.resize(n);
      logFn(h, s.data());
      s.resize(n - 1);
    }
    return s;
  };
  AssembledCubin out;
  out.tool = "nvJitLink";
  int rc = lib.addData(h, /*NVJITLINK_INPUT_PTX=*/2, ptx.data(), ptx.size(),
                       "kernel.ptx");
  if (rc == 0)
    rc = lib.complete(h);
  out.log = logOf(lib.infoLogSize, lib.infoLog);
  if (rc != 0) {
    std::string err = logOf(lib.errorLogSize, lib.errorLog);
    lib.destroy(&h);
    return fail(llvm::formatv("nvJitLink failed ({0}): {1}", rc, err));
  }
  size_t n = 0;
  lib.cubinSize(h, &n);
  out.cubin.resize(n);
  lib.cubin(h, out.cubin.data());
  lib.destroy(&h);
  return out;
}

/// libbitfold-ptxc.so (PtxCompilerShim.cpp): NVIDIA's PTX Compiler API,
/// which compiles whole-program (nvJitLink's ptxas runs with -c and spends
/// more registers). Loaded with dlopen from ptxcCandidates().
struct PtxCompiler {
  using Sink = void (*)(void *ctx, int what, const char *data, size_t n);
  int (*compile)(const char *, size_t, int, const char *const *, Sink,
                 void *) = nullptr;
  int (*version)(unsigned *, unsigned *) = nullptr;
  const char *(*id)() = nullptr; ///< the library's build, e.g. its wheel
  bool ok = false;
  std::string path;
  std::string why;
};

/// Where libbitfold-ptxc.so may be, in order: $BITFOLD_PTXC_LIBRARY; next
/// to the object that holds this code (libbitfold.so, libbitfold-jit.so),
/// or in ../lib from an executable; the build tree; the loader's search.
std::vector<std::string> ptxcCandidates() {
  std::vector<std::string> out;
  if (const char *env = std::getenv("BITFOLD_PTXC_LIBRARY"); env && *env)
    out.push_back(env);
  // dladdr names a shared library by its path but the main program by
  // argv[0] (no directory when run from PATH), so the main program's own
  // path comes next.
  void *self = reinterpret_cast<void *>(&ptxcCandidates);
  llvm::SmallVector<std::string, 2> holders;
  Dl_info info;
  if (dladdr(self, &info) && info.dli_fname &&
      llvm::StringRef(info.dli_fname).contains('/'))
    holders.push_back(info.dli_fname);
  holders.push_back(llvm::sys::fs::getMainExecutable(nullptr, self));
  for (const std::string &holder : holders) {
    if (holder.empty())
      continue;
    llvm::SmallString<256> dir(holder);
    llvm::sys::path::remove_filename(dir);
    out.push_back((dir + "/libbitfold-ptxc.so.0").str());
    out.push_back((dir + "/../lib/libbitfold-ptxc.so.0").str());
  }
#ifdef BITFOLD_PTXC_BUILD_PATH
  out.push_back(BITFOLD_PTXC_BUILD_PATH);
#endif
  out.push_back("libbitfold-ptxc.so.0");
  return out;
}

const PtxCompiler &ptxCompiler() {
  static PtxCompiler lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void *h = openFirst(ptxcCandidates(), &lib.path);
    if (!h) {
      lib.why = "libbitfold-ptxc.so.0 not found";
      return;
    }
    symbol(h, lib.id, "bitfold_ptxc_id"); // optional
    lib.ok = symbol(h, lib.compile, "bitfold_ptxc_compile") &&
             symbol(h, lib.version, "bitfold_ptxc_version");
    if (!lib.ok)
      lib.why = lib.path + " lacks bitfold_ptxc_compile";
  });
  return lib;
}

llvm::Expected<AssembledCubin> viaPtxCompiler(llvm::StringRef ptx,
                                              llvm::StringRef arch,
                                              int optLevel) {
  const PtxCompiler &lib = ptxCompiler();
  if (!lib.ok)
    return fail("PTX Compiler API: " + lib.why);
  std::string gpu = ("--gpu-name=" + arch).str();
  std::string opt = llvm::formatv("-O{0}", optLevel).str();
  const char *opts[] = {gpu.c_str(), "--verbose", opt.c_str()};
  struct Outputs {
    AssembledCubin cubin;
    std::string error;
  } out;
  out.cubin.tool = "ptxcompiler";
  auto sink = [](void *ctx, int what, const char *data, size_t n) {
    auto *o = static_cast<Outputs *>(ctx);
    if (what == 0)
      o->cubin.cubin.assign(data, data + n);
    else
      (what == 1 ? o->cubin.log : o->error).assign(data, n);
  };
  int rc = lib.compile(ptx.data(), ptx.size(), 3, opts, sink, &out);
  if (rc != 0)
    return fail(llvm::formatv("PTX Compiler API failed ({0}): {1}", rc,
                              out.error));
  if (out.cubin.cubin.empty())
    return fail("PTX Compiler API returned no cubin");
  return std::move(out.cubin);
}

CubinLinker &driverLinker() {
  static CubinLinker linker;
  return linker;
}

} // namespace

void bitfold::codegen::setDriverLinker(CubinLinker linker) {
  driverLinker() = std::move(linker);
}

std::string bitfold::codegen::findPtxas() {
  if (const char *env = std::getenv("BITFOLD_PTXAS"))
    if (*env && llvm::sys::fs::can_execute(env))
      return env;
  std::string baked = std::string(BITFOLD_CUDA_BIN_DIR) + "/ptxas";
  if (llvm::sys::fs::can_execute(baked))
    return baked;
  if (llvm::ErrorOr<std::string> p = llvm::sys::findProgramByName("ptxas"))
    return *p;
  return "";
}

llvm::Expected<AssembledCubin>
bitfold::codegen::assembleWithPtxas(llvm::StringRef ptx, llvm::StringRef arch,
                                    int optLevel) {
  std::string ptxas = findPtxas();
  if (ptxas.empty())
    return fail("ptxas not found (set BITFOLD_PTXAS, or put it on PATH)");
  llvm::SmallString<128> in, cubin, log;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("bitfold", "ptx", in))
    return fail("temporary file: " + ec.message());
  llvm::sys::fs::createTemporaryFile("bitfold", "cubin", cubin);
  llvm::sys::fs::createTemporaryFile("bitfold", "log", log);
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(in);
    llvm::sys::fs::remove(cubin);
    llvm::sys::fs::remove(log);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(in, ec);
    if (ec)
      return fail("cannot write " + in + ": " + ec.message());
    os << ptx;
  }
  std::string archOpt = ("-arch=" + arch).str();
  std::string opt = llvm::formatv("-O{0}", optLevel).str();
  llvm::SmallVector<llvm::StringRef, 8> args{ptxas, archOpt, "-v", opt, "-o",
                                             cubin, in};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt,
                                                llvm::StringRef(log),
                                                llvm::StringRef(log)};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects, 0, 0,
                                     &err);
  AssembledCubin out;
  out.tool = "ptxas";
  if (auto buf = llvm::MemoryBuffer::getFile(log))
    out.log = (*buf)->getBuffer().str();
  if (rc != 0)
    return fail(llvm::formatv("ptxas failed ({0}{1}): {2}", rc,
                              err.empty() ? "" : ", " + err, out.log));
  auto buf = llvm::MemoryBuffer::getFile(cubin, /*IsText=*/false);
  if (!buf)
    return fail("ptxas wrote no cubin");
  out.cubin.assign((*buf)->getBufferStart(), (*buf)->getBufferEnd());
  return out;
}

llvm::Expected<AssembledCubin> bitfold::codegen::assemble(llvm::StringRef ptx,
                                                          llvm::StringRef arch,
                                                          llvm::StringRef tool,
                                                          int optLevel) {
  if (optLevel < 0 || optLevel > 3)
    return fail(llvm::formatv("assembler optimisation level {0} (0-3)",
                              optLevel));
  if (tool.empty())
    if (const char *env = std::getenv("BITFOLD_CUBIN_TOOL"))
      tool = env;
  if (tool == "ptxas")
    return assembleWithPtxas(ptx, arch, optLevel);
  if (tool == "nvJitLink")
    return viaNvJitLink(ptx, arch, optLevel);
  if (tool == "ptxcompiler")
    return viaPtxCompiler(ptx, arch, optLevel);
  if (tool.empty() && ptxCompiler().ok)
    return viaPtxCompiler(ptx, arch, optLevel);
  if (tool == "driver" || (tool.empty() && !nvJitLink().ok && driverLinker())) {
    if (!driverLinker())
      return fail("no driver linker installed (runtime's setDriverLinker)");
    AssembledCubin out;
    out.tool = "driver";
    llvm::Expected<std::vector<char>> c =
        driverLinker()(ptx, arch, optLevel, out.log);
    if (!c)
      return c.takeError();
    out.cubin = std::move(*c);
    return out;
  }
  if (!tool.empty())
    return fail("unknown cubin tool '" + tool +
                "' (ptxcompiler, nvJitLink, ptxas or driver)");
  if (nvJitLink().ok)
    return viaNvJitLink(ptx, arch, optLevel);
  return assembleWithPtxas(ptx, arch, optLevel);
}

namespace {

/// "path size mtime-ns inode" of a file, or "path -" when absent.
std::string fileIdentity(llvm::StringRef path) {
  struct stat st;
  if (::stat(path.str().c_str(), &st) != 0)
    return (path + " -").str();
  return llvm::formatv("{0} {1} {2}.{3} {4}", path, uint64_t(st.st_size),
                       int64_t(st.st_mtim.tv_sec), int64_t(st.st_mtim.tv_nsec),
                       uint64_t(st.st_ino))
      .str();
}

/// A libnvJitLink.so.13 already loaded into this process (by another
/// library, e.g. PyTorch's), which a dlopen by name would return.
std::string loadedNvJitLink() {
  std::string found;
  dl_iterate_phdr(
      [](struct dl_phdr_info *info, size_t, void *out) {
        llvm::StringRef name = info->dlpi_name ? info->dlpi_name : "";
        if (!llvm::sys::path::filename(name).starts_with("libnvJitLink.so"))
          return 0;
        *static_cast<std::string *>(out) = name.str();
        return 1;
      },
      &found);
  return found;
}

} // namespace

std::string bitfold::codegen::toolchainFingerprint() {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "bitfold " << BITFOLD_VERSION << "; LLVM " << BITFOLD_LLVM_VERSION
     << "\n";
  // PATH is not here: findPtxas()'s answer (its file identity) is.
  for (const char *var : {"BITFOLD_PTXAS", "BITFOLD_CUBIN_TOOL",
                          "BITFOLD_PTXC_LIBRARY", "LD_LIBRARY_PATH"}) {
    const char *v = std::getenv(var);
    os << var << "=" << (v ? v : "(unset)") << "\n";
  }
  for (const std::string &path : ptxcCandidates())
    if (path.find('/') != std::string::npos)
      os << fileIdentity(path) << "\n";
  const char *lib = "libnvJitLink.so.13";
  os << fileIdentity(std::string(BITFOLD_CUDA_LIBRARY_DIR) + "/" + lib)
     << "\n";
  if (const char *ld = std::getenv("LD_LIBRARY_PATH")) {
    llvm::SmallVector<llvm::StringRef, 8> dirs;
    llvm::StringRef(ld).split(dirs, ':', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef d : dirs)
      os << fileIdentity((d + "/" + lib).str()) << "\n";
  }
  os << fileIdentity("/etc/ld.so.cache") << "\n";
  os << "loaded " << loadedNvJitLink() << "\n";
  std::string ptxas = findPtxas();
  os << "ptxas " << (ptxas.empty() ? "-" : fileIdentity(ptxas)) << "\n";
  return s;
}

std::string bitfold::codegen::assemblerVersion() {
  static std::string v = [] {
    const NvJitLink &lib = nvJitLink();
    std::string s;
    // The PTX Compiler API, when it loads, is the default tool: first.
    if (const PtxCompiler &pc = ptxCompiler(); pc.ok) {
      unsigned maj = 0, min = 0;
      pc.version(&maj, &min);
      s += llvm::formatv("PTX Compiler API {0}.{1}", maj, min).str();
      if (pc.id)
        s += (llvm::Twine(" (") + pc.id() + ")").str();
    }
    if (lib.ok) {
      unsigned maj = 0, min = 0;
      lib.version(&maj, &min);
      s += (s.empty() ? "" : "; ") +
           llvm::formatv("nvJitLink {0}.{1}", maj, min).str();
    }
    std::string ptxas = findPtxas();
    if (!ptxas.empty()) {
      llvm::SmallString<128> out;
      llvm::sys::fs::createTemporaryFile("bitfold", "ver", out);
      std::optional<llvm::StringRef> redirects[] = {
          std::nullopt, llvm::StringRef(out), llvm::StringRef(out)};
      llvm::StringRef args[] = {ptxas, "--version"};
      llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects);
      if (auto buf = llvm::MemoryBuffer::getFile(out)) {
        llvm::StringRef text = (*buf)->getBuffer().trim();
        llvm::StringRef lastLine = text.rsplit('\n').second;
        s += (s.empty() ? "" : "; ") + ("ptxas " + lastLine).str();
      }
      llvm::sys::fs::remove(out);
    }
    return s.empty() ? std::string("no assembler") : s;
  }();
  return v;
}
