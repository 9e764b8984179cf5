//===- templates/Registry.h - Kernels by name -------------------*- C++ -*-===//
//
// Every kernel a name can reach (the C API, the CLI, tune, bench, tests) is
// one KernelDescriptor in the Registry: its builder, its parameter schema
// (one parser for every parameter), its seed shapes and whether it is
// bit-exact. Its shape rule and its scalar defaults are read from the
// KernelDef it builds (layouts, groups, `p.scalar("eps", 1e-6f)`), so a
// descriptor never repeats what the definition already says. The stock
// kernels register themselves on first use; a program adds its own kernels
// at run time with Registry::add (e.g. from userKernel()).
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_TEMPLATES_REGISTRY_H
#define BITFOLD_TEMPLATES_REGISTRY_H

#include "dsl/IR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace bitfold::templates {

using dsl::DType;
using KernelDefRef = std::shared_ptr<const dsl::KernelDef>;
struct ProblemShape;

/// The one dtype parser: bf16 (bfloat16), f16 (fp16, float16, half), f32
/// (fp32, float32, float).
llvm::Expected<DType> parseDType(llvm::StringRef text);

/// One parameter of a kernel: "dtype", "residual", "gate", ...
struct ParamSpec {
  enum class Kind { DType, Flag, Choice };
  std::string name;
  Kind kind = Kind::DType;
  std::vector<std::string> choices; ///< Kind::Choice: the allowed values.
  std::string defaultValue;         ///< canonical text ("bf16", "0", "full").
  std::string defaultFrom;          ///< non-empty: default to this parameter.
  std::string help;
  /// The allowed values as help shows them ("bf16|f16|f32").
  std::string allowedText() const;
};

/// Parameter values of one kernel, canonical ("f16" for "half", "1" for
/// "true"), every parameter of the schema present.
class ParamValues {
public:
  DType dtype(llvm::StringRef name) const;
  bool flag(llvm::StringRef name) const;
  llvm::StringRef choice(llvm::StringRef name) const;
  /// "bias_dtype=bf16,dtype=bf16,residual=0": equal values, equal text.
  std::string str() const;
  std::map<std::string, std::string> values;
};

struct KernelDescriptor {
  std::string name;
  std::string summary;
  bool bitExact = true; ///< reproduces its reference bit for bit.
  std::vector<ParamSpec> params;
  /// Builds the definition for `cols` columns; cols = 0 asks for one valid
  /// for some column count (the signature: operands, scalars, layouts).
  std::function<llvm::Expected<KernelDefRef>(const ParamValues &,
                                             int64_t cols)>
      build;
  /// The definition differs per column count (rmsnorm_modulate's fold
  /// order); otherwise the signature is the definition for every shape.
  bool dependsOnCols = false;
  /// Set where the definition also differs per row class (aten's generic
  /// reduction below 16 rows; folds::aten_reduce_row_class): builds for
  /// (cols, rows), one definition per class; `build` is then its
  /// definition for 16 rows and more.
  std::function<llvm::Expected<KernelDefRef>(const ParamValues &,
                                             int64_t cols, int64_t rows)>
      buildForRows;
  /// With buildForRows, where the classes are not aten_reduce_row_class's
  /// (the channels-first layout's: pixel counts, aten_reduce_outer_row_class).
  std::function<int64_t(const ParamValues &, int64_t rows)> classifyRows;
  /// The row class `rows` belongs to: 0 when the definition does not depend
  /// on the row count, else the smallest row count of its class.
  int64_t rowClass(const ParamValues &params, int64_t rows) const;
  /// The definition for a launch of `rows` rows of `cols` columns (rows
  /// <= 0: the class of every large row count).
  llvm::Expected<KernelDefRef> definition(const ParamValues &params,
                                          int64_t cols, int64_t rows) const;
  /// Shapes (comma-separated dims, see shapeFromDims) the kernel is known
  /// at; templates lists them, tests and tune cover them.
  std::vector<std::string> seedShapes;
  /// Scalars whose default follows from the shape (wan's scale = sqrt(C));
  /// every other scalar takes the default its definition declares.
  std::map<std::string, std::function<float(const ProblemShape &)>>
      shapeScalars;

  /// Parses "dtype=f16,residual=1" (separators: space , ; tab newline)
  /// against the schema; errors name the bad key or value and list the
  /// valid ones.
  llvm::Expected<ParamValues> parseParams(llvm::StringRef text) const;
  /// One line per parameter for help text.
  std::string paramsHelp() const;
  /// build(params, 0).
  llvm::Expected<KernelDefRef> signature(const ParamValues &params) const;
};
using DescriptorRef = std::shared_ptr<const KernelDescriptor>;

/// A descriptor for a kernel defined outside the registry (built in C++ or
/// parsed from text): no parameters, the same definition for every shape.
KernelDescriptor userKernel(KernelDefRef def, std::string summary,
                            bool bitExact);

class Registry {
public:
  /// The process-wide registry, holding the stock kernels.
  static Registry &global();

  /// Adds a kernel; fails if the name is taken or the descriptor is
  /// incomplete (no name, no builder, a default outside its choices).
  llvm::Error add(KernelDescriptor desc);
  /// Null if no kernel has this name.
  DescriptorRef find(llvm::StringRef name) const;
  /// find, or an error listing the kernels there are.
  llvm::Expected<DescriptorRef> lookup(llvm::StringRef name) const;
  /// In registration order. Descriptors are never removed: references to
  /// them (and to their names) stay valid for the life of the process.
  std::vector<DescriptorRef> all() const;

private:
  mutable std::mutex mu;
  std::vector<DescriptorRef> entries;
};

/// The descriptors of the stock kernels (Templates.cpp).
std::vector<KernelDescriptor> stockKernels();

} // namespace bitfold::templates

#endif // BITFOLD_TEMPLATES_REGISTRY_H
