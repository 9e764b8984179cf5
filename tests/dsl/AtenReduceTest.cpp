//===- tests/dsl/AtenReduceTest.cpp - aten's reduction order as a fold ----===//
//
// folds::aten_reduce, run by the interpreter, against (1) a literal
// thread-by-thread transcription of Reduce.cuh written here, over every
// C in 1..1100 and the split paths, and (2) accumulators of the numpy
// emulator that matched torch 2.11 on the H200 bit for bit in 11448 cases
// (bench/results/2026-12-01-aten-reduce-probe.md).
//
//===----------------------------------------------------------------------===//

#include "dsl/Folds.h"
#include "dsl/Interp.h"
#include "dsl/Parser.h"
#include "templates/AtenNorms.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

using namespace bitfold;
using namespace bitfold::dsl;
using folds::AtenReduceKernel;

namespace {

/// A program whose output (every column of row r) is the fold's raw state.
std::shared_ptr<const KernelDef> accumulatorProgram(const FoldOrder &order,
                                                    bool norm) {
  RowProgram p("aten_reduce_probe");
  Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
  State s = p.fold(x, order, norm ? folds::norm_two_aten() : folds::sum());
  p.output("y", DType::F32, Layout::RowMajor, s[0]);
  llvm::Expected<std::shared_ptr<const KernelDef>> def = p.build();
  if (!def) {
    ADD_FAILURE() << llvm::toString(def.takeError());
    return nullptr;
  }
  return *def;
}

/// The fold's state for each of the rows of x (rows x cols, packed): the
/// first rows of a tensor with the row count `order` was built for (so the
/// order's row range is widened to admit the prefix).
std::vector<float> interpretRows(FoldOrder order, bool norm,
                                 std::vector<float> x, int64_t rows,
                                 int64_t cols) {
  order.minRows = 1;
  order.maxRows = INT64_MAX;
  auto def = accumulatorProgram(order, norm);
  if (!def)
    return {};
  std::vector<float> y(size_t(rows * cols));
  Binding b;
  b.cols = cols;
  b.groupRows = {rows};
  b.tensors = {{HostTensor{DType::F32, x.data(), rows, cols},
                HostTensor{DType::F32, y.data(), rows, cols}}};
  if (llvm::Error e = interpret(*def, b)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return {};
  }
  std::vector<float> out(rows);
  for (int64_t r = 0; r < rows; ++r)
    out[r] = y[r * cols];
  return out;
}

/// Reduce.cuh for one row, thread by thread (ReduceOp::run with
/// thread_reduce_impl or input_vectorized_thread_reduce_impl,
/// block_x_reduce, block_y_reduce, global_reduce); `rowIndex * cols` is the
/// row's element offset in a vector-aligned buffer.
float transcribedAten(const float *row, int64_t cols, int64_t rows,
                      int64_t rowIndex, AtenReduceKernel k, bool norm) {
  folds::AtenReduceConfig cfg = folds::aten_reduce_config(cols, rows, k);
  const int bw = cfg.blockWidth, bh = cfg.blockHeight, G = cfg.ctas;
  const int64_t stride = int64_t(bw) * bh * G; // config.step_input
  auto reduce = [&](float acc, float v) {
    return norm ? std::fma(v, v, acc) : acc + v;
  };
  std::vector<float> value(size_t(stride), 0.0f);
  for (int64_t tid = 0; tid < stride; ++tid) {
    const int x = int(tid % bw);
    const bool reduceTail = tid < bw; // threadIdx.y == 0 and blockIdx.y == 0
    float vl[16] = {};
    if (!cfg.vectorized) {
      int64_t idx = tid;
      const int vt0 = k.vt0;
      while (idx + (vt0 - 1) * stride < cols) {
        for (int i = 0; i < vt0; ++i)
          vl[i] = reduce(vl[i], row[idx + i * stride]);
        idx += stride * vt0;
      }
      for (int i = 0; i < vt0 && idx < cols; ++i, idx += stride)
        vl[i] = reduce(vl[i], row[idx]);
      for (int i = 1; i < vt0; ++i)
        vl[0] = vl[0] + vl[i];
    } else {
      const int V = k.inputVecSize;
      const float *data = row;
      int64_t end = cols;
      int shift = int((rowIndex % V) * (cols % V) % V);
      if (shift > 0) {
        data -= shift;
        end += shift;
        if (x >= shift && x < V && reduceTail)
          vl[0] = reduce(vl[0], data[x]);
        end -= V;
        data += V;
      }
      for (int64_t idx = tid; idx * V + V - 1 < end; idx += stride)
        for (int i = 0; i < V; ++i)
          vl[i] = reduce(vl[i], data[idx * V + i]);
      int64_t tail = end - end % V + x;
      if (reduceTail && tail < end)
        vl[0] = reduce(vl[0], data[tail]);
      for (int i = 1; i < V; ++i)
        vl[0] = vl[0] + vl[i];
    }
    value[tid] = vl[0];
  }
  // block_x_reduce then block_y_reduce in each CTA: every lane reads the
  // values of the stage before (shuffles and __syncthreads are
  // simultaneous), lanes past the block read nothing.
  auto xStages = [&](float *v) {
    for (int o = bw / 2; o >= 1; o /= 2) {
      std::vector<float> old(v, v + bw * bh);
      for (int t = 0; t < bw * bh; ++t)
        if (t % bw + o < bw)
          v[t] = old[t] + old[t + o];
    }
  };
  auto yStages = [&](float *v) {
    for (int o = bh / 2; o >= 1; o /= 2)
      for (int y = 0; y < o; ++y)
        for (int xx = 0; xx < bw; ++xx)
          v[y * bw + xx] = v[y * bw + xx] + v[(y + o) * bw + xx];
  };
  for (int c = 0; c < G; ++c) {
    xStages(&value[size_t(c) * bw * bh]);
    yStages(&value[size_t(c) * bw * bh]);
  }
  if (G == 1)
    return value[0];
  std::vector<float> last(size_t(bw) * bh, 0.0f);
  for (int t = 0; t < bw * bh; ++t)
    for (int c = t; c < G; c += bw * bh)
      last[t] = last[t] + value[size_t(c) * bw * bh];
  yStages(last.data());
  xStages(last.data());
  return last[0];
}

/// Inputs spanning 2^-8..2^8 with both signs: sums depend on their order.
std::vector<float> wideInput(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-8, 7);
  std::vector<float> x(size_t(rows * cols));
  for (float &v : x)
    v = std::ldexp(n(gen), e(gen));
  return x;
}

