//===- dsl/Ops.h - The op table: names, arity, types, exactness -*- C++ -*-===//
//
// Every op of a row program and its static facts, generated from
// dsl/Ops.def. The verifier, the builders, the printer, the parser and the
// interpreter read this table; codegen keys its lowering by dsl::Op and can
// check coverage at compile time:
//
//   static_assert(std::size(loweringTable) == bitfold::dsl::kNumOps);
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_OPS_H
#define BITFOLD_DSL_OPS_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>

namespace bitfold::dsl {

/// Every operation a row program can contain (see dsl/Ops.def).
enum class Op : uint8_t {
#define BITFOLD_DSL_OP(Name, ...) Name,
#include "dsl/Ops.def"
};

/// Number of ops; Op values are 0 .. kNumOps - 1.
inline constexpr size_t kNumOps = 0
#define BITFOLD_DSL_OP(...) +1
#include "dsl/Ops.def"
    ;

/// How an op's operands and result are typed.
enum class TypeRule : uint8_t {
  Leaf,    ///< no computed operands; the node carries its type.
  Arith,   ///< numbers (bf16/f16 widened exactly) -> f32.
  Compare, ///< two numbers (widened) -> i1.
  Logic,   ///< predicates (i1) -> i1.
  Select,  ///< (i1, number, number) -> f32.
  Round,   ///< number -> the node's storage dtype (bf16/f16).
  Extend,  ///< bf16/f16 -> f32.
  IntArith,   ///< (i32, i32) -> i32.
  IntCompare, ///< (i32, i32) -> i1.
  IntSelect,  ///< (i1, i32, i32) -> i32.
  IntToFloat, ///< i32 -> f32.
  Gather,     ///< i32 column -> f32 (the node names the input).
};

/// Whether the interpreter's value is the GPU's bit for bit.
enum class Exactness : uint8_t {
  Exact,       ///< IEEE op (or exact transcription): same bits as the GPU.
  Approximate, ///< hardware approximation, modelled by the interpreter.
};

struct OpInfo {
  Op op;
  llvm::StringLiteral name; ///< spelling in the canonical text.
  int8_t arity;             ///< operands; -1: fold value (see Ops.def).
  TypeRule types;
  Exactness exactness;
};

inline constexpr OpInfo kOpTable[] = {
#define BITFOLD_DSL_OP(Name, Spelling, Arity, Types, Exact, ...)               \
  {Op::Name, Spelling, Arity, TypeRule::Types, Exactness::Exact},
#include "dsl/Ops.def"
};
static_assert(std::size(kOpTable) == kNumOps);

constexpr const OpInfo &opInfo(Op op) { return kOpTable[size_t(op)]; }

/// The op spelled `name` in the canonical text, if any.
std::optional<Op> opFromName(llvm::StringRef name);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_OPS_H
