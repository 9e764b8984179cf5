//===- tests/keys/KeysTest.cpp - The specialisation layer -----------------===//

#include "keys/CacheKey.h"
#include "keys/KernelABI.h"
#include "keys/ShapeSpec.h"

#include "templates/Problem.h"
#include "templates/Templates.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <type_traits>

using namespace bitfold;
using namespace bitfold::keys;

namespace {

templates::KernelDefRef build(const char *name, int64_t cols = 0) {
  templates::TemplateArgs args;
  args.cols = cols;
  auto def = templates::buildStock(name, args);
  EXPECT_TRUE(bool(def)) << name << ": " << llvm::toString(def.takeError());
  return *def;
}

/// The class the runtime derives for dense tensors of `rows` x `cols`
/// (every operand per element), from the facts binding computes.
ShapeClass boundClass(const dsl::KernelDef &def, int64_t rows, int64_t cols) {
  std::vector<int> align;
  int64_t maxOffset = 0;
  for (const dsl::OperandDecl &op : def.operands) {
    align.push_back(viewAlignBytes(0x7f0000000000, rows,
                                   uint64_t(cols) * dsl::dtypeBytes(op.dtype)));
    int64_t last = 0;
    EXPECT_TRUE(lastElementOffset(rows, cols, cols, last));
    maxOffset = std::max(maxOffset, last);
  }
  return classifyShape(cols, align, maxOffset, rows, /*bucketRows=*/false);
}

} // namespace

TEST(ShapeSpec, ExactlyTwoTo31ElementsStillIndexWith32Bits) {
  // rows x cols = 2^31: the largest element offset is 2^31 - 1, which 32-bit
  // indexing reaches. One more row needs 64-bit indexing.
  auto def = build("residual_gate");
  const int64_t cols = 4096, rows = (int64_t(1) << 31) / cols;
  for (int64_t r : {rows, rows + 1}) {
    ShapeClass dense = denseShapeClass(*def, cols, {r}, r, false);
    ShapeClass bound = boundClass(*def, r, cols);
    EXPECT_EQ(dense, bound) << "rows " << r << ": dense " << dense.str()
                            << ", bound " << bound.str();
    EXPECT_EQ(dense.index64, r != rows) << "rows " << r;
    EXPECT_EQ(dense.shapeSpec().str(),
              r == rows ? "c4096.a16-16-16-16.o32" : "c4096.a16-16-16-16.o64")
        << "rows " << r;
  }
}

TEST(ShapeSpec, ClassTextAddsTheRowBucketOnlyWhenBucketed) {
  auto def = build("ln_modulate");
  auto shape = templates::parseShape("ln_modulate", "1,4359,4096");
  ASSERT_TRUE(bool(shape)) << llvm::toString(shape.takeError());
  ShapeClass plain = denseShapeClass(*def, shape->cols, shape->groupRows,
                                     shape->rowsPerBatch, false);
  ShapeClass tuned = denseShapeClass(*def, shape->cols, shape->groupRows,
                                     shape->rowsPerBatch, true);
  EXPECT_EQ(plain.str(), "c4096.a16-16-16-16.o32");
  EXPECT_EQ(tuned.str(), "c4096.a16-16-16-16.o32/r4096");
  EXPECT_NE(plain.hash(), tuned.hash());
  EXPECT_EQ(rowBucket(0), 1);
  EXPECT_EQ(rowBucket(8191), 4096);
  EXPECT_EQ(rowBucket(8192), 8192);
}

TEST(ShapeSpec, OneRowOperandsTakeOnlyTheBaseAlignment) {
  // A per-column operand has one row: its stride never matters, as in the
  // runtime's binding. 130 bf16 columns = 260-byte rows (4-byte aligned).
  EXPECT_EQ(viewAlignBytes(0x1000, 1, 260), 16);
  EXPECT_EQ(viewAlignBytes(0x1000, 2, 260), 4);
  EXPECT_EQ(viewAlignBytes(0x1002, 1, 256), 2);
  int64_t last = 0;
  EXPECT_FALSE(lastElementOffset(INT64_MAX, 2, 2, last));
  EXPECT_TRUE(lastElementOffset(0, 2, 2, last));
  EXPECT_EQ(last, 0);
}

