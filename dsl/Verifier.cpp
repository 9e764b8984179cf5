//===- dsl/Verifier.cpp - Reject ill-formed row programs ------------------===//
//
// Every message names the program's own terms: the operand, the fold, the
// dimension, and what was expected versus found.
//
//===----------------------------------------------------------------------===//

#include "dsl/IR.h"
#include "dsl/Limits.h"
#include "dsl/RowOutputs.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <bit>

using namespace bitfold::dsl;

namespace {

/// How a C++ program converts a value of type `from` to the storage type
/// `to` (the text parser checks outputs itself, in text syntax).
std::string storeHint(DType to, DType from) {
  if (from == DType::I1)
    return "a predicate cannot be stored: select(p, a, b) between two "
           "numbers first";
  if (from == DType::I32)
    return "an index value (i32) cannot be stored: itof(i) first";
  if (to == DType::I1)
    return "an output cannot be i1";
  if (to == DType::F32)
    return "write .to_f32() to widen it";
  return llvm::formatv("write round<{0}>(...) to say where it is rounded",
                       dtypeName(to))
      .str();
}

class Verifier {
public:
  Verifier(const KernelDef &def, NodeNamer nodeName)
      : def(def), nodeName(nodeName) {}

  llvm::Error run() {
    checkNames();
    checkOperands();
    checkFolds();
    checkOutputs();
    checkFoldsAreUsed();
    checkStridedAxis();
    if (def.groups < 1)
      report(llvm::formatv("groups must be at least 1, found {0}", def.groups));
    if (def.groups > kMaxTensorGroups)
      report(llvm::formatv("groups must be at most {0} (one launch serves at "
                           "most {0}), found {1}",
                           kMaxTensorGroups, def.groups));
    // Empty also when no multiple lies in [min, max]: the largest multiple
    // of m not above max must reach min (no overflow: max / m * m <= max).
    if (def.colsMultipleOf < 1 || def.minCols < 1 ||
        def.maxCols < def.minCols ||
        def.maxCols / def.colsMultipleOf * def.colsMultipleOf < def.minCols)
      report(llvm::formatv("column guard is empty: cols % {0} == 0 and {1} <= "
                           "cols <= {2} (no column count satisfies it)",
                           def.colsMultipleOf, def.minCols, def.maxCols));
    if (errors.empty())
      return llvm::Error::success();
    std::string all;
    for (const std::string &e : errors)
      all += e + "\n";
    all.pop_back();
    return llvm::createStringError(llvm::inconvertibleErrorCode(), all);
  }

private:
  void report(std::string msg) { errors.push_back(std::move(msg)); }

  /// " (NAME)" for a node the caller can name (the parser: its value name
  /// and line); nothing for programs built in C++.
  std::string at(const ExprNode *n) const {
    return nodeName && n ? " (" + nodeName(*n) + ")" : std::string();
  }

  static bool isIdentifier(llvm::StringRef s) {
    if (s.empty() || !(std::isalpha(s[0]) || s[0] == '_'))
      return false;
    for (char c : s)
      if (!(std::isalnum(c) || c == '_'))
        return false;
    return true;
  }

  void checkNames() {
    if (!isIdentifier(def.name))
      report(llvm::formatv("program name '{0}' is not an identifier",
                           def.name));
    llvm::DenseSet<llvm::StringRef> seen;
    auto unique = [&](llvm::StringRef what, llvm::StringRef n) {
      if (!isIdentifier(n))
        report(llvm::formatv("{0} name '{1}' is not an identifier", what, n));
      else if (!seen.insert(n).second)
        report(llvm::formatv("name '{0}' is declared twice", n));
    };
    for (const std::string &d : def.dims) {
      if (d == "cols" || d == "rows")
        report(llvm::formatv("dim name '{0}' is reserved (the program's own "
                             "{0})",
                             d));
      unique("dim", d);
    }
    for (const OperandDecl &o : def.operands)
      unique(o.isOutput ? "output" : "input", o.name);
    for (const ScalarDecl &s : def.scalars)
      unique("scalar", s.name);
  }