void expectMatchesTranscription(int64_t cols, int64_t rows, int64_t bound,
                                AtenReduceKernel k, bool norm, unsigned seed) {
  FoldOrder order = folds::aten_reduce(cols, rows, k);
  std::vector<float> x = wideInput(bound, cols, seed);
  std::vector<float> got = interpretRows(order, norm, x, bound, cols);
  ASSERT_EQ(got.size(), size_t(bound));
  for (int64_t r = 0; r < bound; ++r) {
    float want = transcribedAten(&x[r * cols], cols, rows, r, k, norm);
    ASSERT_EQ(std::bit_cast<uint32_t>(got[r]), std::bit_cast<uint32_t>(want))
        << (norm ? "norm" : "sum") << " shape (" << rows << ", " << cols
        << ") seed " << seed << " vt0 " << k.vt0 << " vec " << k.inputVecSize
        << " order " << order.name << ": first differing row " << r;
  }
}

TEST(AtenReduce, EveryWidthUpTo1100MatchesTheTranscription) {
  for (int64_t C = 1; C <= 1100; ++C) {
    expectMatchesTranscription(C, 37, 3, {4, 8}, false, unsigned(C));
    if (C % 3 == 0)
      expectMatchesTranscription(C, 5, 5, {4, 4}, true, unsigned(C) + 1);
    if (::testing::Test::HasFatalFailure())
      return;
  }
}

TEST(AtenReduce, SplitAcrossWarpsAndCtasMatchesTheTranscription) {
  struct Case { int64_t cols, rows; };
  for (Case c : {Case{131072, 1}, Case{262147, 1}, Case{65536, 4},
                 Case{100000, 16}, Case{200000, 2}, Case{8192, 1}})
    for (bool norm : {false, true}) {
      folds::AtenReduceConfig cfg =
          folds::aten_reduce_config(c.cols, c.rows, {4, 8});
      SCOPED_TRACE(llvm::formatv("cols {0} rows {1}: block {2}x{3}, {4} ctas",
                                 c.cols, c.rows, cfg.blockWidth,
                                 cfg.blockHeight, cfg.ctas)
                       .str());
      expectMatchesTranscription(c.cols, c.rows, std::min<int64_t>(c.rows, 2),
                                 {4, 8}, norm, unsigned(c.cols));
    }
}

