//===- autotune/TuneTasks.cpp - Shapes files, shards, the report ----------===//

#include "autotune/TuneTasks.h"

#include "keys/Errors.h"

#include "fileio/File.h"
#include "templates/UserKernels.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <nlohmann/json.hpp>

using namespace bitfold;
using namespace bitfold::autotune;
using nlohmann::json;

namespace {

} // namespace

std::string ShapeRequest::paramsText() const {
  std::string s;
  for (const auto &[k, v] : params)
    s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

std::string ShapeRequest::label() const {
  std::string p = paramsText();
  return templateName + " " + shape + (p.empty() ? "" : " " + p);
}

llvm::Expected<std::vector<ShapeRequest>>
autotune::parseShapesFile(llvm::StringRef text) {
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded())
    return keys::usageError("shapes file: not valid JSON");
  if (!root.is_array())
    return keys::usageError("shapes file: expected a list of {\"template\", "
                            "\"shape\", \"params\"} objects");
  std::vector<ShapeRequest> out;
  for (size_t i = 0; i < root.size(); ++i) {
    const json &j = root[i];
    std::string where = llvm::formatv("shapes file item {0}", i);
    if (!j.is_object())
      return keys::usageError(where + ": expected an object");
    ShapeRequest r;
    auto str = [&](const char *name, std::string &dst) -> llvm::Error {
      auto it = j.find(name);
      if (it == j.end() || !it->is_string())
        return keys::usageError(where + ": '" + name + "' must be a string");
      dst = it->get<std::string>();
      return llvm::Error::success();
    };
    if (j.contains("program")) {
      if (llvm::Error e = str("program", r.program))
        return std::move(e);
    } else if (llvm::Error e = str("template", r.templateName)) {
      return std::move(e);
    }
    if (llvm::Error e = str("shape", r.shape))
      return std::move(e);
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "template" && it.key() != "program" &&
          it.key() != "shape" && it.key() != "params")
        return keys::usageError(where + ": unknown key '" + it.key() +
                                "' (template or program, shape, params)");
    if (auto p = j.find("params"); p != j.end()) {
      if (!p->is_object())
        return keys::usageError(where + ": 'params' must be an object");
      for (auto it = p->begin(); it != p->end(); ++it) {
        const json &v = it.value();
        std::string value;
        if (v.is_string())
          value = v.get<std::string>();
        else if (v.is_boolean())
          value = v.get<bool>() ? "1" : "0";
        else if (v.is_number_integer())
          value = std::to_string(v.get<int64_t>());
        else
          return keys::usageError(where + ": param '" + it.key() +
                                  "' must be a string, integer or boolean");
        r.params[it.key()] = value;
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

llvm::Expected<std::vector<ShapeRequest>>
autotune::loadShapesFile(llvm::StringRef path) {
  auto text = fileio::readBoundedFile(path, fileio::kMaxShapesFileBytes,
                                     "shapes file");
  if (!text)
    return keys::usageError(llvm::toString(text.takeError()));
  auto r = parseShapesFile(*text);
  if (!r)
    return keys::usageError(path + ": " + llvm::toString(r.takeError()));
  for (ShapeRequest &req : *r) {
    if (req.program.empty())
      continue;
    llvm::SmallString<256> file(req.program);
    if (llvm::sys::path::is_relative(file)) {
      file = llvm::sys::path::parent_path(path);
      llvm::sys::path::append(file, req.program);
    }
    auto desc = templates::addUserKernelFile(file);
    if (!desc)
      return keys::usageError(path + ": " + llvm::toString(desc.takeError()));
    req.templateName = (*desc)->name;
  }
  return r;
}

std::string autotune::shapesFileText(llvm::ArrayRef<ShapeRequest> requests) {
  std::string s = "[\n";
  for (size_t i = 0; i < requests.size(); ++i) {
    const ShapeRequest &r = requests[i];
    json j{{"shape", r.shape}};
    if (r.program.empty())
      j["template"] = r.templateName;
    else
      j["program"] = r.program;
    if (!r.params.empty())
      j["params"] = r.params;
    s += "  " + j.dump() + (i + 1 < requests.size() ? ",\n" : "\n");
  }
  return s + "]\n";
}

llvm::Expected<Shard> Shard::parse(llvm::StringRef text) {
  auto [a, b] = text.split('/');
  Shard s;
  if (a.getAsInteger(10, s.index) || b.getAsInteger(10, s.count) ||
      s.count == 0 || s.index >= s.count)
    return keys::usageError("--shard '" + text +
                            "': expected i/n with 0 <= i < n");
  return s;
}

std::string Shard::str() const {
  return std::to_string(index) + "/" + std::to_string(count);
}

// ---- Report --------------------------------------------------------------------

std::string autotune::reportRowsJson(llvm::ArrayRef<ReportRow> rows) {
  json list = json::array();
  for (const ReportRow &r : rows)
    list.push_back(json{{"label", r.label},
                        {"shapeClass", r.shapeClass},
                        {"configs", r.configs},
                        {"timed", r.timed},
                        {"cut", r.cut},
                        {"seconds", r.seconds},
                        {"winner", r.winner},
                        {"winnerUs", r.winnerUs},
                        {"defaultConfig", r.defaultConfig},
                        {"defaultUs", r.defaultUs},
                        {"status", r.status}});
  return list.dump(2) + "\n";
}

llvm::Expected<std::vector<ReportRow>>
autotune::parseReportRowsJson(llvm::StringRef text) {
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded() || !root.is_array())
    return keys::usageError("report part: expected a JSON list");
  std::vector<ReportRow> rows;
  try {
    for (const json &j : root) {
      ReportRow r;
      r.label = j.at("label").get<std::string>();
      r.shapeClass = j.at("shapeClass").get<std::string>();
      r.configs = j.at("configs").get<size_t>();
      r.timed = j.at("timed").get<size_t>();
      r.cut = j.at("cut").get<size_t>();
      r.seconds = j.at("seconds").get<double>();
      r.winner = j.at("winner").get<std::string>();
      r.winnerUs = j.at("winnerUs").get<double>();
      r.defaultConfig = j.at("defaultConfig").get<std::string>();
      r.defaultUs = j.at("defaultUs").get<double>();
      r.status = j.at("status").get<std::string>();
      rows.push_back(std::move(r));
    }
  } catch (const json::exception &e) {
    return keys::usageError(llvm::Twine("report part: ") + e.what());
  }
  return rows;
}

namespace {

std::vector<std::vector<std::string>> cells(llvm::ArrayRef<ReportRow> rows) {
  std::vector<std::vector<std::string>> out;
  out.push_back({"shape", "configs", "tuning s", "winner", "winner us",
                 "default", "default us", "speed-up", "status"});
  for (const ReportRow &r : rows) {
    auto us = [](double v) {
      return v > 0 ? llvm::formatv("{0:f2}", v).str() : std::string("-");
    };
    out.push_back(
        {r.label,
         llvm::formatv("{0} ({1} cut)", r.timed, r.cut).str() +
             (r.timed != r.configs ? llvm::formatv(" of {0}", r.configs).str()
                                   : std::string()),
         llvm::formatv("{0:f1}", r.seconds).str(),
         r.winner.empty() ? "-" : r.winner, us(r.winnerUs),
         r.defaultConfig.empty() ? "-" : r.defaultConfig, us(r.defaultUs),
         r.speedup() > 0 ? llvm::formatv("{0:f2}x", r.speedup()).str()
                         : std::string("-"),
         r.status});
  }
  return out;
}

} // namespace

std::string autotune::formatReportTable(llvm::ArrayRef<ReportRow> rows) {
  auto c = cells(rows);
  std::vector<size_t> width(c[0].size(), 0);
  for (const auto &row : c)
    for (size_t i = 0; i < row.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  std::string s;
  for (const auto &row : c) {
    for (size_t i = 0; i < row.size(); ++i) {
      s += row[i];
      if (i + 1 < row.size())
        s += std::string(width[i] - row[i].size() + 2, ' ');
    }
    s += "\n";
  }
  return s;
}

std::string autotune::formatReportMarkdown(llvm::ArrayRef<ReportRow> rows,
                                           llvm::StringRef title) {
  auto c = cells(rows);
  std::string s = "# " + title.str() + "\n\n";
  for (size_t r = 0; r < c.size(); ++r) {
    s += "|";
    for (const std::string &cell : c[r])
      s += " " + cell + " |";
    s += "\n";
    if (r == 0) {
      s += "|";
      for (size_t i = 0; i < c[0].size(); ++i)
        s += (i == 0 || i == 3 || i == 5 || i == 8) ? "---|" : "--:|";
      s += "\n";
    }
  }
  return s;
}
