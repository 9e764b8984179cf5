//===- codegen/KernelBuilder.h - The MLIR kernel builder (private) -*- C++ -*-===//
//
// One kernel per (program, shape, config), built by one KernelBuilder whose
// parts live in files of their own:
//   LowerToMLIR.cpp   the kernel: signature, row set-up, phases, values
//   EmitOps.cpp       one table entry per dsl::Op: the op's exact lowering
//   VectorAccess.cpp  which columns a thread touches; loads and stores
//   EmitFold.cpp      a fold: pushes, tree stages, broadcast, finish
//   EmitOutputs.cpp   output scheduling: grouped loads, then stores
//   EmitStridedAxis.cpp  rolled channels-first phases (loops over C)
//   EmitRolledRows.cpp   rolled two-pass rows (loops over a row's chunks)
// Everything else is unrolled at build time (the column count is baked in).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_CODEGEN_KERNELBUILDER_H
#define BITFOLD_CODEGEN_KERNELBUILDER_H

#include "codegen/Lowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

#include <bit>
#include <map>
#include <set>

namespace bitfold::codegen {

/// One memory access of a phase: `width` contiguous elements at column `col`
/// (already clamped to 0 where out of range) of the current row.
struct Access {
  int id = 0;
  int width = 1;
  mlir::Value col;     ///< index type, clamped; null: never in range.
  mlir::Value inRange; ///< i1, or null when statically in range.
  /// With inRange: the column before clamping (a shared row's staging
  /// store goes there, under inRange, so its address keeps the thread's
  /// constant offsets).
  mlir::Value unclamped;
  /// A gathered access (channels-first outputs, gatherOutputs): element e
  /// is the one element of parts[e], whose columns need not be adjacent.
  /// Loads, column indices and stores stay the parts'; the elementwise
  /// chain runs over the whole group, so an exact rewrite branches once
  /// per group and roundings pair up, as in a vector access.
  std::vector<Access> parts;
  /// With o pixels per thread a group interleaves them: element e is pixel
  /// (copy) e % pixels of parts[e / pixels], so a channel's pixels are
  /// adjacent elements (their roundings pair, as their store wants them).
  int pixels = 1;
  /// Where >= 0: the column is the thread's lane p plus this constant (a
  /// one-element access of an unrolled phase): a column table's slot.
  int64_t laneOffset = -1;
  /// The copy that element e of this access computes in (-1: the current).
  int copyOf(int e) const { return pixels > 1 ? e % pixels : -1; }
};

class KernelBuilder {
public:
  KernelBuilder(mlir::MLIRContext &ctx, const dsl::KernelDef &def,
                const Plan &plan, const LoweringFacts &facts,
                LoweringStats &stats);

  mlir::OwningOpRef<mlir::ModuleOp> build(llvm::StringRef entryName);

private:
  using Value = mlir::Value;
  using ExprNode = dsl::ExprNode;

