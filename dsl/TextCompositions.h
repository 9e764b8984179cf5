//===- dsl/TextCompositions.h - Op names a kernel text may use --*- C++ -*-===//
//
// Besides the op table's ops (dsl/Ops.def), a kernel text may call the C++
// DSL's named compositions (`%y = silu %x : f32`): the parser expands them
// into the nodes the C++ helper builds, so the canonical text, and the
// hash, are the expansion's. And for a name that is neither, the nearest
// one, for the parser's error message.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_TEXTCOMPOSITIONS_H
#define BITFOLD_DSL_TEXTCOMPOSITIONS_H

#include "dsl/IR.h"

namespace bitfold::dsl {

/// A composition of one f32 operand, as the C++ helper of that name.
struct TextComposition {
  llvm::StringLiteral name;
  Expr (*build)(const Expr &);
};

/// Every composition a text may call (rsqrt_cuda, silu, gelu_erf, ...).
llvm::ArrayRef<TextComposition> textCompositions();
/// The composition spelled `name`, or null.
const TextComposition *findTextComposition(llvm::StringRef name);

/// The op or composition name nearest to `name` ("exp" -> "exp_libdevice"):
/// one it is a prefix of at a '_', else one within a small edit distance;
/// empty when none is near.
std::string nearestOpName(llvm::StringRef name);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_TEXTCOMPOSITIONS_H
