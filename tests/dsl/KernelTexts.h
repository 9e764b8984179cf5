//===- tests/dsl/KernelTexts.h - Programs and texts for parser tests -*- C++ -*-===//
//
// Shared by ParserTest and ParserFuzzTest: hand-written C++ programs that
// cover every construct of the text format, the examples of
// docs/kernel-format.md, and the fuzz corpus.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_DSL_KERNELTEXTS_H
#define BITFOLD_TESTS_DSL_KERNELTEXTS_H

#include "dsl/IR.h"

#include <string>
#include <vector>

namespace bitfold::testing {

struct NamedProgram {
  std::string name;
  std::shared_ptr<const dsl::KernelDef> def; ///< null if it failed to build.
};

/// Programs built in C++: fold orders, combiners with finish, several
/// folds (also used out of order), several outputs, per-batch and
/// per-column operands, channels-last layouts, groups, scalars with and
/// without defaults, predicates.
std::vector<NamedProgram> handWrittenPrograms();

std::string docPath();
std::string corpusDir();
std::string readFile(const std::string &path);
/// The ```kernel blocks of docs/kernel-format.md, in order.
std::vector<std::string> docExamples();

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_DSL_KERNELTEXTS_H
