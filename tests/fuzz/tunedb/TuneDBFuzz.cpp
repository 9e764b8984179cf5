//===- tests/fuzz/tunedb/TuneDBFuzz.cpp - The tune DB loader and merge ----===//
//
// Input: DB text, optionally "\n--8<--\n" and a second DB text. Properties:
// loading never crashes or throws; a loaded DB round-trips through its JSON
// byte for byte; merge is commutative and idempotent; a loaded DB never
// holds a value the strict loader would refuse (negative timing, samples
// out of range), so merge can never write one back.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "autotune/TuneDB.h"

#include "llvm/ADT/StringRef.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace bitfold::autotune;

using bitfold::fuzz::check;
using bitfold::fuzz::Reader;

namespace {

void checkValues(const TuneDB &db) {
  for (const TuneEntry *e : db.all())
    for (const Measurement &m : e->measurements)
      check(m.samples >= 0 && std::isfinite(m.medianUs) && m.medianUs >= 0 &&
                m.spreadUs >= 0 && m.minUs >= 0 && m.maxUs >= 0,
            "a loaded measurement holds an out-of-range value");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef in(reinterpret_cast<const char *>(data), size);
  auto [first, second] = in.split("\n--8<--\n");
  auto a = TuneDB::fromJsonText(first);
  if (!a) {
    llvm::consumeError(a.takeError());
    return 0;
  }
  checkValues(*a);
  std::string text = a->toJsonText();
  auto back = TuneDB::fromJsonText(text);
  check(bool(back), "a saved DB does not load");
  check(back->toJsonText() == text, "a DB does not round-trip");
  TuneDB self = *a;
  self.merge(*a);
  check(self == *a, "merging a DB into itself changed it");
  auto b = TuneDB::fromJsonText(second);
  if (!b) {
    llvm::consumeError(b.takeError());
    return 0;
  }
  TuneDB ab = *a, ba = *b;
  ab.merge(*b);
  ba.merge(*a);
  check(ab == ba, "merge is not commutative");
  checkValues(ab);
  return 0;
}