TEST(AtenReduce, PlainEquivalentGivesTheSameBitsForSumLikeFolds) {
  int plainWidths = 0;
  for (int64_t C = 1; C <= 1100; ++C)
    for (AtenReduceKernel k : {AtenReduceKernel{4, 8}, AtenReduceKernel{4, 4}}) {
      std::optional<FoldOrder> plain = folds::aten_reduce_plain(C, 37, k);
      if (!plain)
        continue;
      ASSERT_TRUE(plain->isPlain());
      ++plainWidths;
      // bf16-valued inputs: their squares are exact, so the norm is sum-like.
      std::vector<float> x = wideInput(3, C, unsigned(C) + 11);
      for (float &v : x)
        v = roundTo(DType::BF16, v);
      for (bool norm : {false, true}) {
        FoldOrder full = folds::aten_reduce(C, 37, k);
        std::vector<float> want = interpretRows(full, norm, x, 3, C);
        std::vector<float> got = interpretRows(*plain, norm, x, 3, C);
        for (int r = 0; r < 3; ++r)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[r]),
                    std::bit_cast<uint32_t>(want[r]))
              << (norm ? "norm" : "sum") << " cols " << C << " vec "
              << k.inputVecSize << ": first differing row " << r;
      }
    }
  // Every C < 128, and vectorized rows of at most one vector per lane.
  EXPECT_GE(plainWidths, 2 * 127);
  EXPECT_TRUE(folds::aten_reduce_plain(96, 1597440, {4, 4}));
  EXPECT_FALSE(folds::aten_reduce_plain(192, 1597440, {4, 4}));
  EXPECT_TRUE(folds::aten_reduce_plain(4096, 1, {4, 8}));
  EXPECT_FALSE(folds::aten_reduce_plain(4096, 4096, {4, 8}));
}

TEST(AtenReduce, ConfigTakesEachBranchWhereTorchDoes) {
  // Wan VAE norm (C = 96 over 1.6M pixels): strided path, one warp per row.
  folds::AtenReduceConfig wan = folds::aten_reduce_config(96, 1597440, {4, 4});
  EXPECT_FALSE(wan.vectorized);
  EXPECT_EQ(wan.blockWidth, 32);
  EXPECT_EQ(wan.ctas, 1);
  // HF RMSNorm mean over 4096 bf16 values: vectorized, 32 lanes per row.
  folds::AtenReduceConfig hf = folds::aten_reduce_config(4096, 4096, {4, 8});
  EXPECT_TRUE(hf.vectorized);
  EXPECT_EQ(hf.blockWidth, 32);
  EXPECT_EQ(hf.blockHeight, 1);
  // One long row: 512 lanes, split over 16 CTAs on 132 SMs.
  folds::AtenReduceConfig one = folds::aten_reduce_config(131072, 1, {4, 8});
  EXPECT_EQ(one.blockWidth, 512);
  EXPECT_EQ(one.ctas, 16);
  // Launch parameters the probe confirmed (vt0, input_vec_size).
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    bool narrow = t != DType::F32;
    EXPECT_EQ(folds::aten_sum_kernel(t).vt0, 4);
    EXPECT_EQ(folds::aten_sum_kernel(t).inputVecSize, narrow ? 8 : 4);
    EXPECT_EQ(folds::aten_norm_kernel(t).vt0, 4);
    EXPECT_EQ(folds::aten_norm_kernel(t).inputVecSize, 4);
  }
  // C in [64, 128) with few rows takes 64 lanes, with many rows 32.
  EXPECT_EQ(folds::aten_reduce_config(100, 1, {4, 4}).blockWidth, 64);
  EXPECT_EQ(folds::aten_reduce_config(100, 20, {4, 4}).blockWidth, 32);
}

/// x[r][c] of the anchor cases; the same formula as the generator in
/// bench/experiments (all values exact in bf16).
float anchorValue(int64_t r, int64_t c) {
  uint32_t h = uint32_t(uint64_t(r * 7919 + c * 104729 + 12345) * 2654435761u);
  int m = int((h >> 8) % 255) - 127;
  int e = int((h >> 20) % 13) - 6;
  return std::ldexp(float(m), e - 7);
}

