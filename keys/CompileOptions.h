//===- keys/CompileOptions.h - Options of one compile ------------*- C++ -*-===//
//
// What a compile is asked for besides the program, shape and config. Every
// field is listed in fields(), which forEachField() and keyText() (and so
// every cache key) are built from; a static_assert below counts the
// struct's fields against the listed ones, so a new field that the list
// misses does not compile.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_SPEC_COMPILEOPTIONS_H
#define BITFOLD_SPEC_COMPILEOPTIONS_H

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace bitfold::keys {

struct CompileOptions {
  std::string arch = "sm_90"; ///< sm_80, sm_90, sm_100 ...
  bool emitCubin = true;      ///< false: stop at PTX.
  /// Set: write every stage's output there (created if missing). An
  /// empty path, a file, or a folder that cannot be written is an error.
  std::optional<std::string> dumpDir;
  /// PTX -> cubin tool: "" = automatic (see codegen/Assemble.h),
  /// "nvJitLink", "ptxas" or "driver".
  std::string cubinTool;
  /// sm_90+: begin with griddepcontrol.wait / launch_dependents so the
  /// kernel may be launched with programmatic dependent launch (PDL). Off
  /// by default: the two instructions cost kernels of many tiny CTAs
  /// (qk LN on an H200: 36 -> 43 us, bench/perf-notes.md section 13).
  bool gridDependencyControl = false;
  /// The PTX -> cubin assembler's optimisation level (ptxas -O, 0-3). Every
  /// level gives the same bits (the PTX spells out each rounding, so ptxas
  /// contracts nothing); 0 assembles about a third faster and schedules
  /// nothing. The runtime's synchronous quick-first kernels use 0
  /// (launchOptions).
  int assemblerOptLevel = 3;
  /// Roll every row plan that may roll (two passes, or no fold) into loops,
  /// as BITFOLD_ROLLED_ROWS=1 does (codegen/README.md, "Rolled rows"): the
  /// same bits from a shorter PTX, so every stage after planning runs
  /// faster; such kernels run about 8% slower at ptxas -O3. The runtime's
  /// synchronous quick-first kernels use it (launchOptions).
  bool rollRows = false;

  /// Every field with its key name, in declaration order.
  static constexpr auto fields() {
    return std::tuple{std::pair{"arch", &CompileOptions::arch},
                      std::pair{"cubin", &CompileOptions::emitCubin},
                      std::pair{"dump-dir", &CompileOptions::dumpDir},
                      std::pair{"cubin-tool", &CompileOptions::cubinTool},
                      std::pair{"pdl", &CompileOptions::gridDependencyControl},
                      std::pair{"ptxas-O", &CompileOptions::assemblerOptLevel},
                      std::pair{"roll-rows", &CompileOptions::rollRows}};
  }
  /// Calls f(name, field) for every field of fields().
  template <typename F> void forEachField(F &&f) const {
    std::apply([&](auto... p) { (f(p.first, this->*p.second), ...); },
               fields());
  }
  template <typename F> void forEachField(F &&f) {
    std::apply([&](auto... p) { (f(p.first, this->*p.second), ...); },
               fields());
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
} // namespace detail

static_assert(detail::fieldCount<CompileOptions>() ==
                  std::tuple_size_v<decltype(CompileOptions::fields())>,
              "CompileOptions::fields() must list every field: cache "
              "keys are built from it");

} // namespace bitfold::keys

#endif // BITFOLD_SPEC_COMPILEOPTIONS_H
