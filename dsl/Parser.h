//===- dsl/Parser.h - The kernel text format, read back ----------*- C++ -*-===//
//
// Reads a row program written in the kernel text format: the canonical text
// that printCanonical writes (docs/kernel-format.md has the grammar). For
// every verified program, parseKernel(printCanonical(def)) gives a program
// with the same canonical text and hash.
//
// Errors never abort: malformed text gives "line:column: expected X, found
// Y" (prefixed with "NAME:" when a source name is given); a well-formed but
// invalid program gives the verifier's messages, as RowProgram::build().
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_DSL_PARSER_H
#define BITFOLD_DSL_PARSER_H

#include "dsl/IR.h"

namespace bitfold::dsl {

/// The text format version this build reads and writes (the header's
/// "v1").
inline constexpr llvm::StringLiteral kKernelFormatVersion = "v1";

/// Parses and verifies a program. `sourceName` (e.g. a file name) prefixes
/// every error's location.
llvm::Expected<std::shared_ptr<const KernelDef>>
parseKernel(llvm::StringRef text, llvm::StringRef sourceName = "");

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_PARSER_H
