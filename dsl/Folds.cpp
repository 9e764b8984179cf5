//===- dsl/Folds.cpp - Stock fold orders and combiners --------------------===//

#include "dsl/Folds.h"

#include <algorithm>

using namespace bitfold::dsl;

FoldOrder folds::aten_vectorized_layer_norm() {
  FoldOrder o;
  o.name = "aten_vectorized_layer_norm";
  o.threads = 128;
  o.vector = 4;
  for (int off : {16, 8, 4, 2, 1})
    o.stages.push_back({TreeStage::ShuffleDown, off});
  // Warps (0,2) and (1,3) are lanes 0+64 and 32+96; then (0,1) is 0+32.
  o.stages.push_back({TreeStage::CrossWarp, 64});
  o.stages.push_back({TreeStage::CrossWarp, 32});
  return o;
}

FoldOrder folds::flashinfer_rmsnorm(int threadsPerRow) {
  FoldOrder o;
  o.name = "flashinfer_rmsnorm_tpr" + std::to_string(threadsPerRow);
  o.threads = threadsPerRow;
  o.vector = 8;
  for (int off : {1, 2, 4, 8, 16})
    if (off < threadsPerRow)
      o.stages.push_back({TreeStage::ButterflyXor, off});
  for (int off = 32; off < threadsPerRow; off *= 2)
    o.stages.push_back({TreeStage::CrossWarp, off});
  return o;
}

FoldOrder folds::serial() {
  FoldOrder o;
  o.name = "serial";
  o.threads = 1;
  o.vector = 1;
  return o;
}

FoldOrder folds::warp_butterfly(int vector) {
  FoldOrder o;
  o.name = "warp_butterfly";
  o.threads = 32;
  o.vector = vector;
  for (int offset = 1; offset < 32; offset *= 2)
    o.stages.push_back({TreeStage::ButterflyXor, offset});
  return o;
}

std::shared_ptr<const Combiner> folds::welford_aten() {
  auto push = [](const State &s, const Expr &x) {
    // delta = x - mean; n' = n + 1; mean' = fma(delta, 1/n', mean);
    // m2' = fma(delta, x - mean', m2)   (nvcc contracts both).
    Expr n = s[0] + Expr(1.0f);
    Expr delta = x - s[1];
    Expr mean = fma(delta, rcp_nvcc(n), s[1]);
    Expr m2 = fma(delta, x - mean, s[2]);
    return State{{n, mean, m2}};
  };
  auto combine = [](const State &b, const State &a) {
    // self = B (lower lane), other = A (upper lane), as cuWelfordCombine.
    Expr n = a[0] + b[0];
    Expr c = rcp_nvcc(n);
    Expr delta = b[1] - a[1];
    Expr wB = c * b[0];
    Expr wA = a[0] * c;
    Expr mean = fma(a[1], wA, wB * b[1]);
    Expr m2 = fma(wB, a[0] * (delta * delta), a[2] + b[2]);
    // "if not n > 0" the result is (0, 0, n): both sides are computed and
    // the select is exact.
    Expr nonEmpty = n > Expr(0.0f);
    return State{{n, select(nonEmpty, mean, Expr(0.0f)),
                  select(nonEmpty, m2, Expr(0.0f))}};
  };
  return std::make_shared<Combiner>(
      "welford_aten", std::vector<std::string>{"n", "mean", "m2"},
      std::vector<float>{0.0f, 0.0f, 0.0f}, push, combine);
}

std::shared_ptr<const Combiner> folds::sum_of_squares() {
  return std::make_shared<Combiner>(
      "sum_of_squares", std::vector<std::string>{"acc"},
      std::vector<float>{0.0f},
      [](const State &s, const Expr &x) { return State{{s[0] + x * x}}; },
      [](const State &self, const State &other) {
        return State{{self[0] + other[0]}};
      });
}

std::shared_ptr<const Combiner> folds::sum() {
  return std::make_shared<Combiner>(
      "sum", std::vector<std::string>{"acc"}, std::vector<float>{0.0f},
      [](const State &s, const Expr &x) { return State{{s[0] + x}}; },
      [](const State &self, const State &other) {
        return State{{self[0] + other[0]}};
      });
}

folds::AtenReduceKernel folds::aten_sum_kernel(DType input) {
  bool narrow = input == DType::BF16 || input == DType::F16;
  return {4, narrow ? 8 : 4};
}

folds::AtenReduceKernel folds::aten_norm_kernel(DType) { return {4, 4}; }

namespace {

int64_t divUp(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t lastPow2(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n)
    p *= 2;
  return p;
}

/// Shared-memory stages (>= 32 lanes) cross warps; the rest are shuffles.
TreeStage stageFor(int offset) {
  return {offset % 32 == 0 ? TreeStage::CrossWarp : TreeStage::ShuffleDown,
          offset};
}

/// ReduceConfig::set_block_dimension: (block_width, block_height).
std::pair<int64_t, int64_t> blockShape(int64_t dim0, int64_t dim1,
                                       int64_t maxThreads) {
  int64_t d0 = dim0 < maxThreads ? lastPow2(dim0) : maxThreads;
  int64_t d1 = dim1 < maxThreads ? lastPow2(dim1) : maxThreads;
  int64_t bw = std::min<int64_t>(d0, 32);
  int64_t bh = std::min(d1, maxThreads / bw);
  bw = std::min(d0, maxThreads / bh);
  return {bw, bh};
}

} // namespace

