//===- codegen/QuickConfig.cpp - The config that compiles fastest ---------===//
//
// quickConfig (Codegen.h): what the runtime's quick-first mode launches
// while a shape class's chosen config compiles.
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "codegen/Plan.h"

#include "llvm/Support/MathExtras.h"

#include <cstdlib>
#include <optional>
#include <utility>

using namespace bitfold;
using namespace bitfold::codegen;
using dsl::KernelDef;
using namespace bitfold::keys;

namespace {
/// The elements of a row a thread's code spells out (a loop counts its body
/// once), an output element three fold elements (it is several
/// instructions, a fold push about one): what the PTX, and so ptxas's time
/// (about 43 us a PTX instruction), grows with. On the CPU box the
/// every-config compile times of the seed shapes follow it
/// (bench/results/2026-12-04-s21-quick-compile-cpu.md).
int64_t spelledOutElements(const KernelDef &def, const Plan &plan) {
  if (plan.rolled) // channels-first loops over C: a body per phase
    return 4 * (int64_t(plan.folds.size()) + 3);
  int64_t n = 0;
  for (size_t f = 0; f < plan.folds.size(); ++f) {
    const FoldPlan &fp = plan.folds[f];
    // A push updates every field (a Welford one three); a merge of the
    // tree about four pushes, in shared memory also a store, a barrier and
    // loads.
    const int64_t push = 2 * int64_t(def.folds[f].combiner->numFields()) - 1;
    n += push * fp.k * fp.V *
         (fp.reps - fp.loopReps + (fp.loopReps ? fp.loopStep : 0));
    for (const StagePlan &st : fp.stages)
      n += 4 * push + (st.where == StagePlan::Shared ? 100 : 0);
  }
  const int64_t outputs =
      plan.outputUsesFoldMapping
          ? int64_t(plan.folds[0].k) * plan.folds[0].V * plan.folds[0].reps
          : int64_t(plan.outVectorElems) *
                (plan.outChunks - plan.outLoopChunks +
                 (plan.outLoopChunks ? plan.outLoopStep : 0));
  return n + 3 * outputs;
}
} // namespace

TileConfig codegen::quickConfig(const KernelDef &def, const ShapeSpec &shape) {
  const TileConfig fallback = defaultConfig(def, shape);
  auto elements = [&](const TileConfig &c) -> std::optional<int64_t> {
    llvm::Expected<Plan> p = makePlan(def, shape, c);
    if (!p) {
      llvm::consumeError(p.takeError());
      return std::nullopt;
    }
    return spelledOutElements(def, *p);
  };
  // How far c's rows a CTA are from the default's (a factor of two is 1):
  // nearer keeps the default's CTA count.
  auto rowsOff = [&](const TileConfig &c) {
    return std::abs(int(llvm::Log2_64(c.rowsPerCta)) -
                    int(llvm::Log2_64(fallback.rowsPerCta)));
  };
  std::optional<TileConfig> best;
  int64_t bestElements = 0;
  for (const TileConfig &c : enumerateConfigs(def, shape)) {
    // The quick kernel serves until the chosen one is ready, so it keeps
    // the default's access width and about its CTAs: on the H200, conv_bias
    // and the Wan norm at [1,96,4,480,832] ran 6.5x and 6.2x slower at
    // r1.t128.v1 (2-byte accesses, a CTA a row of 96) than their defaults.
    if (c.vectorElems != fallback.vectorElems ||
        c.rowsPerCta * 4 < fallback.rowsPerCta)
      continue;
    std::optional<int64_t> n = elements(c);
    if (!n)
      continue;
    // Fewest elements spelled out, then the rows a CTA nearest the
    // default's (hf_rmsnorm at (1,4096,4096): r1.t256.v4.p2 31.2 us, r2
    // 40.7 us, default r1), then more rows.
    if (!best || *n < bestElements ||
        (*n == bestElements &&
         std::pair(rowsOff(c), -int64_t(c.rowsPerCta)) <
             std::pair(rowsOff(*best), -int64_t(best->rowsPerCta)))) {
      best = c;
      bestElements = *n;
    }
  }
  // The estimate is coarse: only a clear saving (a tenth or more) is worth
  // a second compile (ln_modulate at 4096 columns: r1.t256.v4.p2, 8% fewer
  // elements than the default r1.t128.v4.p1, has 44% more PTX).
  std::optional<int64_t> base = elements(fallback);
  if (!best || !base || bestElements * 10 > *base * 9)
    return fallback;
  return *best;
}
