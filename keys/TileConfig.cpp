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
  if (lanesInWarp)
    s += ".w1";
  return s;
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef, 7> parts;
  text.split(parts, '.');
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "tile config '" + text + "': " + why +
            " (expected rR.tT.vV.pP[.oO][.s1][.w1], e.g. r1.t128.v8.p1)");
  };
  if (parts.size() < 4 || parts.size() > 7)
    return bad("needs four fields (and optional .oO, .s1, .w1)");
  // Four fields, then the optional ones, each at most once, in this order.
  const llvm::StringRef keys = "rtvposw";
  int vals[7] = {1, 1, 1, 1, 1, 0, 0};
  size_t next = 0; // keys before it are taken (or fixed)
  for (size_t i = 0; i < parts.size(); ++i) {
    const llvm::StringRef part = parts[i];
    const size_t key = i < 4 || part.empty() ? i : keys.find(part[0], next);
    int v = 0;
    if (key < keys.size() && part.starts_with(keys.substr(key, 1)) &&
        !part.drop_front().getAsInteger(10, v) && v >= 1) {
      vals[key] = v;
      next = key + 1;
      continue;
    }
    if (i < 4)
      return bad(llvm::formatv("field {0} must be '{1}' and a positive number",
                               i + 1, keys[i]));
    return bad(llvm::formatv("field {0} ('{1}') is not one of .oO, .s1, .w1 "
                             "(in that order, each once)",
                             i + 1, part));
  }
  if (vals[3] > 2)
    return bad("passes must be 1 or 2");
  if (vals[5] > 1)
    return bad("a shared row is written s1");
  if (vals[6] > 1)
    return bad("lanes in a warp are written w1");
  if (vals[4] == 1 && parts.size() > 4 && parts[4].starts_with("o"))
    return bad("pixels per thread 1 is written without the field");
  if (vals[4] > 1 && vals[5])
    return bad("a shared row holds one row per thread (no .oO with .s1)");
  TileConfig c;
  c.rowsPerCta = vals[0];
  c.threadsPerRow = vals[1];
  c.vectorElems = vals[2];
  c.twoPass = vals[3] == 2;
  c.pixelsPerThread = vals[4];
  c.sharedRow = vals[5] == 1;
  c.lanesInWarp = vals[6] == 1;
  return c;
}