int64_t folds::aten_reduce_row_class(int64_t rows) {
  return rows >= 16 ? 16 : lastPow2(rows);
}

folds::AtenReduceConfig folds::aten_reduce_config(int64_t cols, int64_t rows,
                                                  AtenReduceKernel kernel,
                                                  int numSMs,
                                                  int maxThreadsPerSM) {
  // setReduceConfig and ReduceConfig::set_block_dimension, torch 2.11.
  AtenReduceConfig c;
  c.vectorized = cols >= 128;
  int64_t dim0 = c.vectorized ? cols / kernel.inputVecSize : cols;
  auto [bw, bh] = blockShape(dim0, rows, 512);
  int64_t stepIn = bw, stepOut = 1;
  bool splitWarps = divUp(cols, stepIn) >= std::min<int64_t>(bh * 16, 256);
  if (splitWarps)
    stepIn *= bh;
  else
    stepOut *= bh;
  c.blockWidth = int(bw);
  c.blockHeight = splitWarps ? int(bh) : 1;
  int64_t vpt = divUp(cols, stepIn);
  int64_t grid = divUp(rows, stepOut);
  int64_t target = int64_t(numSMs) * (maxThreadsPerSM / (bw * bh));
  if (splitWarps && vpt >= 256 && grid <= target)
    c.ctas = int(std::max(std::min(divUp(target, grid), divUp(vpt, 16)),
                          divUp(vpt, 256)));
  return c;
}

FoldOrder folds::aten_reduce(int64_t cols, int64_t rows,
                             AtenReduceKernel kernel, int numSMs,
                             int maxThreadsPerSM) {
  AtenReduceConfig c =
      aten_reduce_config(cols, rows, kernel, numSMs, maxThreadsPerSM);
  FoldOrder o;
  // Rows enter the block shape through pow2(rows) only (16 and more give
  // one shape), and the split across CTAs never happens for rows of at most
  // 255 * 512 elements (docs/aten-reduce.md section 2): the orders come in
  // row classes [1], [2,3], [4,7], [8,15], [16, max). Longer rows: exactly R.
  if (c.ctas == 1 && cols <= 255 * 512) {
    o.minRows = aten_reduce_row_class(rows);
    o.maxRows = o.minRows == 16 ? INT64_MAX : 2 * o.minRows - 1;
  } else {
    o.minRows = o.maxRows = rows;
  }
  // Named by the class below 16 rows, so every row count of a class builds
  // the same text (and cache key).
  int64_t named = rows < 16 ? o.minRows : rows;
  o.name = "aten_reduce_c" + std::to_string(cols) + "_r" +
           std::to_string(named) + "_vt" + std::to_string(kernel.vt0) + "_v" +
           std::to_string(kernel.inputVecSize);
  o.threads = c.blockWidth * c.blockHeight;
  o.ctas = c.ctas;
  if (c.vectorized) {
    o.vector = o.accumulators = kernel.inputVecSize;
    o.accumulatorMap = FoldOrder::AccumulatorMap::VectorElement;
    o.alignedVectors = true;
  } else {
    o.vector = 1;
    o.accumulators = kernel.vt0;
  }
  // block_x_reduce: offsets bw/2 .. 1 (shared memory down to 32, then
  // shuffle-down 16 .. 1); block_y_reduce: rows of bw lanes, bh/2 .. 1.
  std::vector<TreeStage> x, y;
  for (int off = c.blockWidth / 2; off >= 1; off /= 2)
    x.push_back(stageFor(off));
  for (int off = c.blockHeight / 2; off >= 1; off /= 2)
    y.push_back(stageFor(off * c.blockWidth));
  o.stages = x;
  o.stages.insert(o.stages.end(), y.begin(), y.end());
  // global_reduce's last CTA runs block_y_reduce before block_x_reduce.
  if (o.ctas > 1) {
    o.finalStages = y;
    o.finalStages.insert(o.finalStages.end(), x.begin(), x.end());
  }
  return o;
}

folds::AtenReduceConfig
folds::aten_reduce_outer_config(int64_t cols, int64_t outputs, int outputVec,
                                int numSMs, int maxThreadsPerSM) {
  // setReduceConfig with reduction_on_fastest_striding_dimension false:
  // dim0 = outputs / output_vec_size (block.x), dim1 = cols (block.y).
  const int64_t dim0 = outputs / outputVec;
  auto [bw, bh] = blockShape(dim0, cols, 512 / outputVec);
  int64_t stepIn = 1, stepOut = bw; // block.x splits the outputs
  bool split = cols >= bh * 16 || cols >= 256;
  if (split)
    stepIn *= bh;
  else
    stepOut *= bh;
  AtenReduceConfig c;
  c.blockWidth = 1;
  c.blockHeight = split ? int(bh) : 1;
  int64_t vpt = divUp(cols, stepIn);
  int64_t grid = divUp(dim0, stepOut);
  int64_t target = int64_t(numSMs) * (maxThreadsPerSM / (bw * bh));
  if (split && vpt >= 256 && grid <= target)
    c.ctas = int(std::max(std::min(divUp(target, grid), divUp(vpt, 16)),
                          divUp(vpt, 256)));
  return c;
}

