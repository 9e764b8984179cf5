//===- examples/user_kernels/main.cpp - Define, check, compile, launch ----===//
//
// For each kernel of Kernels.cpp: checks that its text file (NAME.bfk)
// parses to the same program (same hash); runs it in the interpreter on
// seeded data and prints a few results; compiles it to PTX (CPU only) and
// prints the head of the PTX; when the CUDA driver and a GPU are present,
// launches it through libbitfold.so (Runtime::kernelFromSource) and
// compares the GPU's bits with the interpreter's.
//
// usage: user_kernels [DIR_WITH_BFK_FILES]   (default: the source folder)
//
//===----------------------------------------------------------------------===//

#include "GpuBuffers.h"
#include "Kernels.h"

#include "codegen/Codegen.h"
#include "dsl/ApproxModels.h"
#include "dsl/Interp.h"
#include "dsl/Parser.h"

#include "bitfold/bitfold.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

using namespace bitfold;

namespace {

constexpr int64_t kRows = 4, kCols = 256;

struct HostData {
  std::vector<std::vector<uint16_t>> operands; ///< bf16 bits, def order.
  std::vector<float> scalars;
};

int64_t rowsOf(const dsl::OperandDecl &op) {
  return op.map == dsl::IndexMap::PerColumn ? 1 : kRows;
}

HostData seeded(const dsl::KernelDef &def, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  HostData d;
  for (const dsl::OperandDecl &op : def.operands) {
    std::vector<uint16_t> v(size_t(rowsOf(op) * kCols), 0xFFFF);
    if (!op.isOutput)
      for (uint16_t &e : v)
        e = dsl::floatToBf16Bits(normal(gen));
    d.operands.push_back(std::move(v));
  }
  for (const dsl::ScalarDecl &s : def.scalars)
    d.scalars.push_back(s.defaultValue.value_or(1.0f));
  return d;
}

llvm::Error interpret(const dsl::KernelDef &def, HostData &d) {
  dsl::Binding b;
  b.cols = kCols;
  b.groupRows = {kRows};
  b.scalars = d.scalars;
  b.tensors.emplace_back();
  for (size_t i = 0; i < def.operands.size(); ++i)
    b.tensors[0].push_back({dsl::DType::BF16, d.operands[i].data(),
                            rowsOf(def.operands[i]), kCols});
  // The H200's approximations where the tables are available: the
  // interpreter then gives the GPU's bits.
  dsl::ApproxChoice approx = dsl::approxForArch("sm_90");
  return dsl::interpret(def, b, *approx.unit);
}

llvm::Error printPtx(const dsl::KernelDef &def) {
  keys::ShapeSpec shape;
  shape.cols = kCols;
  shape.alignBytes.assign(def.operands.size(), 16);
  shape.maxElementOffset = kRows * kCols;
  keys::CompileOptions opts;
  opts.emitCubin = false;
  auto k = codegen::compile(def, shape, codegen::defaultConfig(def, shape),
                            opts);
  if (!k)
    return k.takeError();
  std::istringstream ptx(k->ptx);
  std::string line;
  int lines = 0, shown = 0;
  while (std::getline(ptx, line))
    if (++lines, line.rfind(".visible .entry", 0) == 0 || shown < 3)
      std::printf("    ptx| %s\n", line.c_str()), ++shown;
  std::printf("  PTX (%s): %d lines, entry %s\n", opts.arch.c_str(), lines,
              k->entryName.c_str());
  return llvm::Error::success();
}

llvm::Expected<std::string> readFile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The text file parses to the very program the C++ builds.
llvm::Error sameAsText(const dsl::KernelDef &def, const std::string &path) {
  auto text = readFile(path);
  if (!text)
    return text.takeError();
  auto parsed = dsl::parseKernel(*text, path);
  if (!parsed)
    return parsed.takeError();
  if ((*parsed)->hash != def.hash)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        path + ": hash " + (*parsed)->hash + " differs from the C++ " +
            def.hash + "\n--- text:\n" + (*parsed)->canonicalText +
            "--- C++:\n" + def.canonicalText);
  std::printf("  %s: same hash %.16s\n", path.c_str(), def.hash.c_str());
  return llvm::Error::success();
}

void printOutputs(const dsl::KernelDef &def, const HostData &d) {
  for (size_t i = 0; i < def.operands.size(); ++i) {
    if (!def.operands[i].isOutput)
      continue;
    std::printf("  interp %s[0, 0:6] =", def.operands[i].name.c_str());
    for (int c = 0; c < 6; ++c)
      std::printf(" %.6g", dsl::bf16BitsToFloat(d.operands[i][c]));
    std::printf("\n");
  }
}

int runOne(const char *file, llvm::Expected<user_kernels::DefRef> def,
           const std::string &dir, Runtime *rt) {
  if (!def) {
    std::fprintf(stderr, "%s: %s\n", file,
                 llvm::toString(def.takeError()).c_str());
    return 1;
  }
  const dsl::KernelDef &k = **def;
  std::printf("%s (%d operands, %zu folds)\n", k.name.c_str(),
              int(k.operands.size()), k.folds.size());
  HostData d = seeded(k, 42);
  llvm::Error e = sameAsText(k, dir + "/" + file);
  if (!e)
    e = interpret(k, d);
  if (!e)
    e = printPtx(k);
  if (e) {
    std::fprintf(stderr, "%s: %s\n", k.name.c_str(),
                 llvm::toString(std::move(e)).c_str());
    return 1;
  }
  printOutputs(k, d);
  if (!rt)
    return 0;
  return compareOnGpu(*rt, k, seeded(k, 42).operands, d.operands, kRows, kCols);
}

} // namespace

int main(int argc, char **argv) {
  std::string dir = argc > 1 ? argv[1] : USER_KERNELS_SOURCE_DIR;
  std::optional<Runtime> rt;
  if (std::string why = gpuAvailable(); why.empty()) {
    auto r = Runtime::create();
    if (r)
      rt.emplace(std::move(r.value()));
    else
      std::printf("no bitfold runtime: %s\n", r.status().message().c_str());
  } else {
    std::printf("no GPU launch (%s): interpreter and PTX only\n", why.c_str());
  }
  Runtime *rtp = rt ? &*rt : nullptr;
  int status = 0;
  status |= runOne("add_rmsnorm.bfk", user_kernels::addRmsNorm(), dir, rtp);
  status |= runOne("bias_gelu_tanh.bfk", user_kernels::biasGeluTanh(), dir, rtp);
  status |= runOne("bias_gelu_erf.bfk", user_kernels::biasGeluErf(), dir, rtp);
  status |= runOne("softmax.bfk", user_kernels::softmax(), dir, rtp);
  return status;
}
