//===- autotune/TuneTasks.h - Shapes files, shards, the report ---*- C++ -*-===//
//
// The pieces of `bitfold tune` that need no GPU.
//
// Shapes file (JSON): a list of
//   {"template": "ln_modulate", "shape": "1,4096,4096",
//    "params": {"dtype": "bf16"}}
// "params" is optional; its keys are the template parameters of the C API
// (dtype, bias_dtype, residual, gate); values are strings, numbers or
// booleans. bench/shapes/seed-shapes.json is the docs/numerics.md seed set.
//
// Shards: "--shard i/n" takes the tasks whose index (in file order, after
// the template filter and de-duplication by shape class) is i modulo n.
// A host with k GPUs splits its shard i/n into the k shards i + j*n of
// n*k (worker j), whose union is exactly shard i/n.
//
//===----------------------------------------------------------------------===//
#ifndef BITFOLD_AUTOTUNE_TUNETASKS_H
#define BITFOLD_AUTOTUNE_TUNETASKS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace bitfold::autotune {

struct ShapeRequest {
  std::string templateName;
  std::string shape; ///< "1,4096,4096", as templates::parseShape reads it.
  std::map<std::string, std::string> params;
  /// "program": a kernel text file instead of "template" (relative to the
  /// shapes file); loadShapesFile registers it and sets templateName.
  std::string program;
  /// "dtype=bf16 residual=1": what KernelDescriptor::parseParams reads.
  std::string paramsText() const;
  /// "ln_modulate 1,4096,4096 dtype=bf16" (for messages and the report).
  std::string label() const;
};

llvm::Expected<std::vector<ShapeRequest>> parseShapesFile(llvm::StringRef json);
llvm::Expected<std::vector<ShapeRequest>> loadShapesFile(llvm::StringRef path);
/// The JSON text of a shapes file (the inverse of parseShapesFile).
std::string shapesFileText(llvm::ArrayRef<ShapeRequest> requests);

struct Shard {
  unsigned index = 0, count = 1;
  /// "i/n" with 0 <= i < n.
  static llvm::Expected<Shard> parse(llvm::StringRef text);
  bool owns(size_t taskIndex) const { return taskIndex % count == index; }
  /// Worker `j` of `workers` of this shard: shard index + j*count of
  /// count*workers.
  Shard split(unsigned j, unsigned workers) const {
    return Shard{index + j * count, count * workers};
  }
  std::string str() const;
};

/// One line of the final table.
struct ReportRow {
  std::string label;        ///< ShapeRequest::label().
  std::string shapeClass;
  size_t configs = 0;       ///< legal configs of the shape.
  size_t timed = 0;         ///< configs with a measurement.
  size_t cut = 0;           ///< of those, cut early.
  double seconds = 0;       ///< compile + timing wall time.
  std::string winner;
  double winnerUs = 0;
  std::string defaultConfig;
  double defaultUs = 0;     ///< 0 when the default was not timed.
  std::string status;       ///< "ok", or why not (error, skipped, ...).

  double speedup() const {
    return winnerUs > 0 && defaultUs > 0 ? defaultUs / winnerUs : 0;
  }
};

std::string reportRowsJson(llvm::ArrayRef<ReportRow> rows);
llvm::Expected<std::vector<ReportRow>> parseReportRowsJson(llvm::StringRef text);
/// Fixed-width table for a terminal.
std::string formatReportTable(llvm::ArrayRef<ReportRow> rows);
/// The same as a markdown table (--report FILE.md).
std::string formatReportMarkdown(llvm::ArrayRef<ReportRow> rows,
                                 llvm::StringRef title);

} // namespace bitfold::autotune

#endif // BITFOLD_AUTOTUNE_TUNETASKS_H
