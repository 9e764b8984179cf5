//===- dsl/TextCompositions.cpp - Op names a kernel text may use ----------===//

#include "dsl/TextCompositions.h"

#include "dsl/Ops.h"

using namespace bitfold::dsl;

llvm::ArrayRef<TextComposition> bitfold::dsl::textCompositions() {
  static const TextComposition table[] = {
      {llvm::StringLiteral("rsqrt_cuda"), rsqrt_cuda},
      {llvm::StringLiteral("rsqrt_approx"), rsqrt_approx},
      {llvm::StringLiteral("rcp_nvcc"), rcp_nvcc},
      {llvm::StringLiteral("sigmoid"), sigmoid},
      {llvm::StringLiteral("silu"), silu},
      {llvm::StringLiteral("gelu_erf"), gelu_erf},
      {llvm::StringLiteral("gelu_tanh"), gelu_tanh},
  };
  return table;
}

const TextComposition *
bitfold::dsl::findTextComposition(llvm::StringRef name) {
  for (const TextComposition &c : textCompositions())
    if (c.name == name)
      return &c;
  return nullptr;
}

std::string bitfold::dsl::nearestOpName(llvm::StringRef name) {
  std::vector<llvm::StringRef> names;
  for (const OpInfo &info : kOpTable)
    if (info.op != Op::Invalid)
      names.push_back(info.name);
  for (const TextComposition &c : textCompositions())
    names.push_back(c.name);
  // "exp" for exp_libdevice, "rsqrt" for rsqrt_cuda: the first in the table.
  for (llvm::StringRef n : names)
    if (n.size() > name.size() && n.starts_with(name) && n[name.size()] == '_')
      return n.str();
  std::string best;
  unsigned bestDistance = name.size() <= 3 ? 1 : 2;
  for (llvm::StringRef n : names) {
    unsigned d = name.edit_distance(n, /*AllowReplacements=*/true,
                                    bestDistance);
    if (d <= bestDistance && (best.empty() || d < bestDistance)) {
      best = n.str();
      bestDistance = d;
    }
  }
  return best;
}
