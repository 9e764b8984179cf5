//===- capi/JitLibrary.cpp - libbitfold-jit.so --------------------------===//
//
// libbitfold-jit.so is dsl/, templates/ and codegen/ linked whole (see
// CMakeLists.txt); this file only gives the library a source of its own.
// Its public API is the installed headers (include/bitfold/dsl, codegen).
//
//===----------------------------------------------------------------------===//

namespace bitfold::jit {
/// The jit library's ABI version (the package's major version).
extern const int kJitAbiVersion;
const int kJitAbiVersion = 0;
} // namespace bitfold::jit