TEST(AtenReduce, MatchesTheEmulatorThatMatchedTorchOnTheH200) {
  struct Anchor {
    const char *op;
    int vt0, vec;
    int64_t cols, rows;
    bool scaled; ///< inputs times (1 + 2^-10 + 2^-20): fma matters.
    std::vector<uint32_t> bits;
  };
  // Accumulators (before sqrt / the mean's factor) from
  // bench/experiments/aten_reduce_emu.py for the first rows.
  const std::vector<Anchor> anchors = {
      {"sum", 4, 8, 1001, 37, false, {0x42ce3c70, 0xc2795fe0, 0x4345fd50, 0xc31d53f0, 0xc31a7d90, 0x42162320}},
      {"norm", 4, 4, 96, 1597440, false, {0x46666509, 0x463c4664, 0x4656a210, 0x4664fe1c, 0x4639dee3, 0x4626be6e, 0x467834eb, 0x46590afa}},
      {"norm", 4, 4, 4096, 4096, true, {0x490cf6f7, 0x4910b45b, 0x49070eaa}},
      {"sum", 4, 4, 131072, 1, false, {0xc45474f2}},
      {"sum", 4, 8, 262147, 1, false, {0xc2f09c20}},
      {"norm", 4, 4, 100, 1, false, {0x4667a478}},
      {"sum", 4, 8, 130, 9, false, {0x42b19510, 0x42690d20, 0x4249e4a0, 0x41f6ee00, 0x42de9d00, 0x429accc0, 0xc1a8e780, 0x41677a00, 0xc2aa76a0}},
      {"norm", 4, 4, 1048576, 1, false, {0x4d0adc5f}},
      {"sum", 4, 8, 5120, 8192, false, {0xc335c148, 0x43651dc8}},
  };
  for (const Anchor &a : anchors) {
    const int64_t n = int64_t(a.bits.size());
    std::vector<float> x(size_t(n * a.cols));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < a.cols; ++c)
        x[r * a.cols + c] =
            anchorValue(r, c) * (a.scaled ? 1.0f + 0x1p-10f + 0x1p-20f : 1.0f);
    bool norm = std::string(a.op) == "norm";
    FoldOrder order = folds::aten_reduce(a.cols, a.rows, {a.vt0, a.vec});
    std::vector<float> got = interpretRows(order, norm, x, n, a.cols);
    ASSERT_EQ(got.size(), size_t(n));
    for (int64_t r = 0; r < n; ++r)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[r]), a.bits[r])
          << a.op << " shape (" << a.rows << ", " << a.cols << ") row " << r
          << " order " << order.name;
  }
}

FoldOrder orderWith(void (*edit)(FoldOrder &)) {
  FoldOrder o = folds::aten_reduce(4096, 4096, {4, 8});
  edit(o);
  return o;
}

std::string verifierMessage(const FoldOrder &o) {
  RowProgram p("bad_order");
  Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
  State s = p.fold(x, o, folds::sum());
  p.output("y", DType::F32, Layout::RowMajor, s[0]);
  llvm::Expected<std::shared_ptr<const KernelDef>> def = p.build();
  if (def)
    return "";
  return llvm::toString(def.takeError());
}

TEST(AtenReduce, RowCountsOutsideTheOrdersRangeAreRefused) {
  // From 16 rows on, one order; below, one per row class.
  EXPECT_EQ(folds::aten_reduce(4096, 4096, {4, 8}).minRows, 16);
  EXPECT_EQ(folds::aten_reduce(4096, 4096, {4, 8}).maxRows, INT64_MAX);
  EXPECT_EQ(folds::aten_reduce(4096, 4096, {4, 8}).stages,
            folds::aten_reduce(4096, 17, {4, 8}).stages);
  FoldOrder few = folds::aten_reduce(100, 3, {4, 4});
  EXPECT_EQ(few.minRows, 2);
  EXPECT_EQ(few.maxRows, 3);
  // A row split across CTAs: the order is the row count's own.
  FoldOrder split = folds::aten_reduce(200000, 2, {4, 8});
  EXPECT_EQ(split.minRows, 2);
  EXPECT_EQ(split.maxRows, 2);
  auto def = accumulatorProgram(folds::aten_reduce(300, 64, {4, 8}), false);
  ASSERT_TRUE(def);
  std::vector<float> x(300 * 4, 1.0f), y(300 * 4);
  Binding b;
  b.cols = 300;
  b.groupRows = {4};
  b.tensors = {{HostTensor{DType::F32, x.data(), 4, 300},
                HostTensor{DType::F32, y.data(), 4, 300}}};
  llvm::Error e = interpret(*def, b);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("for 16.."), std::string::npos);
}

TEST(AtenReduce, FromSixteenRowsOnTheOrderDoesNotDependOnTheRowCount) {
  std::vector<int64_t> rowCounts;
  for (int64_t r = 16; r <= 1100; ++r)
    rowCounts.push_back(r);
  for (int64_t r : {int64_t(4096), int64_t(65536), int64_t(1597440),
                    int64_t(1) << 30})
    rowCounts.push_back(r);
  for (int64_t C = 1; C <= 255 * 512; C = C < 2048 ? C + 1 : C + 97)
    for (AtenReduceKernel k : {AtenReduceKernel{4, 4}, AtenReduceKernel{4, 8}}) {
      FoldOrder at16 = folds::aten_reduce(C, 16, k);
      for (int64_t R : rowCounts) {
        FoldOrder o = folds::aten_reduce(C, R, k);
        o.name = at16.name;
        ASSERT_EQ(o, at16) << "cols " << C << " rows " << R << " vec "
                           << k.inputVecSize;
      }
    }
}

