//===- tests/tools/TextFormatCliTest.cpp - the text format from the CLI ---===//
//
// Every example of docs/kernel-format.md compiles with `bitfold compile
// --program` (scalars are launch arguments: none needs a value); every
// stock kernel's `interp --print-text` parses back to the same text and
// hash; interp takes --scalar, enforces the program's guard as compile does
// and dumps its operands as .npy.
//
//===----------------------------------------------------------------------===//

#include "CliSupport.h"

#include "dsl/Parser.h"
#include "templates/Problem.h"
#include "templates/UserKernels.h"
#include "tests/dsl/KernelTexts.h"

#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace bitfold;
using namespace bitfold::tools::test;

namespace {

/// A column count the program's guard admits, near 64.
int64_t colsInGuard(const dsl::KernelDef &def) {
  int64_t c = std::max<int64_t>(def.minCols, 64);
  c = std::min<int64_t>(c, def.maxCols);
  return c - c % def.colsMultipleOf;
}

/// A small shape of `def`'s kind: N,C,H,W for channels-last programs, else
/// B,S,D.
std::string smallShape(const dsl::KernelDef &def) {
  std::string cols = std::to_string(colsInGuard(def));
  for (const dsl::OperandDecl &o : def.operands)
    if (o.layout == dsl::Layout::ChannelsLast)
      return "1," + cols + ",2,2";
  return "2,3," + cols;
}

/// The doc example with its program renamed (names are process-wide).
std::string renamed(std::string text, size_t i) {
  const std::string head = "bitfold.row_program ";
  text.insert(head.size(), "doc" + std::to_string(i) + "_");
  return text;
}

TEST(TextFormatCli, EveryDocExampleCompilesWithoutScalarValues) {
  std::vector<std::string> examples = bitfold::testing::docExamples();
  ASSERT_GE(examples.size(), 14u);
  TempDir dir;
  for (size_t i = 0; i < examples.size(); ++i) {
    std::string text = renamed(examples[i], i);
    auto def = dsl::parseKernel(text);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    std::string file = dir.write("ex" + std::to_string(i) + ".bfk", text);
    std::vector<std::string> args = {"compile", "--program", file, "--shape",
                                     smallShape(**def), "--ptx-only"};
    Output o = cli(args);
    EXPECT_EQ(o.status, 0) << joined(args) << "\n" << text << o.out << o.err;
  }
}

/// The text `interp --print-text` printed: everything up to the hash line.
struct PrintedText {
  std::string text, hash;
};
PrintedText splitPrinted(llvm::StringRef out) {
  const llvm::StringRef marker = "# hash ";
  size_t at = out.find(marker);
  if (at == llvm::StringRef::npos)
    return {};
  llvm::StringRef hash = out.substr(at + marker.size()).take_until(
      [](char c) { return c == '\n'; });
  return {out.substr(0, at + marker.size() + hash.size() + 1).str(),
          hash.str()};
}

TEST(TextFormatCli, EveryStockKernelsPrintedTextParsesBackUnchanged) {
  for (const templates::DescriptorRef &t :
       templates::Registry::global().all()) {
    if (t->seedShapes.empty() || t->name.rfind("cli_", 0) == 0)
      continue;
    auto p = templates::makeProblem(t->name, "", t->seedShapes.front());
    ASSERT_TRUE(bool(p)) << t->name << ": " << llvm::toString(p.takeError());
    // The seed shape with 16 rows (aten's orders hold from 16 rows): the
    // interpreter runs it in no time.
    auto dims = templates::parseDims(t->seedShapes.front());
    ASSERT_TRUE(bool(dims));
    int axis = templates::colsAxis(*p->def, int(dims->size()));
    int rowsAxis = axis == int(dims->size()) - 1 ? axis - 1 : int(dims->size()) - 1;
    std::string shape;
    for (int d = 0; d < int(dims->size()); ++d)
      shape += (d ? "," : "") +
               std::to_string(d == axis ? (*dims)[d] : d == rowsAxis ? 16 : 1);
    std::vector<std::string> args = {"interp", t->name, "--shape", shape,
                                     "--print-text"};
    Output o = cli(args);
    ASSERT_EQ(o.status, 0) << joined(args) << "\n" << o.err;
    PrintedText printed = splitPrinted(o.out);
    ASSERT_FALSE(printed.text.empty()) << joined(args) << "\n" << o.out;
    auto again = dsl::parseKernel(printed.text);
    ASSERT_TRUE(bool(again)) << joined(args) << "\n"
                             << llvm::toString(again.takeError());
    EXPECT_EQ((*again)->hash, printed.hash) << joined(args);
    EXPECT_EQ((*again)->hash, p->def->hash) << joined(args);
    EXPECT_EQ((*again)->canonicalText, p->def->canonicalText) << joined(args);
  }
}

const char *const kAddEps = R"(bitfold.row_program cli_add_eps v1
groups 1
guard cols % 4 == 0, 4 <= cols <= 64
input x : f32 row_major per_element
scalar eps : f32 default 1e-6
scalar gain : f32
body:
  %x = load x : f32
  %e = scalar eps : f32
  %g = scalar gain : f32
  %t = add %x, %e : f32
  %y = mul %t, %g : f32
  output y : f32 row_major = %y
)";