  void checkOperands() {
    const OperandDecl *firstOutput = nullptr;
    for (const OperandDecl &o : def.operands) {
      // The canonical text lists inputs before outputs; operand order is
      // the kernel's argument order, so it must read back the same.
      if (o.isOutput && !firstOutput)
        firstOutput = &o;
      if (!o.isOutput && firstOutput)
        report(llvm::formatv("input '{0}' is declared after output '{1}'; "
                             "declare every input before the outputs",
                             o.name, firstOutput->name));
      if (o.guardAlignElems < 0 ||
          (o.guardAlignElems & (o.guardAlignElems - 1)))
        report(llvm::formatv("{0} '{1}': alignment must be a power of two of "
                             "elements, found {2}",
                             o.isOutput ? "output" : "input", o.name,
                             o.guardAlignElems));
      if (o.dtype == DType::I1)
        report(llvm::formatv("{0} '{1}': dtype {2} cannot be stored; use "
                             "bf16, f16, f32, f8e4m3fn, f8e5m2 or i8",
                             o.isOutput ? "output" : "input", o.name,
                             dtypeName(o.dtype)));
      if (!o.isOutput)
        for (std::string &m : indexMapProblems(def, o, nodeName))
          report(std::move(m));
      const bool hasDim =
          o.map == IndexMap::PerBatch || o.map == IndexMap::Vector;
      if (hasDim && (o.batchDim < 0 || o.batchDim >= int(def.dims.size())))
        report(llvm::formatv("input '{0}': {1} needs the {2} dim (pass "
                             "p.dim(\"S\")), found none",
                             o.name, indexMapName(o.map),
                             o.map == IndexMap::PerBatch ? "rows-per-batch"
                                                         : "length"));
      if (!hasDim && o.batchDim >= 0)
        report(llvm::formatv("input '{0}': a batch dim is given but the index "
                             "map is {1}, not per_batch",
                             o.name, indexMapName(o.map)));
    }
    for (const ScalarDecl &s : def.scalars)
      if (s.dtype != DType::F32)
        report(llvm::formatv("scalar '{0}': scalars are f32, found {1}",
                             s.name, dtypeName(s.dtype)));
  }

  void checkFoldOrder(int index, const FoldOrder &o) {
    std::string where = llvm::formatv("fold {0} (order '{1}')", index, o.name);
    if (o.threads <= 0 || !std::has_single_bit(unsigned(o.threads))) {
      report(llvm::formatv("{0}: threads must be a power of two, found {1}",
                           where, o.threads));
      return;
    }
    if (o.threads > kMaxFoldThreads) {
      report(llvm::formatv("{0}: threads must be at most {1} (the threads of "
                           "one CTA), found {2}",
                           where, kMaxFoldThreads, o.threads));
      return;
    }
    if (o.vector <= 0) {
      report(llvm::formatv("{0}: vector width must be positive, found {1}",
                           where, o.vector));
      return;
    }
    if (o.vector > kMaxFoldVector) {
      report(llvm::formatv("{0}: vector width must be at most {1}, found {2}",
                           where, kMaxFoldVector, o.vector));
      return;
    }
    // Codegen unrolls a lane's pushes; a lane's element count must also
    // stay exact as an f32 (a Welford count).
    int64_t chunk = int64_t(o.threads) * o.vector;
    int64_t perLane =
        (def.maxCols / chunk + (def.maxCols % chunk != 0)) * o.vector;
    if (perLane > kMaxFoldElementsPerLane)
      report(llvm::formatv("{0}: at the column guard's maximum of {1} columns "
                           "a lane pushes {2} elements; at most {3} are "
                           "allowed (lower the guard or use more threads)",
                           where, def.maxCols, perLane,
                           kMaxFoldElementsPerLane));
    if (o.stages.size() > size_t(kMaxFoldStages)) {
      report(llvm::formatv("{0}: {1} tree stages; a tree over at most {2} "
                           "threads has at most {3}",
                           where, o.stages.size(), kMaxFoldThreads,
                           kMaxFoldStages));
      return;
    }
    checkStages(where, "stages", o.stages, o.threads);
    checkOrderExtensions(where, o);
  }