// Below 16 rows the block shape follows pow2(rows): one order per row
// class 1, 2..3, 4..7, 8..15, named by the class so each class is one
// definition (and one cache key).
TEST(AtenReduce, BelowSixteenRowsTheOrderDependsOnTheRowClassOnly) {
  for (int64_t C = 1; C <= 255 * 512; C = C < 2048 ? C + 1 : C + 97)
    for (AtenReduceKernel k : {AtenReduceKernel{4, 4}, AtenReduceKernel{4, 8}})
      for (int64_t R = 1; R < 16; ++R) {
        int64_t cls = folds::aten_reduce_row_class(R);
        FoldOrder o = folds::aten_reduce(C, R, k);
        ASSERT_EQ(o, folds::aten_reduce(C, cls, k))
            << "cols " << C << " rows " << R << " vec " << k.inputVecSize;
        ASSERT_EQ(o.minRows, cls);
        ASSERT_EQ(o.maxRows, 2 * cls - 1);
        folds::AtenReduceConfig a = folds::aten_reduce_config(C, R, k),
                                b = folds::aten_reduce_config(C, cls, k);
        ASSERT_EQ(a.blockWidth, b.blockWidth) << "cols " << C << " rows " << R;
        ASSERT_EQ(a.blockHeight, b.blockHeight) << "cols " << C << " rows " << R;
        ASSERT_EQ(a.ctas, 1) << "cols " << C << " rows " << R;
      }
}

// Decode rows: the few-row orders give one row many lanes (512 at D 4096,
// one row), and still match the transcription at every row of the class.
TEST(AtenReduce, DecodeRowCountsMatchTheTranscription) {
  for (int64_t C : {2048, 3072, 4096, 5120, 8192, 4100, 1000, 130})
    for (int64_t R = 1; R <= 17; ++R) {
      expectMatchesTranscription(C, R, std::min<int64_t>(R, 3), {4, 4}, false,
                                 unsigned(C * 31 + R));
      if (R % 4 == 1)
        expectMatchesTranscription(C, R, 1, {4, 8}, true, unsigned(C + R));
      if (::testing::Test::HasFatalFailure())
        return;
    }
}

TEST(AtenReduce, VerifierRejectsMalformedExtensions) {
  EXPECT_EQ(verifierMessage(folds::aten_reduce(4096, 4096, {4, 8})), "");
  EXPECT_EQ(verifierMessage(folds::aten_reduce(1 << 20, 1, {4, 8})), "");
  EXPECT_NE(verifierMessage(orderWith([](FoldOrder &o) { o.accumulators = 3; }))
                .find("needs 8 accumulators, found 3"),
            std::string::npos);
  EXPECT_NE(verifierMessage(orderWith([](FoldOrder &o) {
              o.finalStages = o.stages;
            })).find("final stages merge the gather of several groups"),
            std::string::npos);
  EXPECT_NE(verifierMessage(orderWith([](FoldOrder &o) {
              o.ctas = 4;
              o.finalStages = {o.stages.begin(), o.stages.end() - 1};
            })).find("the final stages merge lanes"),
            std::string::npos);
  EXPECT_NE(verifierMessage(orderWith([](FoldOrder &o) { o.maxRows = 3; }))
                .find("row range 16..3 is empty"),
            std::string::npos);
  EXPECT_NE(verifierMessage(orderWith([](FoldOrder &o) { o.accumulators = 0; }))
                .find("accumulators per lane must be 1..64"),
            std::string::npos);
}

TEST(AtenReduce, PlainOrdersKeepTheirCanonicalText) {
  FoldOrder plain = folds::serial();
  EXPECT_TRUE(plain.isPlain());
  EXPECT_FALSE(folds::aten_reduce(4096, 4096, {4, 8}).isPlain());
  RowProgram p("plain");
  Expr x = p.input("x", DType::F32, Layout::RowMajor).row();
  State s = p.fold(x, plain, folds::sum());
  p.output("y", DType::F32, Layout::RowMajor, s[0]);
  auto def = p.build();
  ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
  EXPECT_EQ((*def)->canonicalText.find("accumulators"), std::string::npos);
}

// ---- The norm templates (templates/AtenNorms.h) vs their eager chains. ----

