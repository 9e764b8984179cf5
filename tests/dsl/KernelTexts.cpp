//===- tests/dsl/KernelTexts.cpp - Programs and texts for parser tests ----===//

#include "tests/dsl/KernelTexts.h"

#include "dsl/Folds.h"

#include "llvm/Support/MemoryBuffer.h"

using namespace bitfold;
using namespace bitfold::dsl;
using bitfold::testing::NamedProgram;

namespace {

NamedProgram finish(const std::string &name, RowProgram &p) {
  auto def = p.build();
  if (!def) {
    llvm::consumeError(def.takeError());
    return {name, nullptr};
  }
  return {name, *def};
}

/// aten's LayerNorm order and Welford combiner, two outputs, channels-last.
NamedProgram welfordTwoOutputs() {
  RowProgram p("welford_two_outputs");
  Expr x = p.input("x", f16, Layout::ChannelsLast).row();
  Expr eps = p.scalar("eps", 1e-5f);
  p.guardCols(4, 4, 1024);
  Expr xf = x.to_f32();
  State st = p.fold(xf, folds::aten_vectorized_layer_norm(),
                    folds::welford_aten());
  Expr rstd = rsqrt_cuda(div_rn(st[2], p.cols().to_f32()) + eps);
  p.output("y", f16, Layout::ChannelsLast, round(f16, (xf - st[1]) * rstd));
  p.output("centered", f32, Layout::ChannelsLast, xf - st[1]);
  p.guardAlign("x", 4);
  return finish("welford_two_outputs", p);
}

/// Two folds whose values the output uses in reverse order, so the text
/// writes fold 1 before fold 0.
NamedProgram foldsOutOfOrder() {
  RowProgram p("folds_out_of_order");
  Expr x = p.input("x", f32, Layout::RowMajor).row();
  State sum = p.fold(x, folds::serial(), folds::sum());
  State ss = p.fold(x, folds::flashinfer_rmsnorm(64), folds::sum_of_squares());
  p.guardCols(512, 512, 4096);
  p.output("y", f32, Layout::RowMajor, ss[0] * x + sum[0]);
  return finish("folds_out_of_order", p);
}

/// Per-batch and per-column operands, two groups, predicates, a finish.
NamedProgram operandsAndPredicates() {
  RowProgram p("operands_and_predicates");
  p.groups(2);
  Dim S = p.dim("S");
  Expr x = p.input("x", bf16, Layout::RowMajor).row();
  Expr scale =
      p.input("scale", bf16, Layout::RowMajor, IndexMap::PerBatch, S).row();
  Expr w = p.input("w", f32, Layout::RowMajor, IndexMap::PerColumn).row();
  Expr t = p.scalar("threshold");
  auto meanOf = std::make_shared<Combiner>(
      "mean_of", std::vector<std::string>{"n", "acc"},
      std::vector<float>{0.0f, -0.0f},
      [](const State &s, const Expr &v) {
        return State{{s[0] + Expr(1.0f), s[1] + v}};
      },
      [](const State &a, const State &b) {
        return State{{a[0] + b[0], a[1] + b[1]}};
      },
      std::vector<std::string>{"mean"},
      [](const State &s) { return State{{div_rn(s[1], s[0])}}; });
  State m = p.fold(x * scale, folds::serial(), meanOf);
  Expr keep = (x > t) || !(w != w);
  Expr v = select(keep, fma(x, scale, m[0]), max_nan(w, S.to_f32()));
  p.output("y", bf16, Layout::RowMajor, round(bf16, v));
  return finish("operands_and_predicates", p);
}

} // namespace

std::vector<NamedProgram> bitfold::testing::handWrittenPrograms() {
  return {welfordTwoOutputs(), foldsOutOfOrder(), operandsAndPredicates()};
}

std::string bitfold::testing::docPath() {
  return std::string(BITFOLD_SOURCE_DIR) + "/docs/kernel-format.md";
}

std::string bitfold::testing::corpusDir() {
  return std::string(BITFOLD_SOURCE_DIR) + "/tests/fuzz/parser/corpus";
}

std::string bitfold::testing::readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return "";
  return (*buffer)->getBuffer().str();
}

std::vector<std::string> bitfold::testing::docExamples() {
  std::vector<std::string> out;
  const std::string doc = readFile(docPath());
  llvm::StringRef rest = doc;
  const llvm::StringRef open = "```kernel\n", close = "```\n";
  while (true) {
    size_t at = rest.find(open);
    if (at == llvm::StringRef::npos)
      return out;
    rest = rest.substr(at + open.size());
    size_t end = rest.find(close);
    out.push_back(rest.substr(0, end).str());
    if (end == llvm::StringRef::npos)
      return out;
    rest = rest.substr(end + close.size());
  }
}
