//===- tests/dsl/TemplateVariants.h - Every template, several ways -*- C++
//-*-===//
//
// A fixed list of template instantiations (name + arguments) shared by the
// hash tests and the bitfold_dsl_print_hashes helper, so two processes build
// exactly the same programs.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TESTS_DSL_TEMPLATEVARIANTS_H
#define BITFOLD_TESTS_DSL_TEMPLATEVARIANTS_H

#include "templates/Templates.h"

#include <string>
#include <vector>

namespace bitfold::testing {

struct TemplateVariant {
  std::string label; ///< unique, e.g. "conv_bias/bf16/f32/residual".
  std::string templateName;
  templates::TemplateArgs args;
};

const std::vector<TemplateVariant> &templateVariants();

/// Builds a variant; on failure returns the error.
llvm::Expected<templates::KernelDefRef> buildVariant(const TemplateVariant &v);

} // namespace bitfold::testing

#endif // BITFOLD_TESTS_DSL_TEMPLATEVARIANTS_H