/// 16-bit or f32 storage for a host tensor, filled from f32 values.
struct Storage {
  DType dtype;
  std::vector<uint16_t> half;
  std::vector<float> full;
  Storage(DType t, const std::vector<float> &v) : dtype(t) {
    if (t == DType::F32) {
      full = v;
      return;
    }
    for (float f : v)
      half.push_back(t == DType::BF16 ? floatToBf16Bits(f) : floatToHalfBits(f));
  }
  Storage(DType t, size_t n) : Storage(t, std::vector<float>(n, 0.0f)) {}
  void *data() {
    return dtype == DType::F32 ? static_cast<void *>(full.data()) : half.data();
  }
  float at(size_t i) const {
    if (dtype == DType::F32)
      return full[i];
    return dtype == DType::BF16 ? bf16BitsToFloat(half[i]) : halfBitsToFloat(half[i]);
  }
  HostTensor tensor(int64_t rows, int64_t cols) {
    return HostTensor{dtype, data(), rows, cols};
  }
};

float rnd(DType t, float v) { return roundTo(t, v); }

float siluRef(float v) {
  return v / (1.0f + expLibdevice(-v, correctlyRoundedApprox()));
}

float rsqrtCudaRef(float v) {
  const ApproxUnit &a = correctlyRoundedApprox();
  if (std::fabs(v) < 0x1p-126f)
    return a.rsqrtApproxFtz(v * 0x1p24f) * 0x1p12f;
  return a.rsqrtApproxFtz(v);
}

/// Wide values rounded to `t`, with zero rows (the clamp) and signed zeros.
std::vector<float> normInput(DType t, int64_t rows, int64_t cols, unsigned seed) {
  std::vector<float> x = wideInput(rows, cols, seed);
  for (float &v : x)
    v = rnd(t, t == DType::F16 ? std::ldexp(v, -4) : v);
  for (int64_t c = 0; c < cols && rows > 3; ++c) {
    x[2 * cols + c] = 0.0f;                      // row 2: all zeros
    x[3 * cols + c] = c % 2 ? -0.0f : x[3 * cols + c];
  }
  return x;
}

TEST(AtenNorms, WanRmsNormSiluMatchesTheEagerChains) {
  using templates::WanNormForm;
  struct Case { DType dt, gammaDt; WanNormForm form; bool bias, convBias; int64_t cols; };
  const DType B = DType::BF16, H = DType::F16, F = DType::F32;
  for (Case k : {Case{B, B, WanNormForm::NormInXDtype, false, false, 96},
                 Case{B, B, WanNormForm::NormInXDtype, true, true, 192},
                 Case{B, B, WanNormForm::NormInF32, false, false, 384},
                 Case{B, F, WanNormForm::NormInXDtype, true, false, 96},
                 Case{H, H, WanNormForm::NormInF32, true, true, 1000},
                 Case{F, F, WanNormForm::NormInF32, true, false, 100},
                 Case{F, F, WanNormForm::NormInXDtype, false, false, 512},
                 Case{B, B, WanNormForm::NormInXDtype, true, false, 1024}}) {
    const int64_t R = 24, C = k.cols;
    templates::WanRmsNormSiluOptions o;
    o.dtype = k.dt, o.gammaDtype = k.gammaDt, o.form = k.form;
    o.biasTensor = k.bias, o.convBias = k.convBias, o.cols = C, o.rows = 1597440;
    auto def = templates::atenWanRmsNormSilu(o);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    std::vector<float> xv = normInput(k.dt, R, C, unsigned(C));
    std::vector<float> g = wideInput(1, C, 7), b = wideInput(1, C, 8),
                       cb = wideInput(1, C, 9);
    for (float &v : g) v = rnd(k.gammaDt, v);
    for (float &v : b) v = rnd(k.gammaDt, v);
    for (float &v : cb) v = rnd(k.dt, v);
    Storage x(k.dt, xv), gs(k.gammaDt, g), bs(k.gammaDt, b), cbs(k.dt, cb),
        y(k.gammaDt, size_t(R * C));
    std::vector<HostTensor> ts = {x.tensor(R, C), gs.tensor(1, C)};
    if (k.bias) ts.push_back(bs.tensor(1, C));
    if (k.convBias) ts.push_back(cbs.tensor(1, C));
    ts.push_back(y.tensor(R, C));
    const float scale = float(std::sqrt(double(C)));
    Binding bind;
    bind.cols = C, bind.groupRows = {R}, bind.tensors = {ts}, bind.scalars = {scale};
    ASSERT_FALSE(bool(interpret(**def, bind)));

    const DType nd = k.form == WanNormForm::NormInF32 ? F : k.dt, od = k.gammaDt;
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> row(C);
      for (int64_t c = 0; c < C; ++c)
        row[c] = k.convBias ? rnd(k.dt, x.at(r * C + c) + cb[c]) : x.at(r * C + c);
      float acc = transcribedAten(row.data(), C, 1597440, r, folds::aten_norm_kernel(nd), true);
      float norm = rnd(nd, std::sqrt(acc));
      float den = rnd(nd, std::max(norm, 1e-12f));
      for (int64_t c = 0; c < C; ++c) {
        float v = rnd(k.dt, row[c] / den);
        v = rnd(k.dt, v * scale);
        v = rnd(od, v * g[c]);
        v = rnd(od, v + (k.bias ? b[c] : 0.0f));
        float want = rnd(od, siluRef(v));
        ASSERT_EQ(std::bit_cast<uint32_t>(y.at(r * C + c)), std::bit_cast<uint32_t>(want))
            << "wan dtype " << dtypeName(k.dt).str() << " gamma " << dtypeName(od).str()
            << " form " << int(k.form) << " bias " << k.bias << " conv bias " << k.convBias
            << " shape (" << R << ", " << C << ") seed " << C << ": first differing (row "
            << r << ", col " << c << ")";
      }
    }
  }
}