  /// A tree over `threads` lanes: distinct power-of-two offsets that bring
  /// every lane to lane 0.
  void checkStages(const std::string &where, llvm::StringRef what,
                   llvm::ArrayRef<TreeStage> stages, int threads) {
    int covered = 0;
    for (const TreeStage &s : stages) {
      if (s.offset <= 0 || !std::has_single_bit(unsigned(s.offset)) ||
          s.offset >= threads) {
        report(llvm::formatv("{0}: stage offset {1} must be a power of two "
                             "below the {2} threads",
                             where, s.offset, threads));
        continue;
      }
      if (covered & s.offset)
        report(llvm::formatv("{0}: stage offset {1} appears twice", where,
                             s.offset));
      covered |= s.offset;
      if (s.kind != TreeStage::CrossWarp && s.offset >= 32)
        report(llvm::formatv("{0}: a shuffle stage moves data inside a warp "
                             "of 32, found offset {1} (use a cross-warp stage)",
                             where, s.offset));
      if (s.kind == TreeStage::CrossWarp && s.offset % 32 != 0)
        report(llvm::formatv("{0}: a cross-warp stage merges whole warps, "
                             "found offset {1} (not a multiple of 32)",
                             where, s.offset));
    }
    if (covered != threads - 1)
      report(llvm::formatv("{0}: the {1} merge lanes 0..{2} only; every "
                           "one of the {3} threads must reach lane 0 (missing "
                           "offsets: {4:x})",
                           where, what, covered, threads,
                           (threads - 1) & ~covered));
  }

  /// Accumulators, aligned vectors and CTA groups (FoldOrder in IR.h).
  void checkOrderExtensions(const std::string &where, const FoldOrder &o) {
    if (o.accumulators < 1 || o.accumulators > 64)
      report(llvm::formatv("{0}: accumulators per lane must be 1..64, found "
                           "{1}",
                           where, o.accumulators));
    if (o.accumulatorMap == FoldOrder::AccumulatorMap::VectorElement &&
        o.accumulators != o.vector)
      report(llvm::formatv("{0}: one accumulator per vector element needs "
                           "{1} accumulators, found {2}",
                           where, o.vector, o.accumulators));
    if (o.alignedVectors && o.vector > o.threads)
      report(llvm::formatv("{0}: the head and tail of aligned {1}-element "
                           "vectors need at least {1} lanes, found {2}",
                           where, o.vector, o.threads));
    if (o.ctas < 1 || int64_t(o.ctas) * o.threads > (int64_t(1) << 20)) {
      report(llvm::formatv("{0}: {1} groups of {2} lanes: need 1..2^20 lanes",
                           where, o.ctas, o.threads));
      return;
    }
    if (o.minRows < 1 || o.maxRows < o.minRows)
      report(llvm::formatv("{0}: row range {1}..{2} is empty", where,
                           o.minRows, o.maxRows));
    if (o.ctas == 1 && !o.finalStages.empty())
      report(llvm::formatv("{0}: final stages merge the gather of several "
                           "groups; this order has one",
                           where));
    if (o.ctas > 1)
      checkStages(where, "final stages", o.finalStages, o.threads);
  }

  /// A channels-first program (Layout::ChannelsFirst in IR.h): every
  /// per-element operand is channels-first (a row is a pixel for all of
  /// them), its folds run in strided-axis orders of one element per push,
  /// and only such programs use those orders. An elementwise program with
  /// row-major or channels-last outputs may read channels-first inputs.
  void checkStridedAxis() {
    const bool cf = isChannelsFirst(def);
    for (const OperandDecl &o : def.operands) {
      if (o.layout == Layout::ChannelsFirst && o.map != IndexMap::PerElement)
        report(llvm::formatv("operand '{0}': a channels-first operand is "
                             "per_element (per-column and per-batch operands "
                             "are row_major)",
                             o.name));
      if (!cf && o.isOutput && o.layout == Layout::ChannelsFirst)
        report(llvm::formatv("output '{0}' is channels_first in a program "
                             "whose other per-element outputs are not; rows "
                             "must be the same pixels in all of them",
                             o.name));
      if (cf && o.map == IndexMap::PerElement &&
          o.layout != Layout::ChannelsFirst)
        report(llvm::formatv("operand '{0}' is {1} in a program whose other "
                             "per-element operands are channels_first; rows "
                             "must be the same pixels in all of them",
                             o.name, layoutName(o.layout)));
    }
    for (size_t i = 0; i < def.folds.size(); ++i) {
      const FoldOrder &o = def.folds[i].order;
      std::string where = llvm::formatv("fold {0} (order '{1}')", i, o.name);
      if (o.outputVec != 0 && o.outputVec != 1 && o.outputVec != 2 &&
          o.outputVec != 4)
        report(llvm::formatv("{0}: outvec is aten's output_vec_size, 1, 2 or "
                             "4; found {1}",
                             where, o.outputVec));
      if (cf && !o.stridedAxis())
        report(where + ": a channels-first program folds along the strided "
                       "C axis; its order needs an outvec (a strided-axis "
                       "order, e.g. folds::aten_reduce_outer)");
      if (!cf && o.stridedAxis())
        report(where + ": a strided-axis order (outvec) folds a "
                       "channels-first operand; this program has none");
      if (o.stridedAxis() && o.vector != 1)
        report(llvm::formatv("{0}: a strided-axis order pushes one element "
                             "at a time (vector 1), found vector {1}",
                             where, o.vector));
    }
  }