TEST(TextFormatCli, InterpNeedsAValueForAScalarWithoutDefaultCompileNone) {
  TempDir dir;
  std::string file = dir.write("add_eps.bfk", kAddEps);
  Output missing = cli({"interp", "--program", file, "--shape", "2,8"});
  EXPECT_EQ(missing.status, 2) << missing.err;
  EXPECT_NE(missing.err.find("scalar 'gain' declares no default; give its "
                             "value (--scalar gain=VALUE)"),
            std::string::npos)
      << missing.err;
  Output given = cli({"interp", "cli_add_eps", "--shape", "2,8", "--scalar",
                      "gain=2", "--scalar", "eps=0.5"});
  EXPECT_EQ(given.status, 0) << given.err;
  Output compiled =
      cli({"compile", "cli_add_eps", "--shape", "2,8", "--ptx-only"});
  EXPECT_EQ(compiled.status, 0) << compiled.err;
  Output unknown = cli({"compile", "cli_add_eps", "--shape", "2,8",
                        "--ptx-only", "--scalar", "gian=2"});
  EXPECT_EQ(unknown.status, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("no scalar 'gian' (scalars: eps, gain)"),
            std::string::npos)
      << unknown.err;
}

TEST(TextFormatCli, InterpRefusesAShapeOutsideTheGuardAsCompileDoes) {
  // cli_add_eps is registered by the test above or here.
  TempDir dir;
  std::string file = dir.write("add_eps.bfk", kAddEps);
  if (auto d = templates::addUserKernelFile(file); !d)
    llvm::consumeError(d.takeError()); // registered by the test above
  for (std::string cmd : {"interp", "compile"}) {
    std::vector<std::string> args = {cmd,        "cli_add_eps", "--shape",
                                     "2,6",      "--scalar",    "gain=1",
                                     "--ptx-only"};
    if (cmd == "interp")
      args.pop_back();
    Output o = cli(args);
    EXPECT_NE(o.status, 0) << joined(args);
    EXPECT_NE(o.err.find("needs cols % 4 == 0 and 4 <= cols <= 64; the shape "
                         "has 6 columns"),
              std::string::npos)
        << joined(args) << "\n" << o.err;
  }
}

TEST(TextFormatCli, InterpDumpWritesEveryOperandAsNpy) {
  TempDir dir;
  std::string file = dir.write("scale.bfk", scaleProgram("cli_dump_scale"));
  std::string out = dir.file("dump");
  Output o = cli({"interp", "--program", file, "--shape", "3,16", "--dump",
                  out});
  ASSERT_EQ(o.status, 0) << o.err;
  for (const char *name : {"x", "y"}) {
    auto buf = llvm::MemoryBuffer::getFile(out + "/" + name + ".npy");
    ASSERT_TRUE(bool(buf)) << name;
    llvm::StringRef data = (*buf)->getBuffer();
    ASSERT_GT(data.size(), 10u);
    EXPECT_TRUE(data.starts_with("\x93NUMPY\x01"));
    size_t header = 10 + uint8_t(data[8]) + 256 * uint8_t(data[9]);
    EXPECT_EQ(header % 64, 0u);
    EXPECT_NE(data.find("'descr': '<u2'"), llvm::StringRef::npos);
    EXPECT_NE(data.find("'shape': (3, 16)"), llvm::StringRef::npos);
    EXPECT_EQ(data.size(), header + 3 * 16 * 2) << name;
  }
  // The output holds what the interpreter wrote: bf16(2 * x).
  auto x = llvm::MemoryBuffer::getFile(out + "/x.npy");
  auto y = llvm::MemoryBuffer::getFile(out + "/y.npy");
  ASSERT_TRUE(x && y);
  size_t header = (*x)->getBufferSize() - 3 * 16 * 2;
  for (size_t e = 0; e < 48; ++e) {
    uint16_t xb, yb;
    std::memcpy(&xb, (*x)->getBufferStart() + header + 2 * e, 2);
    std::memcpy(&yb, (*y)->getBufferStart() + header + 2 * e, 2);
    EXPECT_EQ(yb, uint16_t(xb + 0x80)) << "element " << e; // exponent + 1
  }
}

} // namespace

namespace {

/// A zoo file's `# shape: N,R,C` line (kernels guarded to one width, such
/// as aten's D = 4096 reduction order), else a small default.
std::string zooShape(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return "2,8,256";
  llvm::StringRef text = (*buf)->getBuffer();
  size_t at = text.find("# shape: ");
  if (at == llvm::StringRef::npos)
    return "2,8,256";
  return text.substr(at + 9).split('\n').first.trim().str();
}

TEST(TextFormatCli, EveryZooKernelInterpretsAndCompiles) {
  std::error_code ec;
  std::string dir = std::string(BITFOLD_SOURCE_DIR) + "/examples/zoo";
  int seen = 0;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!llvm::StringRef(it->path()).ends_with(".bfk"))
      continue;
    ++seen;
    for (std::string cmd : {"interp", "compile"}) {
      std::vector<std::string> args = {cmd, "--program", it->path(),
                                       "--shape", zooShape(it->path()),
                                       "--scalar",
                                       "scale=0.0625"};
      if (it->path().find("scale") == std::string::npos &&
          it->path().find("fp8") == std::string::npos)
        args.resize(5);
      if (cmd == "compile")
        args.push_back("--ptx-only");
      Output o = cli(args);
      EXPECT_EQ(o.status, 0) << joined(args) << "\n" << o.out << o.err;
    }
  }
  EXPECT_GE(seen, 10);
}

} // namespace
