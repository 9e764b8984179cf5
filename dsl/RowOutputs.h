//===- dsl/RowOutputs.h - Per-row outputs: what makes one legal -*- C++ -*-===//
//
// A per-row output (IndexMap::PerRow) stores one value per row: a fold
// result or an expression of per-row values (scalars, dims, constants,
// fold results, per-row inputs). A per-row input is read once per row (an
// i32 target index). The verifier asks here what is wrong with either.
//
//===----------------------------------------------------------------------===//

#ifndef BITFOLD_DSL_ROWOUTPUTS_H
#define BITFOLD_DSL_ROWOUTPUTS_H

#include "dsl/IR.h"

#include <string>
#include <vector>

namespace bitfold::dsl {

/// The first node of `root`, outside fold results, that varies along the
/// row (variesAlongRow: a load of a non-per-row input, the column index),
/// or null: a per-row output's value must have none.
const ExprNode *firstElementNode(const KernelDef &def, const ExprNode *root);

/// Problems of operand `o`'s index map: per_row only on row_major
/// operands without align; a per_row output's value is per row; i32 only
/// on per_row inputs. Messages name the offending node with `nodeName`
/// when given ("%x at 12:3").
std::vector<std::string> indexMapProblems(const KernelDef &def,
                                          const OperandDecl &o,
                                          NodeNamer nodeName);

/// Problems of in-place declarations (OperandDecl::aliasOf): an output
/// overwrites one per-element input of its own dtype and layout, and no
/// input is overwritten by two outputs.
std::vector<std::string> aliasProblems(const KernelDef &def);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_ROWOUTPUTS_H
