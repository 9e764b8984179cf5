//===- dsl/RowOutputs.h - Per-row outputs: what makes one legal -*- C++ -*-===//
//
// A per-row output (IndexMap::PerRow) stores one value per row: a fold
// result or an expression of per-row values (scalars, dims, constants,
// fold results). The verifier asks here what is wrong with one.
//
//===----------------------------------------------------------------------===//

#ifndef BITFOLD_DSL_ROWOUTPUTS_H
#define BITFOLD_DSL_ROWOUTPUTS_H

#include "dsl/IR.h"

#include <string>
#include <vector>

namespace bitfold::dsl {

/// The first node of `root`, outside fold results, that varies along the
/// row (a load or the column index), or null: a per-row output's value
/// must have none.
const ExprNode *firstElementNode(const ExprNode *root);

/// Problems of output `o`'s index map: per_row only on row_major outputs
/// whose value is per row; inputs are never per_row. Messages name the
/// offending node with `nodeName` when given ("%x at 12:3").
std::vector<std::string> indexMapProblems(const OperandDecl &o,
                                          NodeNamer nodeName);

/// Problems of in-place declarations (OperandDecl::aliasOf): an output
/// overwrites one per-element input of its own dtype and layout, and no
/// input is overwritten by two outputs.
std::vector<std::string> aliasProblems(const KernelDef &def);

} // namespace bitfold::dsl

#endif // BITFOLD_DSL_ROWOUTPUTS_H