TEST(ShapeSpec, TwoLevelRowsSplitTheClassAndKeepOneLevelText) {
  auto def = build("qk_layernorm");
  ShapeClass plain = boundClass(*def, 4096 * 32, 128);
  ShapeClass strided = plain;
  strided.twoLevel = true;
  strided.levels[0] = {32, 3 * 32 * 128}; // x; y (operand 1) one level
  EXPECT_NE(plain, strided);
  EXPECT_NE(plain.hash(), strided.hash());
  EXPECT_EQ(plain.shapeSpec().str(), "c128.a16-16.o32");
  EXPECT_TRUE(plain.shapeSpec().rowLevels.empty());
  ShapeSpec spec = strided.shapeSpec();
  EXPECT_EQ(spec.str(), "c128.a16-16.o32.l0:32x12288");
  ASSERT_EQ(spec.rowLevels.size(), 2u);
  EXPECT_EQ(spec.levels(0), (RowLevels{32, 12288}));
  EXPECT_EQ(spec.levels(1), RowLevels());
  EXPECT_EQ(spec.levels(7), RowLevels());
  // Other levels, another class.
  ShapeClass other = strided;
  other.levels[0] = {16, 3 * 32 * 128};
  EXPECT_NE(other, strided);
  EXPECT_NE(other.shapeSpec().str(), spec.str());
}

TEST(ShapeSpec, OneSpatialSplitsTheClassOnlyWhereTwoOperandsHaveAnS) {
  // Channels-first operands with one S (".s1"): compiled in, so a class of
  // its own; definitions with fewer than two channels-first operands never
  // carry it (dense classes included), so their text stays.
  dsl::KernelDef def;
  auto add = [&](dsl::Layout l, dsl::IndexMap m) {
    dsl::OperandDecl o{};
    o.name = "t" + std::to_string(def.operands.size());
    o.dtype = dsl::DType::BF16;
    o.layout = l;
    o.map = m;
    def.operands.push_back(o);
  };
  add(dsl::Layout::ChannelsFirst, dsl::IndexMap::PerElement);
  add(dsl::Layout::RowMajor, dsl::IndexMap::PerColumn);
  EXPECT_FALSE(spatialSharable(def));
  add(dsl::Layout::ChannelsFirst, dsl::IndexMap::PerElement);
  EXPECT_TRUE(spatialSharable(def));
  ShapeClass each = classifyShape(96, {16, 16, 16}, 1000, 1000, false);
  EXPECT_FALSE(each.oneSpatial);
  ShapeClass one = each;
  one.oneSpatial = true;
  EXPECT_NE(one, each);
  EXPECT_NE(one.hash(), each.hash());
  EXPECT_EQ(each.shapeSpec().str(), "c96.a16-16-16.o32");
  EXPECT_EQ(one.shapeSpec().str(), "c96.a16-16-16.o32.s1");
  EXPECT_TRUE(one.shapeSpec().oneSpatial);
  EXPECT_FALSE(denseShapeClass(*build("qk_layernorm"), 128, {4096}, 4096,
                               false)
                   .oneSpatial);
}

TEST(ShapeSpec, ManyRowsSplitsOnlyLayerNormRowsOf2048To2304Columns) {
  // aten's LayerNorm order (128 lanes) at 2048-2304 columns: from 1024 rows
  // a class of its own (".R", its default runs one warp a row), below it
  // the text of before. Other widths, 32-lane orders and channels-first
  // kernels never carry it.
  auto ln = build("ln_modulate");
  for (int64_t cols : {2048, 2240, 2304}) {
    EXPECT_TRUE(rowCountSplits(*ln, cols)) << cols;
    ShapeClass few = denseShapeClass(*ln, cols, {kManyRows - 1},
                                     kManyRows - 1, false);
    ShapeClass many = denseShapeClass(*ln, cols, {kManyRows}, kManyRows, false);
    EXPECT_FALSE(few.manyRows) << cols;
    EXPECT_TRUE(many.manyRows) << cols;
    EXPECT_NE(few, many) << cols;
    EXPECT_NE(few.hash(), many.hash()) << cols;
    const std::string base =
        "c" + std::to_string(cols) + ".a16-16-16-16.o32";
    EXPECT_EQ(few.str(), base);
    EXPECT_EQ(many.str(), base + ".R");
    EXPECT_TRUE(many.shapeSpec().manyRows);
    // A tune DB's row bucket (a power of two) never straddles kManyRows.
    ShapeClass tuned = denseShapeClass(*ln, cols, {2047}, 2047, true);
    EXPECT_EQ(tuned.str(), base + ".R/r1024");
  }
  for (int64_t cols : {1536, 2016, 2336, 4096}) {
    EXPECT_FALSE(rowCountSplits(*ln, cols)) << cols;
    EXPECT_FALSE(denseShapeClass(*ln, cols, {4096}, 4096, false).manyRows);
  }
  EXPECT_FALSE(rowCountSplits(*build("hf_rmsnorm", 2240), 2240));
  EXPECT_FALSE(rowCountSplits(*build("residual_gate"), 2240));
}

