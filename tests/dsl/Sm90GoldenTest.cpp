//===- tests/dsl/Sm90GoldenTest.cpp - interpreter vs committed H200 outputs ===//
//
// Every stock template (but the two below), interpreted with the sm_90
// approximation models on the committed inputs, must equal the outputs the
// H200 wrote for them (tests/dsl/golden-sm90, captured by
// tests/gpu/approx/capture_golden.py), bit for bit. The aten-order norms (wan_rmsnorm_silu, hf_rmsnorm) have no
// golden yet: tests/gpu/test_aten_norms.py compares them with PyTorch.
//
//===----------------------------------------------------------------------===//

#include "tests/dsl/Sm90Golden.h"

#include "dsl/ApproxModels.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <set>

using namespace bitfold;
using namespace bitfold::testing;

namespace {

const char *kHowToCapture =
    "capture them on an H200: build the release package "
    "(scripts/package-release.sh), then on the GPU host run\n"
    "  bash scripts/gpu-run.sh --out results 'python3 "
    "tests/gpu/approx/capture_golden.py tests/dsl/golden-sm90 $OUT'\n"
    "then unpack results/golden-sm90-out.tar into tests/dsl/golden-sm90/ "
    "(tar xf results/golden-sm90-out.tar -C tests/dsl/golden-sm90) and "
    "commit the .out files (docs/approx-models.md)";

std::string path(const GoldenCase &c, const char *ext) {
  return std::string(BITFOLD_GOLDEN_SM90_DIR) + "/" + c.name + ext;
}

std::unique_ptr<llvm::MemoryBuffer> readFile(const std::string &p) {
  auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  return buf ? std::move(*buf) : nullptr;
}

/// First differing element of output bytes `got` vs `want`, as text.
std::string firstDifference(const GoldenProblem &p, llvm::StringRef got,
                            llvm::StringRef want) {
  size_t off = 0;
  for (const GoldenOperand &o : p.operands) {
    if (!o.isOutput)
      continue;
    const unsigned eb = dsl::dtypeBytes(o.dtype);
    for (size_t e = 0; e < o.bytes.size() / eb; ++e) {
      size_t at = off + e * eb;
      if (got.substr(at, eb) == want.substr(at, eb))
        continue;
      uint32_t g = 0, w = 0;
      std::memcpy(&g, got.data() + at, eb);
      std::memcpy(&w, want.data() + at, eb);
      return llvm::formatv("operand '{0}' element {1} (row {2}, col {3}): "
                           "interpreter {4:x}, H200 {5:x}",
                           o.name, e, int64_t(e) / p.cols, int64_t(e) % p.cols,
                           g, w)
          .str();
    }
    off += o.bytes.size();
  }
  return "no difference";
}

TEST(Sm90Golden, EveryStockTemplateHasACase) {
  // No H200 outputs captured yet for the aten-order norms; their GPU bits
  // are compared with PyTorch itself (tests/gpu/test_aten_norms.py).
  const std::set<std::string> notYet = {"wan_rmsnorm_silu", "hf_rmsnorm"};
  for (const templates::DescriptorRef &t :
       templates::Registry::global().all()) {
    if (notYet.count(t->name))
      continue;
    bool found = false;
    for (const GoldenCase &c : goldenCases())
      found |= c.tmpl == t->name;
    EXPECT_TRUE(found) << t->name << " has no sm_90 golden case";
  }
}

TEST(Sm90Golden, InterpreterEqualsTheH200OnEveryStockTemplate) {
  dsl::ApproxChoice approx = dsl::approxForArch("sm_90");
  ASSERT_TRUE(approx.exact) << approx.note;
  for (const GoldenCase &c : goldenCases()) {
    std::string label = llvm::formatv("{0} ({1} {2}, seed {3})", c.name,
                                      c.tmpl, c.params, c.seed)
                            .str();
    llvm::Expected<GoldenProblem> p = makeGoldenProblem(c);
    ASSERT_TRUE(bool(p)) << label << ": " << llvm::toString(p.takeError());
    auto in = readFile(path(c, ".in"));
    ASSERT_TRUE(in) << label << ": " << path(c, ".in")
                    << " missing: run sm90_golden_gen "
                    << BITFOLD_GOLDEN_SM90_DIR << ", then " << kHowToCapture;
    std::vector<char> inputs = concatBytes(*p, /*outputs=*/false);
    ASSERT_EQ(in->getBuffer(), llvm::StringRef(inputs.data(), inputs.size()))
        << label << ": the committed inputs are not what the case generates "
        << "now; regenerate them (sm90_golden_gen) and " << kHowToCapture;
    auto out = readFile(path(c, ".out"));
    ASSERT_TRUE(out) << label << ": no H200 outputs (" << path(c, ".out")
                     << "); " << kHowToCapture;
    dsl::Binding b = p->binding();
    ASSERT_FALSE(bool(dsl::interpret(*p->def, b, *approx.unit))) << label;
    std::vector<char> got = concatBytes(*p, /*outputs=*/true);
    ASSERT_EQ(out->getBufferSize(), got.size()) << label;
    llvm::StringRef gotText(got.data(), got.size());
    EXPECT_TRUE(gotText == out->getBuffer())
        << label << ": shape " << p->rows << "x" << p->cols << ", first "
        << firstDifference(*p, gotText, out->getBuffer());
  }
}

} // namespace