  /// The names a fold prints in the canonical text must read back.
  void checkFoldNames(int index, const FoldDecl &f) {
    if (!isIdentifier(f.order.name))
      report(llvm::formatv("fold {0}: order name '{1}' is not an identifier",
                           index, f.order.name));
    const Combiner &c = *f.combiner;
    if (!isIdentifier(c.name()))
      report(llvm::formatv("fold {0}: combiner name '{1}' is not an "
                           "identifier",
                           index, c.name()));
    for (llvm::ArrayRef<std::string> names : {c.fieldNames(), c.resultNames()}) {
      llvm::DenseSet<llvm::StringRef> seen;
      for (const std::string &n : names)
        if (!isIdentifier(n))
          report(llvm::formatv("fold {0} (combiner '{1}'): field or result "
                               "name '{2}' is not an identifier",
                               index, c.name(), n));
        else if (!seen.insert(n).second)
          report(llvm::formatv("fold {0} (combiner '{1}'): name '{2}' is "
                               "declared twice",
                               index, c.name(), n));
    }
  }

  void checkCombiner(int index, const Combiner &c) {
    std::string where =
        llvm::formatv("fold {0} (combiner '{1}')", index, c.name());
    size_t f = c.numFields();
    if (f == 0)
      report(llvm::formatv("{0}: the state has no fields", where));
    if (c.emptyState().size() != f)
      report(llvm::formatv("{0}: the empty state has {1} values for {2} "
                           "fields",
                           where, c.emptyState().size(), f));
    auto body = [&](llvm::StringRef fn, const State &s, size_t want,
                    int placeholders) {
      if (s.fields.size() != want) {
        report(llvm::formatv("{0}: {1} returns {2} fields, expected {3}", where,
                             fn, s.fields.size(), want));
        return;
      }
      for (size_t i = 0; i < s.fields.size(); ++i)
        checkBody(where + " " + fn.str(), s.fields[i], placeholders);
    };
    body("push", c.pushBody(), f, int(f) + 1);
    body("combine", c.combineBody(), f, int(2 * f));
    body("finish", c.finishBody(), c.resultNames().size(), int(f));
  }

  /// A combiner body may use constants, its own placeholders and pure ops.
  void checkBody(const std::string &where, const Expr &e, int placeholders) {
    llvm::DenseSet<const ExprNode *> seen;
    std::vector<const ExprNode *> stack{e.get()};
    while (!stack.empty()) {
      const ExprNode *n = stack.back();
      stack.pop_back();
      if (!n) {
        report(where + ": a field is an empty Expr");
        continue;
      }
      if (!seen.insert(n).second)
        continue;
      const std::string here = where + at(n);
      switch (n->op) {
      case Op::Invalid:
        report(here + ": " + n->message);
        continue;
      case Op::Load:
      case Op::Scalar:
      case Op::FoldValue:
      case Op::Dim:
      case Op::RowIndex:
      case Op::ColIndex:
      case Op::Gather:
        report(llvm::formatv("{0}: uses {1}; a combiner sees only its state "
                             "and the pushed value",
                             here, opName(n->op)));
        continue;
      case Op::Placeholder:
        if (n->index >= placeholders)
          report(llvm::formatv("{0}: uses an argument of another combiner "
                               "function",
                               here));
        continue;
      default:
        break;
      }
      checkArity(here, n);
      if (n->type != DType::F32 && n->op != Op::Round && !isPredicateOp(n))
        report(llvm::formatv("{0}: state values are f32", here));
      for (const Expr &a : n->args)
        stack.push_back(a.get());
    }
    if (e.get() && e.dtype() != DType::F32)
      report(llvm::formatv("{0}: a state field must be f32, found {1}", where,
                           dtypeName(e.dtype())));
  }

  static bool isPredicateOp(const ExprNode *n) { return n->type == DType::I1; }

