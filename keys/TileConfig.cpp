//===- keys/TileConfig.cpp - Tile config text -----------------------------===//

#include "keys/TileConfig.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

using namespace bitfold;
using namespace bitfold::keys;

std::string TileConfig::str() const {
  std::string s = llvm::formatv("r{0}.t{1}.v{2}.p{3}", rowsPerCta,
                                threadsPerRow, vectorElems, twoPass ? 2 : 1);
  if (pixelsPerThread != 1)
    s += llvm::formatv(".o{0}", pixelsPerThread).str();
  if (sharedRow)
    s += ".s1";
  return s;
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef text) {
  TileConfig c;
  llvm::SmallVector<llvm::StringRef, 5> parts;
  text.split(parts, '.');
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "tile config '" + text + "': " + why +
            " (expected rR.tT.vV.pP[.oO|.s1], e.g. r1.t128.v8.p1)");
  };
  if (parts.size() != 4 && parts.size() != 5)
    return bad("needs four fields (and an optional fifth)");
  // The optional fifth field: pixels per thread (oN) or a shared row (s1).
  char keys[] = {'r', 't', 'v', 'p', 'o'};
  if (parts.size() == 5 && parts[4].starts_with("s"))
    keys[4] = 's';
  int vals[5] = {1, 1, 1, 1, 1};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty() || parts[i][0] != keys[i] ||
        parts[i].drop_front().getAsInteger(10, vals[i]) || vals[i] < 1)
      return bad(llvm::formatv("field {0} must be '{1}' and a positive number",
                               i + 1, keys[i]));
  }
  if (vals[3] > 2)
    return bad("passes must be 1 or 2");
  if (keys[4] == 's') {
    if (vals[4] != 1)
      return bad("a shared row is written s1");
    c.sharedRow = true;
    vals[4] = 1;
  }
  c.rowsPerCta = vals[0];
  c.threadsPerRow = vals[1];
  c.vectorElems = vals[2];
  c.twoPass = vals[3] == 2;
  c.pixelsPerThread = vals[4];
  if (parts.size() == 5 && keys[4] == 'o' && c.pixelsPerThread == 1)
    return bad("pixels per thread 1 is written without the field");
  return c;
}
