//===- codegen/EmitOutputs.cpp - Output scheduling ------------------------===//
//
// Accesses go in groups: first every value of the group (so all its loads
// are issued together), then its stores. A store may alias a later load (an
// output may be an input), so LLVM keeps loads behind earlier stores; one
// access at a time left a thread with a single access's loads in flight.
// The group is bounded by the bytes it loads (registers; 128 made ptxas
// spill a 64-bit address in residual_gate per_batch r2.t64).
// Per-row outputs come last: k stores per row, by the row's lane 0.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <set>

using namespace mlir;
using namespace bitfold;
using namespace bitfold::codegen;

namespace {

constexpr int64_t kGroupLoadBytes = 192;
/// Elements of a gathered channels-first access (gatherOutputs): one
/// branch per exact rewrite for this many, as a bf16 x 8 vector has.
constexpr int kGatherWidth = 8;

/// Operands the outputs load (not looking through folds).
std::set<int> outputLoads(const dsl::KernelDef &def) {
  std::set<int> out;
  for (const dsl::OperandDecl &o : def.operands)
    if (o.isOutput)
      for (const dsl::Expr &v : dsl::outputValues(o))
        loadsOf(def, v.get(), out);
  return out;
}

/// One access's output values: (operand, its elements) per output.
struct Pending {
  const Access *acc;
  std::vector<std::pair<int, std::vector<Value>>> values;
};

} // namespace

void KernelBuilder::emitOutputs(const std::vector<Access> &accs,
                                bool rowOutputs) {
  const std::set<int> outLoads = outputLoads(def);
  size_t i = 0;
  while (i < accs.size()) {
    std::vector<Pending> group;
    int64_t bytes = 0;
    size_t j = i;
    for (; j < accs.size(); ++j) {
      const Access &a = accs[j];
      if (!a.col)
        continue;
      int64_t need = 0;
      for (int op : outLoads) {
        const int64_t elemBytes =
            (pixelVectors(op) ? copies() : 1) *
            int64_t(dsl::dtypeBytes(def.operands[op].dtype));
        if (a.parts.empty()) {
          need += loads.count({op, a.id}) ? 0 : a.width * elemBytes;
          continue;
        }
        for (const Access &part : a.parts)
          need += loads.count({op, part.id}) ? 0 : elemBytes;
      }
      if (!group.empty() && bytes + need > kGroupLoadBytes)
        break;
      bytes += need;
      Pending pd{&a, {}};
      for (size_t o = 0; o < def.operands.size(); ++o) {
        const dsl::OperandDecl &od = def.operands[o];
        if (!od.isOutput || od.map == dsl::IndexMap::PerRow)
          continue;
        // Element e of pixel q at e * o + q (one store for the pixels); an
        // interleaved group's elements are already in that order.
        std::vector<Value> v;
        const int pixels = a.pixels > 1 ? 1 : copies();
        for (int e = 0; e < a.width; ++e)
          for (int q = 0; q < pixels; ++q) {
            selectCopy(q);
            v.push_back(elemValue(od.value.get(), a, e));
          }
        selectCopy(0);
        pd.values.push_back({int(o), std::move(v)});
      }
      group.push_back(std::move(pd));
    }
    i = j;
    for (Pending &pd : group)
      storeGuarded(*pd.acc, pd.values);
  }
  if (rowOutputs)
    emitRowOutputs();
}

void KernelBuilder::storeGuarded(
    const Access &acc,
    ArrayRef<std::pair<int, std::vector<Value>>> values) {
  // One branch on the row; inside it a gathered access stores each part
  // under the part's own column test (only parts that have one).
  auto ifOp = scf::IfOp::create(
      b, loc, andI(rowValid, acc.parts.empty() ? acc.inRange : Value()),
      /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  if (acc.parts.empty()) {
    for (auto &[oi, v] : values)
      storeAccess(oi, acc, v);
    return;
  }
  for (size_t e = 0; e < acc.parts.size(); ++e) {
    const Access &part = acc.parts[e];
    OpBuilder::InsertionGuard inner(b);
    if (part.inRange) {
      auto in = scf::IfOp::create(b, loc, part.inRange, /*withElseRegion=*/false);
      b.setInsertionPoint(in.thenBlock()->getTerminator());
    }
    // Part e's values: its element of every pixel (e * o + q).
    for (auto &[oi, v] : values) {
      const size_t per = v.size() / acc.parts.size();
      storeAccess(oi, part, ArrayRef<Value>(v).slice(e * per, per));
    }
  }
}

std::vector<Access>
KernelBuilder::gatherOutputs(const std::vector<Access> &accs) {
  // Only channels-first plans: their accesses are single elements
  // (columns S apart, or with o pixels per thread one o-pixel vector), so
  // each exact rewrite would branch per element and no rounding would pair.
  // o pixels a thread: kGatherWidth / o channels of all o pixels a group.
  if (!dsl::isChannelsFirst(def))
    return accs;
  const int o = copies();
  std::vector<Access> out;
  int nextId = 0;
  for (const Access &a : accs)
    nextId = std::max(nextId, a.id + 1);
  for (const Access &a : accs) {
    if (!a.col || a.width != 1) {
      out.push_back(a);
      continue;
    }
    if (out.empty() || out.back().parts.empty() ||
        out.back().width + o > kGatherWidth) {
      Access g;
      g.id = nextId++;
      g.width = 0;
      g.col = a.col;
      g.pixels = o;
      out.push_back(std::move(g));
    }
    out.back().parts.push_back(a);
    out.back().width += o;
  }
  return out;
}

void KernelBuilder::emitRowOutputs() {
  // (operand, its k values): value j goes to element j of the row.
  std::vector<std::pair<int, std::vector<Value>>> values;
  // Values first, outside the branch: the row memo may reuse them.
  for (size_t o = 0; o < def.operands.size(); ++o) {
    const dsl::OperandDecl &od = def.operands[o];
    if (!od.isOutput || od.map != dsl::IndexMap::PerRow)
      continue;
    std::vector<Value> v;
    for (const dsl::Expr &e : dsl::outputValues(od))
      v.push_back(rowValue(e.get()));
    values.push_back({int(o), std::move(v)});
  }
  if (values.empty())
    return;
  Value lane0 = cmpI(arith::CmpIPredicate::eq, laneInRow, cI32(0));
  auto ifOp = scf::IfOp::create(b, loc, andI(rowValid, lane0),
                                /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  for (auto &[oi, v] : values) {
    const dsl::DType t = def.operands[oi].dtype;
    for (size_t j = 0; j < v.size(); ++j) {
      Value at = j == 0 ? base[oi]
                        : Value(LLVM::GEPOp::create(
                              b, loc, ptrGlobal, storageType(t), base[oi],
                              ValueRange{cIdx(int64_t(j))}));
      LLVM::StoreOp::create(b, loc, v[j], at, int(dsl::dtypeBytes(t)));
    }
  }
}