FoldOrder folds::aten_reduce_outer(int64_t cols, int64_t outputs,
                                   int outputVec, AtenReduceKernel kernel,
                                   int numSMs, int maxThreadsPerSM) {
  AtenReduceConfig c = aten_reduce_outer_config(cols, outputs, outputVec,
                                                numSMs, maxThreadsPerSM);
  FoldOrder o;
  o.name = "aten_reduce_outer_c" + std::to_string(cols) + "_r" +
           std::to_string(outputs) + "_ov" + std::to_string(outputVec) +
           "_vt" + std::to_string(kernel.vt0);
  o.threads = c.blockHeight;
  o.ctas = c.ctas;
  o.vector = 1;
  o.accumulators = kernel.vt0;
  o.outputVec = outputVec;
  for (int off = c.blockHeight / 2; off >= 1; off /= 2)
    o.stages.push_back(stageFor(off));
  if (o.ctas > 1)
    o.finalStages = o.stages; // the last CTA: block_y_reduce only
  // From outputs / outputVec >= 32 on, block.x is a whole warp and block.y
  // no longer depends on the output count; the CTA split then stops once
  // the grid exceeds the target (section 9). Below, block.x is
  // lastPow2(outputs / outputVec) threads: one class per power of two.
  const int64_t maxThreads = 512 / outputVec;
  const int64_t bh = std::min(
      cols < maxThreads ? lastPow2(cols) : maxThreads, maxThreads / 32);
  const bool split = cols >= bh * 16 || cols >= 256;
  int64_t minRows = 32 * int64_t(outputVec);
  if (split && divUp(cols, bh) >= 256) {
    const int64_t bw = maxThreads / bh;
    const int64_t target = int64_t(numSMs) * (maxThreadsPerSM / maxThreads);
    minRows = (bw * target + 1) * outputVec;
  }
  o.minRows = o.maxRows = outputs;
  if (outputs >= minRows && o.ctas == 1) {
    o.minRows = minRows;
    o.maxRows = INT64_MAX;
    return o;
  }
  if (outputs >= 32 * int64_t(outputVec))
    return o;
  // A small image class [lo, 2 lo - 1]: one order where both ends agree.
  const int64_t lo = aten_reduce_outer_row_class(outputs, outputVec);
  AtenReduceConfig end = aten_reduce_outer_config(cols, 2 * lo - 1, outputVec,
                                                  numSMs, maxThreadsPerSM);
  AtenReduceConfig start = aten_reduce_outer_config(cols, lo, outputVec,
                                                    numSMs, maxThreadsPerSM);
  if (start.blockHeight == c.blockHeight && start.ctas == c.ctas &&
      end.blockHeight == c.blockHeight && end.ctas == c.ctas) {
    o.minRows = lo;
    o.maxRows = 2 * lo - 1;
  }
  return o;
}

int64_t folds::aten_reduce_outer_row_class(int64_t outputs, int outputVec) {
  const int64_t dim0 = std::max<int64_t>(outputs / outputVec, 1);
  return (dim0 >= 32 ? 32 : lastPow2(dim0)) * outputVec;
}

int folds::aten_output_vec_size(int64_t spatial) {
  return spatial % 4 == 0 ? 4 : spatial % 2 == 0 ? 2 : 1;
}

std::optional<FoldOrder> folds::aten_reduce_plain(int64_t cols, int64_t rows,
                                                  AtenReduceKernel kernel,
                                                  int numSMs,
                                                  int maxThreadsPerSM) {
  FoldOrder o = aten_reduce(cols, rows, kernel, numSMs, maxThreadsPerSM);
  if (o.ctas != 1)
    return std::nullopt;
  const int64_t L = o.threads;
  if (o.alignedVectors) {
    if (cols % o.vector != 0 || cols / o.vector > L)
      return std::nullopt;
  } else if (divUp(cols, L) > o.accumulators) {
    return std::nullopt;
  }
  o.name += "_plain";
  o.accumulators = 1;
  o.accumulatorMap = FoldOrder::AccumulatorMap::RoundRobin;
  o.alignedVectors = false;
  return o;
}

std::shared_ptr<const Combiner> folds::norm_two_aten() {
  return std::make_shared<Combiner>(
      "norm_two_aten", std::vector<std::string>{"acc"},
      std::vector<float>{0.0f},
      [](const State &s, const Expr &x) { return State{{fma(x, x, s[0])}}; },
      [](const State &self, const State &other) {
        return State{{self[0] + other[0]}};
      });
}
