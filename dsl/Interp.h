//===- dsl/Interp.h - CPU reference interpreter ------------------*- C++ -*-===//
//
// Evaluates a row program on host buffers with exactly the program's DAG:
// IEEE fp32 round-to-nearest for every op, std::fma for fma, folds in the
// order's lane/serial/tree order, bf16/fp16 rounding by RNE with NaN/Inf
// preserved (NaN stored as the canonical 0x7FFF, as cvt.rn does).
//
// Approximate hardware instructions (rcp.approx.ftz, rsqrt.approx.ftz,
// ex2.approx.ftz) go through ApproxUnit. The default unit is a correctly
// rounded stand-in, NOT the hardware's table: with it, the interpreter's
// bits may differ from the GPU's in the last place of the approximated
// value. dsl/ApproxModels.h's approxForArch("sm_90") gives the unit that is
// bit-exact with the H200.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_INTERP_H
#define BITFOLD_DSL_INTERP_H

#include "dsl/IR.h"

namespace bitfold::dsl {

/// The approximate instructions, behind one interface.
class ApproxUnit {
public:
  virtual ~ApproxUnit();
  virtual float rcpApproxFtz(float x) const = 0;
  virtual float rsqrtApproxFtz(float x) const = 0;
  virtual float ex2ApproxFtz(float x) const = 0;
};

/// Correctly rounded stand-ins (computed in double, subnormal inputs and
/// outputs flushed as the .ftz forms do).
const ApproxUnit &correctlyRoundedApprox();

/// A 2-D host view of one operand: `rows` rows of `cols` packed elements,
/// `rowStride` elements apart (a PerRow output: its k values per row).
/// PerColumn operands have one row; PerBatch
/// operands one row per batch. A channels-first operand (spatial = S > 0)
/// holds N C S elements: row r = (n, s) of pixels, column c at
/// n * rowStride + s + c * S (rowStride = C * S when packed).
struct HostTensor {
  DType dtype = DType::F32;
  void *data = nullptr;
  int64_t rows = 0;
  int64_t rowStride = 0;
  int64_t spatial = 0;
  int64_t offset(int64_t row, int64_t col) const {
    if (spatial > 0)
      return row / spatial * rowStride + row % spatial + col * spatial;
    return row * rowStride + col;
  }
};

/// Everything a launch binds: the shape, one tensor per operand (in the
/// KernelDef's operand order) for each group, the scalars.
struct Binding {
  int64_t cols = 0;
  std::vector<int64_t> groupRows;        ///< rows of each group.
  std::vector<int64_t> dims;             ///< values of KernelDef::dims.
  std::vector<std::vector<HostTensor>> tensors; ///< [group][operand].
  std::vector<float> scalars;
};

/// Runs the program; writes every output element. Errors name the operand
/// and what is wrong with the binding.
llvm::Error interpret(const KernelDef &def, const Binding &binding,
                      const ApproxUnit &approx = correctlyRoundedApprox());

/// The value of one node given its operand values, by the op table's
/// evaluation hook (dsl/Ops.def): the interpreter's own semantics, for
/// host-side evaluation elsewhere. Leaves evaluate to NaN except Const.
float evaluateOp(const ExprNode &n, llvm::ArrayRef<float> args,
                 const ApproxUnit &approx = correctlyRoundedApprox());

/// Every push of row `row` of `cols` columns in the order's element
/// mapping (IR.h, FoldOrder): `visit(lane, accumulator, column)`, in each
/// lane's push order. The interpreter's folds walk it; tests compare
/// codegen's mapping with it.
void forEachPush(const FoldOrder &o, int64_t row, int64_t cols,
                 llvm::function_ref<void(int64_t, int, int64_t)> visit);

// Scalar helpers shared with tests (exact IEEE conversions).
uint16_t floatToBf16Bits(float v);   ///< RNE, NaN -> 0x7FFF.
float bf16BitsToFloat(uint16_t b);
uint16_t floatToHalfBits(float v);   ///< RNE, NaN -> 0x7FFF.
float halfBitsToFloat(uint16_t b);
/// round(dtype, v) as the DSL defines it, returned as f32.
float roundTo(DType t, float v);
/// libdevice's __nv_expf, transcribed, with ex2.approx.ftz from `approx`.
float expLibdevice(float a, const ApproxUnit &approx);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_INTERP_H
