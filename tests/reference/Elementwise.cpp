//===- tests/reference/Elementwise.cpp - Conv bias and gated residual -----===//
//
// docs/numerics.md sections 3 and 4: one rounding per framework op.
//
//===----------------------------------------------------------------------===//

#include "tests/reference/Reference.h"

using namespace bitfold::reference;

void bitfold::reference::convBias(const Matrix &x, const Matrix &bias,
                                  const Matrix *h, const Matrix &y) {
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.cols; ++c) {
      // Autocast casts an f32 bias to x's dtype first (no-op otherwise).
      float b = rnd(x.type, bias.load(0, c));
      float out = x.load(r, c) + b;
      if (h)
        out = rnd(y.type, out) + h->load(r, c);
      y.store(r, c, out);
    }
  }
}

void bitfold::reference::residualGate(const Matrix &r, const Matrix &u,
                                      const Matrix &gate,
                                      int64_t gateRowsPerBatch,
                                      const Matrix &y) {
  for (int64_t i = 0; i < r.rows; ++i) {
    int64_t g = i / gateRowsPerBatch;
    for (int64_t c = 0; c < r.cols; ++c) {
      float product = rnd(y.type, u.load(i, c) * gate.load(g, c));
      y.store(i, c, r.load(i, c) + product);
    }
  }
}