TEST(KernelABI, PositionsAndKindsFollowTheDocumentedOrder) {
  auto def = build("qk_layernorm"); // two groups
  KernelABI abi = KernelABI::of(*def);
  ASSERT_EQ(abi.numGroups, 2);
  const int ops = abi.numOperands;
  EXPECT_EQ(abi.pointer(1, 0), 2 * ops);
  EXPECT_EQ(abi.rowStride(1, ops - 1), 4 * ops - 1);
  EXPECT_EQ(abi.groupRows(0), 4 * ops);
  EXPECT_EQ(abi.dim(0), 4 * ops + 2);
  EXPECT_EQ(abi.scalar(0), 4 * ops + 2 + abi.numDims);
  EXPECT_EQ(size_t(abi.scalar(abi.numScalars)), abi.paramCount());
  using P = KernelABI::Param;
  for (int p = 0; p < int(abi.paramCount()); ++p) {
    P want = p < abi.groupRows(0) ? (p % 2 ? P::RowStride : P::Pointer)
             : p < abi.dim(0)     ? P::GroupRows
             : p < abi.scalar(0)  ? P::Dim
                                  : P::Scalar;
    EXPECT_EQ(int(abi.kindOf(p)), int(want)) << "parameter " << p;
  }
  uint64_t slots[kMaxParams] = {};
  ParamPacker pack(abi, slots);
  pack.groupRows(1, 77);
  pack.scalar(0, 1.0f);
  EXPECT_EQ(slots[abi.groupRows(1)], 77u);
  EXPECT_EQ(slots[abi.scalar(0)], 0x3f800000u);
}

namespace {

CacheKey keyOf(const CompileOptions &o, const char *config = "r1.t128.v8.p1") {
  auto def = build("ln_modulate");
  ShapeClass c = denseShapeClass(*def, 4096, {4096}, 4096, false);
  return makeCacheKey(*def, c.shapeSpec(), *TileConfig::parse(config), o,
                      "toolchain 1");
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char *n, const char *value) : name(n) {
    ::setenv(n, value, 1);
  }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

} // namespace

TEST(CacheKey, EveryCompileOptionsFieldChangesTheKey) {
  const CompileOptions base;
  const std::string baseKey = keyOf(base).text();
  size_t fields = 0;
  base.forEachField([&](const char *, const auto &) { ++fields; });
  ASSERT_EQ(fields, detail::fieldCount<CompileOptions>());
  for (size_t k = 0; k < fields; ++k) {
    CompileOptions o;
    size_t at = 0;
    std::string name;
    o.forEachField([&](const char *n, auto &v) {
      if (at++ != k)
        return;
      name = n;
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, bool>)
        v = !v;
      else if constexpr (std::is_same_v<T, int>)
        v += 1;
      else if constexpr (std::is_same_v<T, std::optional<std::string>>)
        v = v ? *v + "x" : std::string("x");
      else
        v += "x";
    });
    EXPECT_NE(keyOf(o).text(), baseKey) << "field " << name;
    EXPECT_NE(o.keyText(), base.keyText()) << "field " << name;
  }
}

TEST(CacheKey, ArchAndConfigChangeTheKey) {
  CompileOptions o;
  const std::string base = keyOf(o).hash();
  EXPECT_NE(keyOf(o, "r2.t128.v8.p1").hash(), base);
  o.arch = "sm_100";
  EXPECT_NE(keyOf(o).hash(), base);
}

