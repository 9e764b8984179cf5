//===- tests/fuzz/FuzzInput.h - Shared helpers of the fuzz harnesses -*- C++ -*-===//
#ifndef BITFOLD_TESTS_FUZZ_FUZZINPUT_H
#define BITFOLD_TESTS_FUZZ_FUZZINPUT_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace bitfold::fuzz {

/// Reads typed values off a fuzz input; zeros once it runs out.
class Reader {
public:
  Reader(const uint8_t *d, size_t n) : d(d), n(n) {}
  template <typename T> T get() {
    T v{};
    size_t k = std::min(sizeof(T), n - at);
    std::memcpy(&v, d + at, k);
    at += k;
    return v;
  }
  /// A length byte, then up to maxLen characters.
  std::string text(size_t maxLen) {
    size_t want = get<uint8_t>() % (maxLen + 1); // before reading `at`
    size_t len = std::min(want, n - at);
    std::string s(reinterpret_cast<const char *>(d + at), len);
    at += len;
    return s;
  }

private:
  const uint8_t *d;
  size_t n, at = 0;
};

/// A property of the code under test: aborts (a fuzz finding) when false.
inline void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

} // namespace bitfold::fuzz

#endif
