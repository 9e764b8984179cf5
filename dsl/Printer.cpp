//===- dsl/Printer.cpp - Canonical text and content hash -------------------===//
//
// The canonical text is the identity of a program: it lists every operand,
// fold (order and combiner bodies) and operation in a deterministic order,
// constants as exact bit patterns. Numbering follows a post-order walk from
// the outputs in declaration order, so it depends only on the program, never
// on pointer values. Its SHA-256 is the kernel part of the cache key.
//
//===----------------------------------------------------------------------===//

#include "dsl/IR.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

using namespace bitfold::dsl;

llvm::StringRef bitfold::dsl::stageKindName(TreeStage::Kind k) {
  switch (k) {
  case TreeStage::ShuffleDown: return "shfl_down";
  case TreeStage::ButterflyXor: return "bfly_xor";
  case TreeStage::CrossWarp: return "cross_warp";
  }
  return "?";
}

namespace {

/// Prints a DAG of nodes as SSA lines with a deterministic numbering.
class DagPrinter {
public:
  DagPrinter(llvm::raw_ostream &os, llvm::StringRef indent,
             const KernelDef *def, NodeNames *record = nullptr,
             std::string prefix = "")
      : os(os), indent(indent), def(def), record(record),
        prefix(std::move(prefix)) {}

  /// Prints `e` (and what it needs, once) and returns its name.
  std::string print(const Expr &e) {
    if (!e.get())
      return "<empty>";
    return visit(e.get());
  }

  /// Called before a fold value is first printed (main program only).
  std::function<void(int)> onFold;

private:
  std::string visit(const ExprNode *n) {
    auto it = names.find(n);
    if (it != names.end())
      return it->second;
    std::vector<std::string> args;
    if (n->op == Op::FoldValue) {
      if (onFold)
        onFold(n->index);
    } else {
      for (const Expr &a : n->args)
        args.push_back(visit(a.get()));
    }
    std::string name = "%" + std::to_string(next++);
    os << indent << name << " = " << opName(n->op);
    switch (n->op) {
    case Op::Const:
      os << llvm::formatv(" 0x{0:x-8}", n->bits);
      break;
    case Op::Scalar:
      os << " " << (def ? def->scalars[n->index].name : "?");
      break;
    case Op::Dim:
      os << " "
         << (n->index == -1   ? std::string("cols")
             : n->index == -2 ? std::string("rows")
             : def            ? def->dims[n->index]
                              : std::string("?"));
      break;
    case Op::Load:
      os << " " << (def ? def->operands[n->index].name : "?");
      break;
    case Op::Placeholder:
      os << " " << n->index;
      break;
    case Op::FoldValue:
      os << " " << n->index << "."
         << (def ? def->folds[n->index].combiner->resultNames()[n->field]
                 : std::string("?"));
      break;
    case Op::Round:
      os << " to " << dtypeName(n->roundTo);
      break;
    case Op::IConst:
      os << " " << int32_t(n->bits);
      break;
    case Op::Gather:
      os << " " << (def ? def->operands[n->index].name : "?") << ",";
      break;
    case Op::Invalid:
      os << " \"" << n->message << "\"";
      break;
    default:
      break;
    }
    for (size_t i = 0; i < args.size(); ++i)
      os << (i ? ", " : " ") << args[i];
    os << " : " << dtypeName(n->type) << "\n";
    names[n] = name;
    if (record)
      record->try_emplace(n, prefix + name);
    return name;
  }

  llvm::raw_ostream &os;
  std::string indent;
  const KernelDef *def;
  llvm::DenseMap<const ExprNode *, std::string> names;
  NodeNames *record;
  std::string prefix;
  int next = 0;
};

void printCombiner(llvm::raw_ostream &os, const Combiner &c,
                   NodeNames *record) {
  os << "  combiner " << c.name() << " (";
  for (size_t i = 0; i < c.numFields(); ++i)
    os << (i ? ", " : "") << c.fieldNames()[i];
  os << ") empty (";
  for (size_t i = 0; i < c.emptyState().size(); ++i)
    os << (i ? ", " : "")
       << llvm::formatv("0x{0:x-8}", std::bit_cast<uint32_t>(c.emptyState()[i]));
  os << ") results (";
  for (size_t i = 0; i < c.resultNames().size(); ++i)
    os << (i ? ", " : "") << c.resultNames()[i];
  os << ")\n";
  auto body = [&](llvm::StringRef fn, const State &s) {
    os << "   " << fn << ":\n";
    DagPrinter p(os, "     ", nullptr, record, c.name() + "." + fn.str() + ".");
    std::vector<std::string> outs;
    for (const Expr &e : s.fields)
      outs.push_back(p.print(e));
    os << "     return";
    for (size_t i = 0; i < outs.size(); ++i)
      os << (i ? ", " : " ") << outs[i];
    os << "\n";
  };
  body("push", c.pushBody());
  body("combine", c.combineBody());
  body("finish", c.finishBody());
}

} // namespace