// Every key names this build's codegen revision (16 hex digits of a hash
// over codegen/, dsl/ and keys/), so a cache filled by another build of
// the same version misses.
TEST(CacheKey, TheCodegenRevisionIsInTheKey) {
  const CacheKey k = keyOf(CompileOptions());
  EXPECT_EQ(k.codegenRevision, codegenRevision().str());
  ASSERT_EQ(k.codegenRevision.size(), 16u);
  EXPECT_EQ(k.codegenRevision.find_first_not_of("0123456789abcdef"),
            std::string::npos);
  EXPECT_NE(k.text().find("\ncodegen: " + k.codegenRevision + "\n"),
            std::string::npos);
  CacheKey other = k;
  other.codegenRevision = "0000000000000000";
  EXPECT_NE(other.hash(), k.hash());
}

TEST(CacheKey, OnlyAllowListedEnvironmentVariablesEnterTheKey) {
  const CompileOptions o;
  const std::string base = keyOf(o).text();
  for (const char *name : {"BITFOLD_LIB", "BITFOLD_CACHE_DIR", "BITFOLD_QUIET",
                           "BITFOLD_FOO", "BITFOLD_TUNE_DB"}) {
    ScopedEnv env(name, "/somewhere/else");
    EXPECT_EQ(keyOf(o).text(), base) << name << " changed the key";
  }
  for (const char *name : codegenEnvVars()) {
    ScopedEnv env(name, "ptxas");
    std::string t = keyOf(o).text();
    EXPECT_NE(t, base) << name << " did not change the key";
    EXPECT_NE(t.find(std::string("env: ") + name + "=ptxas"),
              std::string::npos)
        << t;
  }
}

TEST(TileConfig, TextRoundTripsAndBadTextIsAnError) {
  auto c = TileConfig::parse("r2.t64.v4.p2");
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->str(), "r2.t64.v4.p2");
  EXPECT_TRUE(c->twoPass);
  auto bad = TileConfig::parse("r2.t64.v4");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("needs four fields"),
            std::string::npos);
}

TEST(TileConfig, LanesInAWarpAreTheLastFieldW1) {
  auto c = TileConfig::parse("r128.t4.v1.p1.o2.w1");
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_TRUE(c->lanesInWarp);
  EXPECT_EQ(c->pixelsPerThread, 2);
  EXPECT_EQ(c->threadsPerRow, 4);
  EXPECT_EQ(c->str(), "r128.t4.v1.p1.o2.w1");
  auto plain = TileConfig::parse("r64.t4.v1.p1.w1");
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->str(), "r64.t4.v1.p1.w1");
  EXPECT_EQ(plain->pixelsPerThread, 1);
  EXPECT_FALSE(TileConfig::parse("r128.t4.v1.p1.o2")->lanesInWarp);
  EXPECT_NE(*TileConfig::parse("r128.t4.v1.p1.o2"), *c); // in every cache key
  for (const char *bad :
       {"r64.t4.v1.p1.w2", "r64.t4.v1.p1.w0", "r64.t4.v1.p1.w1.o2",
        "r64.t4.v1.p1.w1.w1", "r64.t4.v1.p1.o2.o2", "r64.t4.v1.p1.x1",
        "r64.t4.v1.p1.o2.s1.w1.q1"}) {
    auto e = TileConfig::parse(bad);
    EXPECT_FALSE(bool(e)) << bad;
    if (!e) {
      EXPECT_NE(llvm::toString(e.takeError()).find("tile config '"),
                std::string::npos);
    }
  }
}

TEST(TileConfig, SharedRowIsTheFieldS1) {
  auto c = TileConfig::parse("r2.t32.v4.p1.s1");
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_TRUE(c->sharedRow);
  EXPECT_FALSE(c->twoPass);
  EXPECT_EQ(c->pixelsPerThread, 1);
  EXPECT_EQ(c->str(), "r2.t32.v4.p1.s1");
  EXPECT_FALSE(TileConfig::parse("r2.t32.v4.p1")->sharedRow);
  EXPECT_NE(*TileConfig::parse("r2.t32.v4.p1"), *c); // in every cache key
  for (const char *bad : {"r2.t32.v4.p1.s2", "r2.t32.v4.p1.s0",
                          "r2.t32.v4.p1.o2.s1", "r2.t32.v4.p1.o1"}) {
    auto e = TileConfig::parse(bad);
    EXPECT_FALSE(bool(e)) << bad;
    if (!e)
      llvm::consumeError(e.takeError());
  }
}