// Rows of C >= 128 that are not whole 4-vectors get a head and tail that
// depends on the row; codegen maps them (docs/aten-reduce.md section 7), so
// the templates build at every width, their orders with aligned vectors.
TEST(AtenNorms, WidthsWithAHeadAndTailBuild) {
  for (int64_t c : {130, 1001}) {
    templates::WanRmsNormSiluOptions w;
    w.cols = c;
    auto wan = templates::atenWanRmsNormSilu(w);
    ASSERT_TRUE(bool(wan)) << "wan C = " << c << ": "
                           << llvm::toString(wan.takeError());
    EXPECT_TRUE((*wan)->folds[0].order.alignedVectors);
    templates::HfRmsNormOptions h;
    h.cols = c;
    auto hf = templates::hfRmsNorm(h);
    ASSERT_TRUE(bool(hf)) << "hf D = " << c << ": "
                          << llvm::toString(hf.takeError());
    EXPECT_TRUE((*hf)->folds[0].order.alignedVectors);
  }
  for (int64_t c : {127, 132}) {
    templates::WanRmsNormSiluOptions w;
    w.cols = c;
    auto wan = templates::atenWanRmsNormSilu(w);
    EXPECT_TRUE(bool(wan)) << "wan C = " << c << ": "
                           << (wan ? "" : llvm::toString(wan.takeError()));
  }
}

// From 16 rows on one definition serves every row count; its row range
// stops where the reduced tensor reaches 2^31 bytes (aten splits there).
TEST(AtenNorms, DefinitionsServeSixteenRowsUpToTwoGigabytes) {
  templates::HfRmsNormOptions h;
  h.cols = 4096, h.rows = 1 << 20;
  auto hf = templates::hfRmsNorm(h);
  ASSERT_TRUE(bool(hf)) << llvm::toString(hf.takeError());
  EXPECT_EQ((*hf)->folds[0].order.minRows, 16);
  EXPECT_EQ((*hf)->folds[0].order.maxRows, ((int64_t(1) << 31) - 1) / (4096 * 4));
  h.rows = 16;
  auto hf16 = templates::hfRmsNorm(h);
  ASSERT_TRUE(bool(hf16)) << llvm::toString(hf16.takeError());
  EXPECT_EQ((*hf16)->hash, (*hf)->hash);
  templates::WanRmsNormSiluOptions w;
  w.cols = 96, w.dtype = DType::BF16;
  auto wan = templates::atenWanRmsNormSilu(w);
  ASSERT_TRUE(bool(wan)) << llvm::toString(wan.takeError());
  EXPECT_EQ((*wan)->folds[0].order.maxRows, ((int64_t(1) << 31) - 1) / (96 * 2));
}

