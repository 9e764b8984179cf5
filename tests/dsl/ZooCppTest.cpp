//===- tests/dsl/ZooCppTest.cpp - C++ zoo kernels are their texts' --------===//
//
// The zoo kernels written in C++ (examples/zoo/*.cpp) build the kernel of
// their .bfk file: the same canonical text, hence the same hash, PTX and
// cache entries.
//
//===----------------------------------------------------------------------===//

#include "examples/zoo/ZooKernels.h"

#include "dsl/Parser.h"

#include "gtest/gtest.h"

#include <fstream>
#include <sstream>

using namespace bitfold::dsl;

namespace {

zoo::DefRef parseZoo(const std::string &name) {
  std::string path =
      std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo/" + name + ".bfk";
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  auto def = parseKernel(s.str(), path);
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

void expectSameKernel(llvm::Expected<zoo::DefRef> cpp,
                      const std::string &name) {
  ASSERT_TRUE(bool(cpp)) << llvm::toString(cpp.takeError());
  zoo::DefRef text = parseZoo(name);
  ASSERT_TRUE(text);
  EXPECT_EQ((*cpp)->canonicalText, text->canonicalText);
  EXPECT_EQ((*cpp)->hash, text->hash);
}

TEST(ZooCpp, FusedAddRmsNormIsItsTextsKernel) {
  expectSameKernel(zoo::fusedAddRmsNorm(), "fused_add_rms_norm");
}

TEST(ZooCpp, SiluAndMulFp8IsItsTextsKernel) {
  expectSameKernel(zoo::siluAndMulFp8(), "silu_and_mul_fp8");
}

TEST(ZooCpp, RopeInterleavedIsItsTextsKernel) {
  expectSameKernel(zoo::ropeInterleaved(), "rope_interleaved");
}

TEST(ZooCpp, LayerNormStats2IsItsTextsKernel) {
  expectSameKernel(zoo::layerNormStats2(), "layer_norm_stats2");
}

} // namespace
