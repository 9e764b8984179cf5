//===- spec/CompileOptions.h - Options of one compile ------------*- C++ -*-===//
//
// What a compile is asked for besides the program, shape and config. Every
// field is visited by forEachField(), which keyText() (and so every cache
// key) is built from; a static_assert below counts the struct's fields
// against the visited ones, so a new field that the visitor misses does
// not compile.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_COMPILEOPTIONS_H
#define BITFOLD_SPEC_COMPILEOPTIONS_H

#include <cstddef>
#include <string>

namespace bitfold::spec {

struct CompileOptions {
  std::string arch = "sm_90"; ///< sm_80, sm_90, sm_100 ...
  bool emitCubin = true;      ///< false: stop at PTX.
  std::string dumpDir;        ///< non-empty: write every stage there.
  /// PTX -> cubin tool: "" = automatic (see codegen/Assemble.h),
  /// "nvJitLink", "ptxas" or "driver".
  std::string cubinTool;
  /// sm_90+: begin with griddepcontrol.wait / launch_dependents so the
  /// kernel may be launched with programmatic dependent launch (PDL). Off
  /// by default: the two instructions cost kernels of many tiny CTAs
  /// (qk LN on an H200: 36 -> 43 us, bench/perf-notes.md section 13).
  bool gridDependencyControl = false;

  /// Calls f(name, field) for every field, in declaration order.
  template <typename F> constexpr void forEachField(F &&f) const {
    visitFields(*this, f);
  }
  template <typename F> constexpr void forEachField(F &&f) {
    visitFields(*this, f);
  }
  template <typename Self, typename F>
  static constexpr void visitFields(Self &self, F &f) {
    f("arch", self.arch);
    f("cubin", self.emitCubin);
    f("dump-dir", self.dumpDir);
    f("cubin-tool", self.cubinTool);
    f("pdl", self.gridDependencyControl);
  }

  /// `name=value` for every field, space separated; strings quoted and
  /// escaped. What cache keys record of the options.
  std::string keyText() const;
};

namespace detail {
/// Converts to anything: counts an aggregate's fields by brace-initialising
/// it with more and more of these.
struct AnyField {
  template <typename T> constexpr operator T() const noexcept { return T{}; }
};
template <typename T, typename... A> constexpr size_t fieldCount() {
  if constexpr (requires { T{A{}..., AnyField{}}; })
    return fieldCount<T, A..., AnyField>();
  else
    return sizeof...(A);
}
constexpr size_t visitedFieldCount() {
  size_t n = 0;
  CompileOptions().forEachField([&n](const char *, const auto &) { ++n; });
  return n;
}
} // namespace detail

static_assert(detail::fieldCount<CompileOptions>() ==
                  detail::visitedFieldCount(),
              "CompileOptions::forEachField must visit every field: cache "
              "keys are built from it");

} // namespace bitfold::spec

#endif // BITFOLD_SPEC_COMPILEOPTIONS_H