  // ---- Small builders (at the current location `loc`) ----
  Value cF32(float v) {
    return mlir::arith::ConstantOp::create(b, loc, f32, b.getF32FloatAttr(v));
  }
  Value cF32Bits(uint32_t bits) { return cF32(std::bit_cast<float>(bits)); }
  Value cInt(mlir::Type t, int64_t v) {
    return mlir::arith::ConstantOp::create(b, loc, t, b.getIntegerAttr(t, v));
  }
  Value cIdx(int64_t v) { return cInt(idx, v); }
  Value cI32(int64_t v) { return cInt(i32, v); }
  Value cI64(int64_t v) { return cInt(i64, v); }
  Value cBool(bool v) {
    return mlir::arith::ConstantOp::create(b, loc, i1, b.getBoolAttr(v));
  }
  Value toIdx(Value v);
  Value intrinsic(llvm::StringRef name, mlir::ValueRange args,
                  mlir::Type result = {});
  Value sel(Value c, Value t, Value f) {
    return mlir::arith::SelectOp::create(b, loc, c, t, f);
  }
  Value cmp(mlir::arith::CmpFPredicate p, Value x, Value y) {
    return mlir::arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value cmpI(mlir::arith::CmpIPredicate p, Value x, Value y) {
    return mlir::arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value andI(Value x, Value y);
  mlir::Type storageType(dsl::DType t);
  void barrier() { mlir::NVVM::Barrier0Op::create(b, loc); }

  // ---- Locations: every op names the DSL node or structure it comes from.
  /// Sets `loc` for a scope: a DSL node's (nodeLoc) or, with `structure`,
  /// the enclosing structure's, which node locations then nest in.
  class AtLoc {
  public:
    AtLoc(KernelBuilder &kb, mlir::Location l, bool structure = false)
        : kb(kb), savedLoc(kb.loc), savedStructure(kb.structure) {
      kb.loc = l;
      if (structure)
        kb.structure = l;
    }
    ~AtLoc() {
      kb.loc = savedLoc;
      kb.structure = savedStructure;
    }

  private:
    KernelBuilder &kb;
    mlir::Location savedLoc, savedStructure;
  };
  /// A structure's location: loc("fold 0").
  mlir::Location structLoc(const llvm::Twine &what);
  /// A node's location inside the current structure: loc("%12"("fold 0")).
  mlir::Location nodeLoc(const ExprNode *n);

  // ---- Ops (EmitOps.cpp) ----
  Value emitOp(const ExprNode *n, llvm::ArrayRef<Value> a);
  Value emitNarrowArith(const NarrowArith &m, dsl::DType t,
                        llvm::function_ref<Value(const ExprNode *)> valueOf);
  /// m's operands as t values (constants converted), and its op on them.
  std::pair<Value, Value>
  narrowOperands(const NarrowArith &m, dsl::DType t,
                 llvm::function_ref<Value(const ExprNode *)> valueOf);
  Value narrowOp(dsl::Op op, Value l, Value r);
  /// bf16: elements e, e+1 of n in one bf16x2 op (narrowArithPair), both
  /// memoised.
  bool pairsNarrowArith(const ExprNode *n) const {
    return n->roundTo == dsl::DType::BF16;
  }
  Value narrowArithPair(const ExprNode *n, const NarrowArith &m,
                        const Access &acc, int e);
  Value emitExtend(Value x);
  /// f32 of a half of a bf16 pair from the pair's word; null where `x` is
  /// not one.
  Value widenPairHalf(Value x);
  /// The bf16 pair (vector<2xbf16>) whose half `half` widenPairHalf
  /// widened to `x`; null where `x` is not such a half.
  Value widenedPair(Value x, int &half);
  Value emitRound(const ExprNode *n, Value x);
  // ---- One-byte storage dtypes (EmitByteTypes.cpp): dsl/Float8.h's
  // conversions; an i8 Value holds float8 bits or an int8.
  Value extendByte(dsl::DType t, Value x);
  Value roundByte(dsl::DType t, Value v);
  Value roundToI8(Value v);
  Value emitFma(const ExprNode *n, llvm::ArrayRef<Value> a);
  /// A row division's quotients for every element of `acc`; where
  /// `rounded` (matchRoundedRowDivision), RN(x y) where fast.
  std::vector<Value>
  emitRowDivision(const ExprNode *n, const Access &acc,
                  RoundedDivision rounded = RoundedDivision::No);
  /// |v| in the row division's fast range [2^-60, max] (max: 2^60, or
  /// kRowBoundMax for a divisor that bounds its row).
  Value rowDivInRange(Value v, float max);
  struct RowDivisors {
    std::vector<Value> d, y; ///< per pixel: divisor, RN(1/d)
    Value fast;              ///< every divisor in its fast range
  };
  RowDivisors rowDivisors(const ExprNode *n, const Access &acc);
  /// div.rn of every element, x e by ds[e % ds.size()].
  std::vector<Value> rowDivisionSlow(llvm::ArrayRef<Value> xs,
                                     llvm::ArrayRef<Value> ds);
  /// round_t (n's) of the values `y`, paired where two are adjacent.
  std::vector<Value> roundElements(const ExprNode *n,
                                   llvm::ArrayRef<Value> y);
  /// The bf16/f16 values of a rewritten round_t(silu(x)) for every element
  /// of `acc` (ExactRewrites.h, matchFastSilu).
  std::vector<Value> emitFastSilu(const ExprNode *n, const Access &acc);
  /// silu's exact chain `chain` (its div_rn node) on one element's x.
  Value exactSilu(const ExprNode *chain, const ExprNode *xNode, Value x);
  /// farFromMidpoint (ExactRewrites.h) of f32 value v's bits, as an i1.
  Value farFromMidpointTest(Value v, int dropped, uint32_t k);
  /// Whether the fast SiLU value s of x is taken (fastSiluAccepts);
  /// `geMin`, where given, is x >= kFastSiluMinX already tested.
  Value fastSiluTest(dsl::DType t, Value x, Value s, Value geMin = Value());
  /// Per element of `xs`, x >= kFastSiluMinX as one setp.ge.bf16x2 per
  /// pair where two adjacent xs are the halves of one bf16 pair (sm_90+),
  /// null elsewhere.
  std::vector<Value> pairedSiluMinTests(llvm::ArrayRef<Value> xs);
  /// `body` on every element's values (lists[j][i], j over the lists):
  /// a loop over the elements with one copy of `body` where
  /// rewrites.fallbackLoops, else one copy per element.
  std::vector<Value>
  fallback(llvm::ArrayRef<std::vector<Value>> lists,
           llvm::function_ref<Value(llvm::ArrayRef<Value>)> body);
  Value cvtRnPair(dsl::DType t, Value hi, Value lo);
  Value minMax(dsl::Op op, Value x, Value y);
  Value expLibdevice(Value x);
  Value libdeviceCall(llvm::StringRef fn, Value x);
  Value saturate(Value x);
  Value subFtz(Value x, Value y);
  // ---- Index values (EmitIndexOps.cpp): i32 arithmetic with the
  // interpreter's defined division by 0 and overflow; gathers.
  Value colIndex(const Access &acc, int e);
  Value intDivRem(bool rem, Value x, Value y);
  Value emitGather(const ExprNode *n, Value col);
  struct OpLowering;
  static const OpLowering opTable[];

  // ---- Values (LowerToMLIR.cpp) ----
  bool isElem(const ExprNode *n);
  Value rowValue(const ExprNode *n);
  Value rowLeaf(const ExprNode *n);
  Value elemValue(const ExprNode *n, const Access &acc, int e);
  /// Plan::packedRow's output phase: bf16 loads widened again.
  bool isKeptBf16Extend(const ExprNode *n) const;
  void startRewidening();
  Value rewidenBf16(Value h);
  Value roundPair(const ExprNode *n, const Access &acc, int e);
  const NarrowArith *narrowArith(const ExprNode *n) const {
    auto it = rewrites.narrow.find(n);
    return it == rewrites.narrow.end() ? nullptr : &it->second;
  }
  std::vector<Value> evalBody(const dsl::State &body,
                              llvm::ArrayRef<Value> args);

  // ---- Accesses (VectorAccess.cpp) ----
  /// Fold `fp`'s accesses of vectors m in [mBegin, mEnd) (all: the
  /// unrolled plan), ids from 0; `shift` (index, <= maxShift) is added to
  /// every column (a rolled loop's position).
  std::vector<Access> foldAccesses(const FoldPlan &fp, int64_t mBegin,
                                   int64_t mEnd, Value shift = Value(),
                                   int64_t maxShift = 0);
  /// The output mapping's chunks j in [jBegin, jEnd), ids from 0; `shift`
  /// as above.
  std::vector<Access> outputAccesses(int64_t jBegin, int64_t jEnd,
                                     Value shift = Value(),
                                     int64_t maxShift = 0);
  /// An access at `col` (at most maxCol); in range where col + reach < D.
  Access makeAccess(int id, int width, Value col, int64_t maxCol,
                    bool threadsIdle, Value threadActive, int64_t reach = 0);
  /// The row's head for aligned V-element vectors (FoldPlan::headTail).
  Value rowHead(int V);
  std::vector<Value> &loadAccess(int operand, const Access &acc);
  /// A piece's words from `addr`; also stored at `stageAt` where not null
  /// (a shared row's copy).
  void loadBf16Words(Value addr, int piece, std::vector<Value> &out,
                     Value stageAt = Value(), Value when = Value());
  /// One load of `t` (`bytes` aligned) from `addr`, also stored at
  /// `stageAt` where not null (only where `when`, if not null).
  Value loadStaged(mlir::Type t, Value addr, int bytes, Value stageAt,
                   Value when = Value());
  void storeAccess(int operand, const Access &acc, llvm::ArrayRef<Value> v);
  /// Elements one load or store of `operand` moves: at most 16 bytes.
  int pieceElems(int operand, const Access &acc) const {
    if (def.operands[operand].layout == dsl::Layout::ChannelsFirst)
      return 1; // columns S apart (o pixels at once: pixelVectors)
    return std::min(acc.width,
                    16 / int(dsl::dtypeBytes(def.operands[operand].dtype)));
  }
  /// Address of element `start` of `acc` in `operand`'s row.
  Value pieceAddr(int operand, const Access &acc, int start);
  /// A shared row (TileConfig::sharedRow): the fold phase stores what it
  /// loads of the staged operands to shared memory (Store), the output
  /// phase loads them back from there (Load), each thread its own columns.
  enum class RowStage { None, Store, Load };
  RowStage rowStage = RowStage::None;
  std::set<int> stagedOperands;
  /// Address of element `start` of `acc` in `operand`'s shared row copy
  /// (one array of rowsPerCta rows per staged operand); `unclamped`: at
  /// the access's column before clamping.
  Value sharedRowAddr(int operand, const Access &acc, int start,
                      bool unclamped = false);
  /// columnTableOperands (Plan.h): each table filled from global memory,
  /// every thread a share of the columns, before the folds.
  void stageColumnTables();
  /// The shared address of `acc`'s column in `operand`'s table, or null
  /// where the access has no slot there (not one element at p + P * j).
  Value columnTableAddr(int operand, const Access &acc);
  std::set<int> columnTables;
  /// The folds' barrier is behind: the output phase may read the tables.
  bool columnTablesReady = false;
  /// Channels-first, o > 1 pixels per thread: `operand` is an image whose
  /// loads and stores move the o pixels of a column at once (element e of
  /// an access, pixel q at e * o + q of its loaded values).
  bool pixelVectors(int operand) const {
    return plan.config.pixelsPerThread > 1 &&
           def.operands[operand].layout == dsl::Layout::ChannelsFirst;
  }

  // ---- Folds (EmitFold.cpp) ----
  using LaneStates = std::vector<std::vector<Value>>; ///< [register lane][field]
  void emitFold(size_t f, const std::vector<Access> &accs);
  void emitPushes(size_t f, const std::vector<Access> &accs, LaneStates &st);
  /// Lane (lo, .)'s m-th vector into its accumulators `acc`; `chunk(j)` is
  /// the access of the vector's chunk that holds its j-th access width.
  void pushVector(size_t f, LaneStates &acc, int lo, int64_t m,
                  llvm::function_ref<const Access &(int)> chunk);
  /// One push of `x` into state `s`, kept only where `in` (null: always).
  void pushElement(size_t f, std::vector<Value> &s, Value x, Value in);
  /// A head/tail fold: register lane (0, hi)'s head (`head`) or tail push
  /// into its state 0, where the lane has one in this row.
  void pushRowEdge(size_t f, std::vector<Value> &s, int hi, bool head);
  /// A lane's accumulators merged serially into acc[0] (aten's order).
  void mergeAccumulators(size_t f, LaneStates &acc);
  /// After the pushes (one state per register lane): the tree stages, the
  /// broadcast of lane 0 and finish.
  void emitFoldTree(size_t f, LaneStates &st);
  /// lanesAcrossWarps: one exchange of every lane, then the whole tree in
  /// each thread, in two halves so that o pixels share one barrier: the
  /// thread's lanes into shared memory (`exchange` created if null), and,
  /// after the barrier, the whole tree and finish.
  void storeGatheredLanes(size_t f, LaneStates &st, Value &exchange);
  void runGatheredTree(size_t f, Value exchange);
  /// Lane 0's state after the gathered tree (the virtual lanes merged).
  std::vector<Value> gatheredTreeState(size_t f, Value exchange);
  /// Split accumulators: each pixel's tree in one thread of it, then shared.
  void runOwnedTrees(size_t f, Value exchange);
  Value gatherSlot(size_t f, Value exchange, Value thread, int L, int field);
  void emitStage(size_t f, size_t si, LaneStates &st, Value exchange);
  void emitSharedStage(size_t f, const StagePlan &sp, LaneStates &st,
                       Value exchange);
  std::vector<Value> broadcastLane0(size_t f, const LaneStates &st);
  void substituteConstants(size_t f, size_t point, LaneStates &st);
  void combineInto(const dsl::Combiner &cb, std::vector<Value> &self,
                   const std::vector<Value> &other, Value cond);
  Value sharedArray(llvm::StringRef name, int64_t floats);
  Value sharedAddr(Value buf, Value index);

  // ---- Outputs (EmitOutputs.cpp) ----
  /// `rowOutputs`: also the per-row outputs (false inside a loop body).
  void emitOutputs(const std::vector<Access> &accs, bool rowOutputs = true);
  /// Channels-first one-element accesses gathered kGatherWidth at a time
  /// (Access::parts); other accesses as they are.
  std::vector<Access> gatherOutputs(const std::vector<Access> &accs);
  void storeGuarded(const Access &acc,
                    llvm::ArrayRef<std::pair<int, std::vector<Value>>> values);
  /// Per-row outputs: one store per row, by lane 0, after the folds.
  void emitRowOutputs();

  // ---- Rolled channels-first phases (EmitStridedAxis.cpp) ----
  /// Memos around a loop body: what the body builds stays in it.
  class LoopScope {
  public:
    explicit LoopScope(KernelBuilder &kb);
    ~LoopScope();

  private:
    KernelBuilder &kb;
    llvm::DenseMap<const ExprNode *, Value> rowMemo;
    llvm::DenseMap<const ExprNode *, std::pair<Value, Value>> rowReciprocals;
    std::map<std::pair<const ExprNode *, int64_t>, Value> elemValues;
    std::map<std::pair<int, int>, std::vector<Value>> loads;
  };
  /// A loop of `trips` >= 1 iterations, induction variable 0, step, ...
  /// (index type), carrying `init`; `body` returns the next carried values.
  /// The loop's results: the last carried values.
  std::vector<Value>
  rolledLoop(int64_t trips, int64_t step, const std::vector<Value> &init,
             llvm::function_ref<std::vector<Value>(Value, mlir::ValueRange)>
                 body);
  void pushColumn(size_t f, std::vector<Value> &state, int id, Value col);
  void emitRolledFold(size_t f);
  void emitRolledOutputs();

  // ---- Rolled rows, two passes (EmitRolledRows.cpp) ----
  /// Fold f: loads and pushes of vectors m < loopReps in a loop carrying
  /// every accumulator of the thread's lanes, the rest unrolled; the tree.
  void emitRolledRowFold(size_t f);
  /// The output chunks j < outLoopChunks in a loop, the rest unrolled,
  /// then the per-row outputs.
  void emitRolledRowOutputs();
  /// Builds the per-row values that `root`'s per-element cone uses, before
  /// a loop whose body uses them.
  void hoistRowValues(const ExprNode *root);

  // ---- Kernel structure (LowerToMLIR.cpp) ----
  mlir::LLVM::LLVMFuncOp declareKernel(llvm::StringRef entryName);
  void emitGridDependencyControl();
  void setupRow(mlir::LLVM::LLVMFuncOp fn);
  /// Sets tid, laneInRow, rowInCta, pIdx; the thread's first row (i64).
  Value threadFirstRow();
  Value rowBase(const dsl::OperandDecl &o, keys::RowLevels lv, Value ptr,
                Value stride, Value local);
  /// Row r of two-level rows: (r / inner) * outer() + (r % inner) * step
  /// (step null: 1); `outer` is built after the division.
  Value twoLevelOffset(Value r, Value inner, llvm::function_ref<Value()> outer,
                       Value step);
  void newPhase();

  // ---- Pixels of a thread (channels-first, TileConfig::pixelsPerThread)
  /// The per-pixel state of pixel (copy) q of the thread: what depends on
  /// the row. The value functions read the current copy's state from the
  /// members below; selectCopy swaps it. Loads are shared: one vector
  /// access holds every copy's element (pixelVectors).
  struct CopyState {
    llvm::DenseMap<const ExprNode *, Value> rowMemo;
    llvm::DenseMap<const ExprNode *, std::pair<Value, Value>> rowReciprocals;
    std::map<std::pair<const ExprNode *, int64_t>, Value> elemValues;
    std::vector<std::vector<Value>> foldResults;
    Value rowInGroup, slotRow;
  };
  int copies() const { return plan.config.pixelsPerThread; }
  void selectCopy(int q);
  /// `f` in copy q's state (q < 0: the current copy's), then back.
  Value inCopy(int q, llvm::function_ref<Value()> f);
  void swapCopyState(CopyState &s);

  mlir::MLIRContext &ctx;
  mlir::OpBuilder b;
  mlir::Location loc, structure;
  const dsl::KernelDef &def;
  const Plan &plan;
  const Rewrites &rewrites;
  llvm::ArrayRef<FoldFacts> facts;
  LoweringStats &stats;
  dsl::NodeNames names;
  mlir::ModuleOp module;
  mlir::Type f32, i1, i32, i64, idx, ptrGen, ptrGlobal, ptrShared;

  // Row set-up.
  Value tid, laneInRow /*i32*/, rowInCta /*i32*/, pIdx /*idx*/, rowValid;
  /// The row's slot in per-row shared memory (i32): rowInCta, or with o
  /// pixels per thread copy q's q * (threads' rows) + rowInCta.
  Value slotRow;
  int copy = 0;                  ///< the current pixel of the thread.
  std::vector<CopyState> otherCopies; ///< the copies not selected.

  Value groupRowsF;              ///< rows of the row's group (i64).
  Value rowInGroup;              ///< the row within its group (i64).
  std::vector<Value> base;       ///< per operand: ptr<1> to its row start.
  /// Per operand: a per-row input's value, loaded once in the row set-up
  /// (so it dominates every use); null for other operands.
  std::vector<Value> rowInputs;
  /// Per operand: the column stride S of a channels-first operand (index
  /// type), null for operands whose columns are packed.
  std::vector<Value> colStride;
  /// rowBase's last channels-first S (the row-stride argument), pixel and
  /// the offset it built: operands with one S reuse it.
  Value spatialStride, spatialLocal, spatialOffset;
  std::vector<Value> dimValues;  ///< i64.
  std::vector<Value> scalarValues;
  std::vector<std::vector<Value>> foldResults;

  llvm::DenseMap<const ExprNode *, bool> elemMemo;
  llvm::DenseMap<const ExprNode *, Value> rowMemo;
  /// Per-row divisor of a row division -> {RN(1/d), d in the fast range}.
  llvm::DenseMap<const ExprNode *, std::pair<Value, Value>> rowReciprocals;
  std::map<std::pair<const ExprNode *, int64_t>, Value> elemValues;
  std::map<std::pair<int, int>, std::vector<Value>> loads;
  /// Loaded bf16 values -> their exact f32 widening from the loaded word.
  llvm::DenseMap<Value, Value> widened;
  bool rewidening = false; ///< startRewidening() ran.
};

} // namespace bitfold::codegen

#endif // BITFOLD_CODEGEN_KERNELBUILDER_H
