//===- keys/TileConfig.cpp - Tile config text -----------------------------===//

#include "keys/TileConfig.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::keys;

std::string TileConfig::str() const {
  return llvm::formatv("r{0}.t{1}.v{2}.p{3}", rowsPerCta, threadsPerRow,
                       vectorElems, twoPass ? 2 : 1);
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef text) {
  TileConfig c;
  llvm::SmallVector<llvm::StringRef, 4> parts;
  text.split(parts, '.');
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "tile config '" + text + "': " + why +
            " (expected rR.tT.vV.pP, e.g. r1.t128.v8.p1)");
  };
  if (parts.size() != 4)
    return bad("needs four fields");
  const char keys[] = {'r', 't', 'v', 'p'};
  int vals[4];
  for (int i = 0; i < 4; ++i) {
    if (parts[i].empty() || parts[i][0] != keys[i] ||
        parts[i].drop_front().getAsInteger(10, vals[i]) || vals[i] < 1)
      return bad(llvm::formatv("field {0} must be '{1}' and a positive number",
                               i + 1, keys[i]));
  }
  if (vals[3] > 2)
    return bad("passes must be 1 or 2");
  c.rowsPerCta = vals[0];
  c.threadsPerRow = vals[1];
  c.vectorElems = vals[2];
  c.twoPass = vals[3] == 2;
  return c;
}
