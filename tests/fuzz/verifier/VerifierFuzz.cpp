//===- tests/fuzz/verifier/VerifierFuzz.cpp - The DSL verifier -------------===//
//
// Decodes the input into a random row program: inputs (dtype, layout, index
// map), scalars, named dims, a random fold order (threads, vector width and
// tree stages straight from the input, including absurd ones) with a stock
// combiner, a random expression DAG over all of them (ops chosen from the
// input, operands of any type), and outputs. build() must return a program
// or an error (never crash, hang or allocate without bound); a program it
// accepts must print and hash deterministically and verify again.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "dsl/Folds.h"
#include "dsl/IR.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace bitfold::dsl;

using bitfold::fuzz::check;
using bitfold::fuzz::Reader;

namespace {

DType dtypeOf(uint8_t b) {
  return DType(b % 4); // F32, BF16, F16, I1
}

/// A fold order from the input: usually sane, sometimes anything.
FoldOrder foldOrder(Reader &r) {
  uint8_t kind = r.get<uint8_t>();
  if (kind % 4 == 0)
    return folds::aten_vectorized_layer_norm();
  if (kind % 4 == 1)
    return folds::flashinfer_rmsnorm(r.get<uint8_t>() & 1 ? 64 : 32);
  if (kind % 4 == 2)
    return folds::serial();
  FoldOrder o;
  o.name = "fuzz";
  int8_t t = r.get<int8_t>(), v = r.get<int8_t>();
  o.threads = t >= 0 ? 1 << (t % 12) : t == -128 ? r.get<int32_t>() : t;
  o.vector = v >= 0 ? 1 << (v % 5) : v == -128 ? r.get<int32_t>() : v;
  int stages = r.get<uint8_t>() % 14;
  for (int i = 0; i < stages; ++i) {
    uint8_t k = r.get<uint8_t>();
    int8_t off = r.get<int8_t>();
    o.stages.push_back({TreeStage::Kind(k % 3),
                        off >= 0 ? 1 << (off % 12)
                        : off == -128 ? r.get<int32_t>()
                                      : off});
  }
  return o;
}

std::shared_ptr<const Combiner> combiner(uint8_t b) {
  switch (b % 3) {
  case 0: return folds::welford_aten();
  case 1: return folds::sum_of_squares();
  default: return folds::sum();
  }
}

/// One expression over `pool` (any operand types: mismatches must be
/// reported by the verifier, not crash it).
Expr expression(Reader &r, const std::vector<Expr> &pool) {
  auto any = [&] { return pool[r.get<uint8_t>() % pool.size()]; };
  uint8_t op = r.get<uint8_t>();
  switch (op % 24) {
  case 0: return any() + any();
  case 1: return any() - any();
  case 2: return any() * any();
  case 3: return div_rn(any(), any());
  case 4: return fma(any(), any(), any());
  case 5: return sqrt_rn(any());
  case 6: return -any();
  case 7: return abs(any());
  case 8: return min_num(any(), any());
  case 9: return max_nan(any(), any());
  case 10: return select(any(), any(), any());
  case 11: return any() < any();
  case 12: return any() != any();
  case 13: return any() && any();
  case 14: return !any();
  case 15: return round(dtypeOf(r.get<uint8_t>()), any());
  case 16: return any().to_f32();
  case 17: return rsqrt_cuda(any());
  case 18: return rcp_nvcc(any());
  case 19: return exp_libdevice(any());
  case 20: return saturate(any());
  case 21: return sub_ftz(any(), any());
  case 22: return Expr(r.get<float>());
  default: return silu(any());
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader r(data, size);
  RowProgram p("fuzz");
  std::vector<Expr> pool;
  std::vector<Dim> dims = {p.cols(), p.rows()};
  for (int i = 0, n = r.get<uint8_t>() % 3; i < n; ++i)
    dims.push_back(p.dim(i ? "T" : "S"));
  for (int i = 0, n = 1 + r.get<uint8_t>() % 4; i < n; ++i) {
    uint8_t b = r.get<uint8_t>();
    Input in = p.input("x" + std::to_string(i), dtypeOf(b),
                       Layout(b / 4 % 2), IndexMap(b / 8 % 3),
                       dims[r.get<uint8_t>() % dims.size()]);
    pool.push_back(in.row());
  }
  for (int i = 0, n = r.get<uint8_t>() % 3; i < n; ++i)
    pool.push_back(p.scalar("s" + std::to_string(i), dtypeOf(r.get<uint8_t>())));
  for (const Dim &d : dims)
    pool.push_back(d.to_f32());
  for (int i = 0, n = r.get<uint8_t>() % 3; i < n; ++i) {
    Expr in = expression(r, pool);
    State st = p.fold(in, foldOrder(r), combiner(r.get<uint8_t>()));
    for (const Expr &e : st.fields)
      pool.push_back(e);
  }
  for (int i = 0, n = r.get<uint8_t>() % 24; i < n; ++i)
    pool.push_back(expression(r, pool));
  for (int i = 0, n = 1 + r.get<uint8_t>() % 3; i < n; ++i) {
    uint8_t b = r.get<uint8_t>();
    p.output("y" + std::to_string(i), dtypeOf(b), Layout(b / 4 % 2),
             pool[r.get<uint8_t>() % pool.size()]);
  }
  if (r.get<uint8_t>() == 1)
    p.groups(int(r.get<int8_t>()));
  if (r.get<uint8_t>() == 1)
    p.guardCols(r.get<int32_t>(), r.get<int32_t>(), r.get<int32_t>());
  auto def = p.build();
  if (!def) {
    llvm::consumeError(def.takeError());
    return 0;
  }
  std::string text = printCanonical(**def);
  check(text == printCanonical(**def), "printing is not deterministic");
  check(contentHash(text) == contentHash(printCanonical(**def)),
        "hashing is not deterministic");
  if (llvm::Error e = verify(**def)) {
    llvm::consumeError(std::move(e));
    check(false, "a built program does not verify again");
  }
  return 0;
}
