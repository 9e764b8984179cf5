//===- autotune/TuneShape.cpp - The one tuner of one shape ----------------===//

#include "autotune/TuneShape.h"

#include "keys/Errors.h"

#include "codegen/Codegen.h"

using namespace bitfold;
using namespace bitfold::autotune;

ShapeConfigs autotune::shapeConfigs(const dsl::KernelDef &def,
                                    const keys::ShapeSpec &spec,
                                    const keys::TileConfig &defaultConfig) {
  ShapeConfigs out;
  out.defaultConfig = defaultConfig;
  std::vector<keys::TileConfig> candidates{defaultConfig};
  for (const keys::TileConfig &c : codegen::enumerateConfigs(def, spec))
    if (!(c == defaultConfig))
      candidates.push_back(c);
  for (const keys::TileConfig &c : candidates) {
    if (llvm::Error e = codegen::checkConfig(def, spec, c))
      out.rejected.push_back(c.str() + ": " + llvm::toString(std::move(e)));
    else
      out.legal.push_back(c);
  }
  return out;
}

llvm::Expected<ShapeTune> autotune::tuneShape(const ShapeTuneRequest &request) {
  const dsl::KernelDef &def = *request.def;
  ShapeConfigs configs = shapeConfigs(def, request.spec, request.defaultConfig);
  ShapeTune tune;
  tune.legalConfigs = configs.legal.size();
  tune.rejected = configs.rejected;
  if (configs.legal.empty())
    return keys::tuneError("no legal config for " + def.name + " at " +
                           request.spec.str());
  auto runner = request.makeRunner();
  if (!runner)
    return runner.takeError();
  auto result =
      searchConfigs(configs.legal, request.compile, **runner, request.search);
  if (!result)
    return result.takeError();
  tune.outcome = {configs.defaultConfig.str(), std::move(result->measurements)};
  tune.failures = std::move(result->failures);
  tune.skipped = result->skipped;
  if (request.db && request.key)
    request.db->record(*request.key, tune.outcome);
  return tune;
}