  /// Nodes made by hand (ExprNode::make) can have any operand count.
  void checkArity(const std::string &where, const ExprNode *n) {
    int want = opInfo(n->op).arity;
    if (want >= 0 && int(n->args.size()) != want)
      report(llvm::formatv("{0}: {1} takes {2} operand{3}, found {4}", where,
                           opName(n->op), want, want == 1 ? "" : "s",
                           n->args.size()));
  }

  void checkFolds() {
    for (size_t i = 0; i < def.folds.size(); ++i) {
      const FoldDecl &f = def.folds[i];
      checkFoldOrder(int(i), f.order);
      if (!f.combiner)
        continue;
      checkFoldNames(int(i), f);
      checkCombiner(int(i), *f.combiner);
      if (!f.input.get()) {
        report(llvm::formatv("fold {0}: the folded value is an empty Expr", i));
        continue;
      }
      if (f.input.dtype() == DType::I1 || f.input.dtype() == DType::I32)
        report(llvm::formatv("fold {0}: the folded value is {1}; fold "
                             "numbers (itof converts an index value)",
                             i, f.input.dtype() == DType::I1
                                    ? "a predicate (i1)"
                                    : "an index value (i32)"));
      checkValue(llvm::formatv("fold {0} input", i), f.input, int(i));
      if (f.input.get() && !firstElementNode(def, f.input.get()))
        report(llvm::formatv("fold {0}: the folded value does not vary along "
                             "the row (it reads no per-element or per-column "
                             "operand)",
                             i));
    }
  }

  /// A fold no output reaches would be computed but missing from the
  /// canonical text, so two programs would share a hash.
  void checkFoldsAreUsed() {
    std::vector<bool> used(def.folds.size());
    llvm::DenseSet<const ExprNode *> seen;
    std::vector<const ExprNode *> stack;
    for (const OperandDecl &o : def.operands)
      if (o.isOutput)
        for (const Expr &v : outputValues(o))
          stack.push_back(v.get());
    // A fold value's argument is its fold's input, so the walk reaches the
    // folds that fold inputs use.
    while (!stack.empty()) {
      const ExprNode *n = stack.back();
      stack.pop_back();
      if (!n || !seen.insert(n).second)
        continue;
      if (n->op == Op::FoldValue && n->index >= 0 &&
          size_t(n->index) < used.size())
        used[n->index] = true;
      for (const Expr &a : n->args)
        stack.push_back(a.get());
    }
    for (size_t i = 0; i < used.size(); ++i)
      if (!used[i])
        report(llvm::formatv("fold {0}: its results are never used", i));
  }

  void checkOutputs() {
    if (def.numOutputs() == 0)
      report("the program writes no output");
    for (std::string &m : aliasProblems(def))
      report(std::move(m));
    for (const OperandDecl &o : def.operands) {
      if (!o.isOutput)
        continue;
      std::string where = llvm::formatv("output '{0}'", o.name).str();
      if (!checkRowWidth(where, o))
        continue;
      for (const Expr &v : outputValues(o)) {
        if (!v.get()) {
          report(where + ": no value assigned");
          continue;
        }
        checkValue(where, v, int(def.folds.size()));
        if (v->op != Op::Invalid && v.dtype() != o.dtype)
          report(llvm::formatv("{0} is {1} but its value is {2}; {3}", where,
                               dtypeName(o.dtype), dtypeName(v.dtype()),
                               storeHint(o.dtype, v.dtype())));
      }
      for (std::string &m : indexMapProblems(def, o, nodeName))
        report(std::move(m));
    }
  }

  /// per_row(k): k >= 1 values, k only on per-row outputs.
  bool checkRowWidth(const std::string &where, const OperandDecl &o) {
    if (o.rowWidth < 1 || o.rowWidth > kMaxRowWidth) {
      report(llvm::formatv("{0}: per_row({1}): k values per row need k in "
                           "1..{2}",
                           where, o.rowWidth, kMaxRowWidth));
      return false;
    }
    if (o.rowWidth > 1 && o.map != IndexMap::PerRow) {
      report(where + ": k values per row need a per_row output");
      return false;
    }
    if (size_t(o.rowWidth) != 1 + o.moreValues.size()) {
      report(llvm::formatv("{0}: per_row({1}) needs {1} values, found {2}",
                           where, o.rowWidth, 1 + o.moreValues.size()));
      return false;
    }
    return true;
  }

