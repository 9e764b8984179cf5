//===- tests/reference/Reference.h - Scalar reference transcriptions -*- C++
//-*-===//
//
// Straightforward scalar transcriptions of the reference algorithms of
// docs/numerics.md, written from that document alone: plain C++ float arithmetic
// in the stated op order, std::fma exactly where the reference has an fma,
// compiled with -ffp-contract=off. Nothing here uses the DSL or the
// interpreter, with two deliberate exceptions: the approximate hardware
// instructions (rcp/rsqrt/ex2.approx.ftz) come from the same dsl::ApproxUnit
// the interpreter uses, and libdevice's expf is dsl::expLibdevice (itself a
// transcription of __nv_expf). Rounding to bf16/f16 is implemented here,
// independently of the interpreter's helpers.
//
// Every function reads and writes raw storage through Matrix views, so the
// tests can hand the same input bytes to the interpreter and compare the
// output bytes bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_REFERENCE_REFERENCE_H
#define BITFOLD_TESTS_REFERENCE_REFERENCE_H

#include "dsl/Interp.h"

#include <cstdint>

namespace bitfold::reference {

using dsl::ApproxUnit;

/// Storage types of the reference tensors (deliberately not dsl::DType).
enum class Storage { F32, BF16, F16 };

/// f32 -> bf16 bits, round to nearest even; any NaN -> 0x7FFF.
uint16_t encodeBf16(float v);
/// f32 -> IEEE binary16 bits, round to nearest even (subnormals and
/// overflow to Inf included); any NaN -> 0x7FFF.
uint16_t encodeF16(float v);
float decodeBf16(uint16_t bits);
float decodeF16(uint16_t bits);

/// Raw storage bits of `v` in `type` (f32: the bits unchanged).
uint32_t encode(Storage type, float v);
float decode(Storage type, uint32_t bits);
/// rnd(v) of docs/numerics.md: round to `type` and widen back (f32: v).
float rnd(Storage type, float v);

/// A 2-D strided view of raw storage: `rows` rows of `cols` packed
/// elements, `rowStride` elements apart.
struct Matrix {
  Storage type = Storage::F32;
  void *data = nullptr;
  int64_t rows = 0, cols = 0, rowStride = 0;

  float load(int64_t r, int64_t c) const;
  /// Stores `v` rounded to the storage type.
  void store(int64_t r, int64_t c, float v) const;
};

// ---- Shared primitives (docs/numerics.md, "Shared primitives") -----------------

/// nvcc's 1.f/x: r = rcp.approx(x); e = fma(x, r, -1); e = -0 - e (ftz);
/// r + r*e by fma.
float rcpNvcc(float x, const ApproxUnit &approx);
/// CUDA rsqrtf with its subnormal rescale.
float rsqrtCuda(float x, const ApproxUnit &approx);

// ---- 1, 2. aten LayerNorm ---------------------------------------------------

struct WelfordStats {
  float mean, m2, n;
};

/// cuWelfordOnlineSum: push one value.
WelfordStats welfordPush(WelfordStats s, float x, const ApproxUnit &approx);
/// cuWelfordCombine(self = lower lane `b`, other = upper lane `a`).
WelfordStats welfordCombine(WelfordStats b, WelfordStats a,
                            const ApproxUnit &approx);

/// Mean and m2 of one row of `cols` values as aten's 128-thread
/// vectorized_layer_norm_kernel folds them (simulated thread by thread).
WelfordStats atenLayerNormStats(const float *row, int64_t cols,
                                const ApproxUnit &approx);

/// 1. F.layer_norm (no affine) then * (1 + scale) + shift. scale and shift
/// hold one row per batch of `rowsPerBatch` rows of x.
void lnModulate(const Matrix &x, const Matrix &scale, const Matrix &shift,
                int64_t rowsPerBatch, float eps, const Matrix &y,
                const ApproxUnit &approx);

/// 2. nn.LayerNorm(D <= 128, no affine) on one (rows, D) tensor.
void qkLayerNorm(const Matrix &x, float eps, const Matrix &y,
                 const ApproxUnit &approx);

// ---- 3, 4. Elementwise epilogues -------------------------------------------

/// 3. y = rnd(x + rnd_x(bias)), with residual rnd(rnd(x + b) + h). `h` may
/// be null (no residual). bias has one row of C values.
void convBias(const Matrix &x, const Matrix &bias, const Matrix *h,
              const Matrix &y);

/// 4. y = rnd(r + rnd(u * g)). `gateRowsPerBatch` selects the gate row of
/// output row r as r / gateRowsPerBatch (1 for a full gate, S for a
/// per-batch gate, >= rows for one global gate row).
void residualGate(const Matrix &r, const Matrix &u, const Matrix &gate,
                  int64_t gateRowsPerBatch, const Matrix &y);

// ---- 5. flashinfer RMSNorm + aten modulate ----------------------------------

/// Sum of rnd_f32(x*x) of one row in flashinfer's RMSNormKernel order for
/// `threadsPerRow` (32 or 64) threads.
float flashinferSumOfSquares(const float *row, int64_t cols, int threadsPerRow);

void rmsNormModulate(const Matrix &x, const Matrix &weight, const Matrix &scale,
                     const Matrix &shift, int64_t rowsPerBatch, float eps,
                     int threadsPerRow, const Matrix &y,
                     const ApproxUnit &approx);

// ---- 6. Wan VAE RMSNorm + SiLU (as the template states it) ----------------

/// F.silu(F.normalize(x, dim=1) * scale * gamma + bias) with the template's
/// stand-in norm order (serial fma); NOT aten's order.
void wanRmsNormSilu(const Matrix &x, const Matrix &gamma, const Matrix &bias,
                    float scale, const Matrix &y, const ApproxUnit &approx);

} // namespace bitfold::reference

#endif // BITFOLD_TESTS_REFERENCE_REFERENCE_H