/// The output lines, each after the nodes its values need.
static void printOutputs(llvm::raw_ostream &os, const KernelDef &def,
                         DagPrinter &body) {
  for (const OperandDecl &o : def.operands) {
    if (!o.isOutput)
      continue;
    std::string v;
    for (const Expr &e : outputValues(o))
      v += (v.empty() ? "" : ", ") + body.print(e);
    os << "  output " << o.name << " : " << dtypeName(o.dtype) << " "
       << layoutName(o.layout);
    // per_row(1) prints as per_row: the [rows] form's text and hash.
    if (o.map == IndexMap::PerRow)
      os << " per_row";
    if (o.map == IndexMap::PerRow && o.rowWidth != 1)
      os << "(" << o.rowWidth << ")";
    if (o.guardAlignElems)
      os << " align " << o.guardAlignElems;
    if (o.aliasOf >= 0 && o.aliasOf < int(def.operands.size()))
      os << " aliases " << def.operands[o.aliasOf].name;
    os << " = " << v << "\n";
  }
}

static void printProgram(llvm::raw_ostream &os, const KernelDef &def,
                         NodeNames *record) {
  os << "bitfold.row_program " << def.name << " v1\n";
  os << "groups " << def.groups << "\n";
  os << llvm::formatv("guard cols % {0} == 0, {1} <= cols <= {2}\n",
                      def.colsMultipleOf, def.minCols, def.maxCols);
  for (const std::string &d : def.dims)
    os << "dim " << d << "\n";
  for (const OperandDecl &o : def.operands) {
    if (o.isOutput)
      continue;
    os << "input " << o.name << " : " << dtypeName(o.dtype) << " "
       << layoutName(o.layout) << " " << indexMapName(o.map);
    if ((o.map == IndexMap::PerBatch || o.map == IndexMap::Vector) &&
        o.batchDim >= 0 &&
        o.batchDim < int(def.dims.size()))
      os << "(" << def.dims[o.batchDim] << ")";
    if (o.guardAlignElems)
      os << " align " << o.guardAlignElems;
    os << "\n";
  }
  // A default is printed only where set, so programs without defaults keep
  // their text and hash.
  for (const ScalarDecl &s : def.scalars) {
    os << "scalar " << s.name << " : " << dtypeName(s.dtype);
    if (s.defaultValue)
      os << llvm::formatv(" default 0x{0:x-8}",
                          std::bit_cast<uint32_t>(*s.defaultValue));
    os << "\n";
  }

  os << "body:\n";
  DagPrinter body(os, "  ", &def, record);
  std::vector<bool> foldPrinted(def.folds.size(), false);
  body.onFold = [&](int index) {
    if (foldPrinted[index])
      return;
    foldPrinted[index] = true;
    const FoldDecl &f = def.folds[index];
    std::string in = body.print(f.input);
    os << "  fold " << index << " of " << in << " order " << f.order.name
       << " threads " << f.order.threads << " vector " << f.order.vector
       << " stages [";
    for (size_t i = 0; i < f.order.stages.size(); ++i)
      os << (i ? ", " : "") << stageKindName(f.order.stages[i].kind) << " "
         << f.order.stages[i].offset;
    os << "]";
    // Printed only when in use, so plain orders keep their text and hash.
    if (!f.order.isPlain() || f.order.hasRowRange() || f.order.stridedAxis()) {
      os << " accumulators " << f.order.accumulators
         << (f.order.accumulatorMap == FoldOrder::AccumulatorMap::VectorElement
                 ? " by-element"
                 : " round-robin")
         << (f.order.alignedVectors ? " aligned" : "") << " ctas "
         << f.order.ctas << " final [";
      for (size_t i = 0; i < f.order.finalStages.size(); ++i)
        os << (i ? ", " : "") << stageKindName(f.order.finalStages[i].kind)
           << " " << f.order.finalStages[i].offset;
      os << "] rows " << f.order.minRows << ".." << f.order.maxRows;
      if (f.order.stridedAxis())
        os << " outvec " << f.order.outputVec;
    }
    os << "\n";
    printCombiner(os, *f.combiner, record);
  };
  printOutputs(os, def, body);
}

std::string bitfold::dsl::printCanonical(const KernelDef &def) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printProgram(os, def, nullptr);
  return text;
}

NodeNames bitfold::dsl::canonicalNodeNames(const KernelDef &def) {
  NodeNames names;
  llvm::raw_null_ostream os;
  printProgram(os, def, &names);
  return names;
}

std::string bitfold::dsl::contentHash(llvm::StringRef text) {
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(
      llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(text.data()),
                              text.size()));
  std::string hex;
  for (uint8_t b : digest)
    hex += llvm::formatv("{0:x-2}", b).str();
  return hex;
}
