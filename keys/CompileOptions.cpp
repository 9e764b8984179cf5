//===- keys/CompileOptions.cpp - Options as key text ----------------------===//

#include "keys/CompileOptions.h"

#include "llvm/Support/raw_ostream.h"

#include <type_traits>

using namespace bitfold;
using namespace bitfold::keys;

std::string CompileOptions::keyText() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  bool first = true;
  forEachField([&](const char *name, const auto &value) {
    os << (first ? "" : " ") << name << '=';
    first = false;
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, bool>) {
      os << (value ? 1 : 0);
    } else if constexpr (std::is_same_v<T, int>) {
      os << value;
    } else if constexpr (std::is_same_v<T, std::optional<std::string>>) {
      if (!value) {
        os << "none";
        return;
      }
      os << '"';
      os.write_escaped(*value);
      os << '"';
    } else {
      static_assert(std::is_same_v<T, std::string>,
                    "keyText writes bools, ints, strings and optional "
                    "strings; teach it the new type");
      os << '"';
      os.write_escaped(value);
      os << '"';
    }
  });
  return s;
}