  /// Main-program expressions: every leaf must belong to this program, and
  /// only folds before `foldLimit` may be used (a fold's input can use only
  /// the folds computed before it).
  void checkValue(const std::string &where, const Expr &e, int foldLimit) {
    llvm::DenseSet<const ExprNode *> seen;
    std::vector<const ExprNode *> stack{e.get()};
    while (!stack.empty()) {
      const ExprNode *n = stack.back();
      stack.pop_back();
      if (!n || !seen.insert(n).second)
        continue;
      const std::string here = where + at(n);
      if ((n->op == Op::Load || n->op == Op::Scalar ||
           n->op == Op::FoldValue || n->op == Op::Gather) &&
          n->program != def.programId) {
        report(llvm::formatv("{0}: uses a {1} of another row program", here,
                             opName(n->op)));
        continue;
      }
      checkArity(here, n);
      switch (n->op) {
      case Op::Invalid:
        report(here + ": " + n->message);
        continue;
      case Op::Placeholder:
        report(here + ": uses a combiner argument outside its combiner");
        continue;
      case Op::Load: {
        if (n->index < 0 || n->index >= int(def.operands.size()) ||
            def.operands[n->index].isOutput ||
            def.operands[n->index].dtype != n->type) {
          report(here + ": reads an operand that is not an input of this "
                         "program");
        } else if (def.operands[n->index].map == IndexMap::Vector) {
          report(llvm::formatv("{0}: loads '{1}', a vector input: read it "
                               "with gather at an index",
                               here, def.operands[n->index].name));
        }
        continue;
      }
      case Op::Scalar:
        if (n->index < 0 || n->index >= int(def.scalars.size()))
          report(here + ": uses a scalar not declared in this program");
        continue;
      case Op::Gather:
        checkGather(here, n);
        break;
      case Op::IDiv:
      case Op::IRem:
        if (n->args.size() == 2 && n->args[1].get() &&
            n->args[1]->op == Op::IConst && n->args[1]->bits == 0)
          report(llvm::formatv("{0}: {1} by the constant 0", here,
                               opName(n->op)));
        break;
      case Op::Dim:
        if (n->index < -2 || n->index >= int(def.dims.size()))
          report(here + ": uses a dim not declared in this program");
        continue;
      case Op::FoldValue: {
        if (n->index < 0 || n->index >= int(def.folds.size())) {
          report(here + ": uses a fold of another program");
          continue;
        }
        if (n->index >= foldLimit)
          report(llvm::formatv("{0}: uses fold {1}, which is not computed "
                               "before fold {2}",
                               here, n->index, foldLimit));
        const auto &combiner = def.folds[n->index].combiner;
        size_t results = combiner ? combiner->resultNames().size() : 0;
        if (n->field < 0 || size_t(n->field) >= results)
          report(llvm::formatv("{0}: uses result {1} of fold {2}, which has "
                               "{3} result(s)",
                               here, n->field, n->index, results));
        break;
      }
      default:
        break;
      }
      for (const Expr &a : n->args)
        stack.push_back(a.get());
    }
  }

  /// A gather reads a row-major input of this program.
  void checkGather(const std::string &here, const ExprNode *n) {
    if (n->index < 0 || n->index >= int(def.operands.size()) ||
        def.operands[n->index].isOutput) {
      report(here + ": gathers from an operand that is not an input of this "
                    "program");
      return;
    }
    const OperandDecl &o = def.operands[n->index];
    if (o.layout != Layout::RowMajor)
      report(llvm::formatv("{0}: gathers from '{1}', whose layout is {2}; "
                           "gather reads row_major inputs only",
                           here, o.name, layoutName(o.layout)));
    if (o.map == IndexMap::PerRow)
      report(llvm::formatv("{0}: gathers from '{1}', a per_row input (one "
                           "value per row: load it)",
                           here, o.name));
  }

  const KernelDef &def;
  NodeNamer nodeName;
  std::vector<std::string> errors;
};

} // namespace

llvm::Error bitfold::dsl::checkColumnGuard(const KernelDef &def,
                                           int64_t cols) {
  if (cols >= def.minCols && cols <= def.maxCols &&
      cols % def.colsMultipleOf == 0)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("'{0}' needs cols % {1} == 0 and {2} <= cols <= {3}; the "
                    "shape has {4} columns",
                    def.name, def.colsMultipleOf, def.minCols, def.maxCols,
                    cols));
}

llvm::Error bitfold::dsl::verify(const KernelDef &def, NodeNamer nodeName) {
  return Verifier(def, nodeName).run();
}
