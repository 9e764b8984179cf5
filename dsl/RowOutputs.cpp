//===- dsl/RowOutputs.cpp - Per-row outputs: what makes one legal ---------===//

#include "dsl/RowOutputs.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace bitfold::dsl;

const ExprNode *bitfold::dsl::firstElementNode(const KernelDef &def,
                                               const ExprNode *root) {
  llvm::DenseSet<const ExprNode *> seen;
  std::vector<const ExprNode *> stack{root};
  while (!stack.empty()) {
    const ExprNode *n = stack.back();
    stack.pop_back();
    // A fold result is per row whatever the fold reads.
    if (!n || !seen.insert(n).second || n->op == Op::FoldValue)
      continue;
    // A load (but a per-row input's) and the column index vary along the
    // row; a gather does when its column does (its arguments are walked).
    if (variesAlongRow(def, *n))
      return n;
    for (const Expr &a : n->args)
      stack.push_back(a.get());
  }
  return nullptr;
}

std::vector<std::string> bitfold::dsl::aliasProblems(const KernelDef &def) {
  std::vector<std::string> out;
  std::vector<int> owner(def.operands.size(), -1);
  for (size_t i = 0; i < def.operands.size(); ++i) {
    const OperandDecl &o = def.operands[i];
    if (o.aliasOf < 0)
      continue;
    if (!o.isOutput || o.aliasOf >= int(def.operands.size()) ||
        def.operands[o.aliasOf].isOutput) {
      out.push_back(llvm::formatv("'{0}': only an output may alias, and only "
                                  "an input",
                                  o.name));
      continue;
    }
    const OperandDecl &in = def.operands[o.aliasOf];
    if (o.map != IndexMap::PerElement || in.map != IndexMap::PerElement)
      out.push_back(llvm::formatv(
          "output '{0}' aliases '{1}': in place needs a per_element output "
          "over a per_element input (each element is overwritten by the "
          "thread that reads it), found {2} over {3}",
          o.name, in.name, indexMapName(o.map), indexMapName(in.map)));
    if (o.dtype != in.dtype || o.layout != in.layout)
      out.push_back(llvm::formatv(
          "output '{0}' aliases '{1}': in place needs the input's dtype and "
          "layout ({2} {3}), found {4} {5}",
          o.name, in.name, dtypeName(in.dtype), layoutName(in.layout),
          dtypeName(o.dtype), layoutName(o.layout)));
    if (owner[o.aliasOf] >= 0)
      out.push_back(llvm::formatv("outputs '{0}' and '{1}' both alias '{2}'",
                                  def.operands[owner[o.aliasOf]].name, o.name,
                                  in.name));
    owner[o.aliasOf] = int(i);
  }
  return out;
}

/// A per-row operand is a vector of one value per row: row_major, no align.
static void perRowLayoutProblems(const OperandDecl &o,
                                 std::vector<std::string> &out) {
  const char *kind = o.isOutput ? "output" : "input";
  if (o.layout != Layout::RowMajor)
    out.push_back(llvm::formatv("{0} '{1}': a per_row {0} is row_major (a "
                                "vector of one value per row), found {2}",
                                kind, o.name, layoutName(o.layout)));
  if (o.guardAlignElems)
    out.push_back(llvm::formatv("{0} '{1}': a per_row {0} takes no align "
                                "guard",
                                kind, o.name));
}

/// A per-row input: one value per row, read by every thread of the row.
static void perRowInputProblems(const OperandDecl &o,
                                std::vector<std::string> &out) {
  if (o.dtype == DType::I32 && o.map != IndexMap::PerRow)
    out.push_back(llvm::formatv("input '{0}': an i32 input is per_row (one "
                                "index per row, e.g. a target class), found "
                                "{1}",
                                o.name, indexMapName(o.map)));
  if (o.map == IndexMap::PerRow)
    perRowLayoutProblems(o, out);
  if (o.map == IndexMap::Vector &&
      (o.layout != Layout::RowMajor || o.guardAlignElems))
    out.push_back(llvm::formatv("input '{0}': a vector input is row_major "
                                "without align (D packed values)",
                                o.name));
}

std::vector<std::string> bitfold::dsl::indexMapProblems(const KernelDef &def,
                                                        const OperandDecl &o,
                                                        NodeNamer nodeName) {
  std::vector<std::string> out;
  if (!o.isOutput) {
    perRowInputProblems(o, out);
    return out;
  }
  if (o.dtype == DType::I32)
    out.push_back(llvm::formatv("output '{0}': i32 is stored only by a "
                                "per_row input; use i8, f8e4m3fn, f8e5m2, "
                                "bf16, f16 or f32",
                                o.name));
  if (o.map != IndexMap::PerElement && o.map != IndexMap::PerRow) {
    out.push_back(llvm::formatv("output '{0}': an output is written per "
                                "element or per_row, found {1}",
                                o.name, indexMapName(o.map)));
    return out;
  }
  if (o.map != IndexMap::PerRow)
    return out;
  perRowLayoutProblems(o, out);
  for (const Expr &v : outputValues(o))
    if (const ExprNode *n = firstElementNode(def, v.get())) {
      std::string where = nodeName ? " (" + nodeName(*n) + ")" : "";
      out.push_back(llvm::formatv(
          "output '{0}' is per_row but its value reads an element of the "
          "row outside a fold{1}; a per-row value is built from fold_value, "
          "scalar, dim, const and per_row inputs",
          o.name, where));
    }
  return out;
}