TEST(AtenNorms, HfRmsNormMatchesTheEagerChain) {
  struct Case { DType dt, wDt; bool residual, modulate; int64_t cols, rows; };
  const DType B = DType::BF16, F = DType::F32;
  for (Case k : {Case{B, B, false, false, 1024, 20}, Case{B, B, true, false, 2048, 17},
                 Case{B, F, false, false, 3000, 16}, Case{B, B, true, true, 4096, 18},
                 Case{DType::F16, DType::F16, false, true, 5120, 16},
                 Case{B, B, false, false, 8192, 16}, Case{B, B, false, false, 100, 5},
                 Case{F, F, true, true, 5120, 9}, Case{B, B, false, false, 4096, 1},
                 Case{B, F, true, false, 8192, 3}}) {
    const int64_t R = k.rows, C = k.cols, S = 4;
    templates::HfRmsNormOptions o;
    o.dtype = k.dt, o.weightDtype = k.wDt, o.residual = k.residual;
    o.modulate = k.modulate, o.cols = C, o.rows = R;
    auto def = templates::hfRmsNorm(o);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    std::vector<float> xv = normInput(k.dt, R, C, unsigned(C) + 3),
                       res = normInput(k.dt, R, C, unsigned(C) + 4);
    std::vector<float> w = wideInput(1, C, 5), sc = wideInput((R + S - 1) / S, C, 6),
                       sh = wideInput((R + S - 1) / S, C, 7);
    for (float &v : w) v = rnd(k.wDt, v);
    for (float &v : sc) v = rnd(k.dt, std::ldexp(v, -6));
    for (float &v : sh) v = rnd(k.dt, v);
    Storage x(k.dt, xv), rs(k.dt, res), ws(k.wDt, w), scs(k.dt, sc), shs(k.dt, sh),
        sum(k.dt, size_t(R * C)), y(k.wDt, size_t(R * C));
    // Operand order: inputs (x, residual, weight, scale, shift), then outputs.
    std::vector<HostTensor> ts = {x.tensor(R, C)};
    if (k.residual) ts.push_back(rs.tensor(R, C));
    ts.push_back(ws.tensor(1, C));
    if (k.modulate)
      ts.push_back(scs.tensor((R + S - 1) / S, C)), ts.push_back(shs.tensor((R + S - 1) / S, C));
    if (k.residual) ts.push_back(sum.tensor(R, C));
    ts.push_back(y.tensor(R, C));
    const float eps = 1e-6f;
    Binding bind;
    bind.cols = C, bind.groupRows = {R}, bind.tensors = {ts}, bind.scalars = {eps};
    if (k.modulate) bind.dims = {S};
    ASSERT_FALSE(bool(interpret(**def, bind)));

    const float factor = float(R) / float(R * C);
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> h(C), sq(C);
      for (int64_t c = 0; c < C; ++c) {
        h[c] = k.residual ? rnd(k.dt, x.at(r * C + c) + rs.at(r * C + c)) : x.at(r * C + c);
        sq[c] = h[c] * h[c];
      }
      float acc = transcribedAten(sq.data(), C, R, r, folds::aten_sum_kernel(F), false);
      float rstd = rsqrtCudaRef(acc * factor + eps);
      for (int64_t c = 0; c < C; ++c) {
        float v = rnd(k.wDt, w[c] * rnd(k.dt, h[c] * rstd));
        if (k.modulate)
          v = rnd(k.wDt, rnd(k.wDt, v * rnd(k.dt, 1.0f + sc[(r / S) * C + c])) + sh[(r / S) * C + c]);
        ASSERT_EQ(std::bit_cast<uint32_t>(y.at(r * C + c)), std::bit_cast<uint32_t>(v))
            << "hf dtype " << dtypeName(k.dt).str() << " weight " << dtypeName(k.wDt).str()
            << " residual " << k.residual << " modulate " << k.modulate << " shape (" << R
            << ", " << C << "): first differing (row " << r << ", col " << c << ")";
        if (k.residual)
          ASSERT_EQ(sum.at(r * C + c), h[c]) << "residual sum, row " << r << " col " << c;
      }
    }
  }
}

} // namespace

// The extended fold orders print their extra fields; the text format reads
// them back, so aten-order kernels round-trip like the stock ones.
TEST(AtenNorms, TextRoundTripsWithTheExtendedOrder) {
  std::vector<templates::KernelDefRef> defs;
  for (int64_t cols : {96, 1024, 4096, 200000}) {
    templates::HfRmsNormOptions o;
    o.cols = cols, o.rows = cols == 200000 ? 3 : 64, o.residual = true;
    auto def = templates::hfRmsNorm(o);
    if (!def) {
      // Widths beyond the template's guard are refused, not mis-built.
      EXPECT_EQ(cols, 200000) << llvm::toString(def.takeError());
      llvm::consumeError(def.takeError());
      continue;
    }
    defs.push_back(*def);
  }
  for (int64_t c : {96, 384}) {
    templates::WanRmsNormSiluOptions o;
    o.cols = c;
    auto def = templates::atenWanRmsNormSilu(o);
    ASSERT_TRUE(bool(def)) << llvm::toString(def.takeError());
    defs.push_back(*def);
  }
  bool sawExtended = false;
  for (const templates::KernelDefRef &d : defs) {
    for (const FoldDecl &f : d->folds)
      sawExtended |= !f.order.isPlain() || f.order.hasRowRange();
    auto parsed = parseKernel(d->canonicalText, d->name);
    ASSERT_TRUE(bool(parsed)) << d->name << ": "
                              << llvm::toString(parsed.takeError());
    EXPECT_EQ((*parsed)->canonicalText, d->canonicalText) << d->name;
    EXPECT_EQ((*parsed)->hash, d->hash) << d->name;
  }
  EXPECT_TRUE(sawExtended) << "no kernel used the extended fold order";
}
