//===- templates/Registry.cpp - Kernels by name ---------------------------===//

#include "templates/Registry.h"

#include "keys/Errors.h"

#include "dsl/Folds.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>

using namespace bitfold;
using namespace bitfold::templates;

llvm::Expected<DType> templates::parseDType(llvm::StringRef t) {
  t = t.trim();
  if (t == "bf16" || t == "bfloat16")
    return DType::BF16;
  if (t == "f16" || t == "fp16" || t == "float16" || t == "half")
    return DType::F16;
  if (t == "f32" || t == "fp32" || t == "float32" || t == "float")
    return DType::F32;
  return keys::usageError("'" + t + "' is not a dtype (bf16, f16, f32)");
}

// ---- Parameters ------------------------------------------------------------

std::string ParamSpec::allowedText() const {
  switch (kind) {
  case Kind::DType:
    return "bf16|f16|f32";
  case Kind::Flag:
    return "0|1";
  case Kind::Choice:
    return llvm::join(choices, "|");
  }
  return "";
}

/// `value` in canonical text, or an error saying what was expected.
static llvm::Expected<std::string> canonical(const ParamSpec &p,
                                             llvm::StringRef value) {
  auto bad = [&] {
    if (p.kind == ParamSpec::Kind::DType)
      return keys::usageError(p.name + "='" + value +
                              "' is not a dtype (bf16, f16, f32)");
    std::vector<std::string> allowed =
        p.kind == ParamSpec::Kind::Flag ? std::vector<std::string>{"0", "1"}
                                        : p.choices;
    std::string list = allowed.back();
    if (allowed.size() > 1)
      list = llvm::join(llvm::ArrayRef(allowed).drop_back(), ", ") + " or " +
             list;
    return keys::usageError(p.name + "='" + value + "' is not " + list);
  };
  switch (p.kind) {
  case ParamSpec::Kind::DType: {
    auto t = parseDType(value);
    if (!t) {
      llvm::consumeError(t.takeError());
      return bad();
    }
    return dsl::dtypeName(*t).str();
  }
  case ParamSpec::Kind::Flag:
    if (value == "1" || value == "true")
      return std::string("1");
    if (value == "0" || value == "false")
      return std::string("0");
    return bad();
  case ParamSpec::Kind::Choice:
    if (llvm::is_contained(p.choices, value))
      return value.str();
    return bad();
  }
  return bad();
}

DType ParamValues::dtype(llvm::StringRef name) const {
  auto t = parseDType(choice(name));
  return t ? *t : (llvm::consumeError(t.takeError()), DType::BF16);
}

bool ParamValues::flag(llvm::StringRef name) const { return choice(name) == "1"; }

llvm::StringRef ParamValues::choice(llvm::StringRef name) const {
  auto it = values.find(name.str());
  return it == values.end() ? llvm::StringRef() : llvm::StringRef(it->second);
}

std::string ParamValues::str() const {
  std::string s;
  for (const auto &[k, v] : values)
    s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

llvm::Expected<ParamValues>
KernelDescriptor::parseParams(llvm::StringRef text) const {
  llvm::SmallVector<llvm::StringRef, 8> items;
  llvm::SplitString(text, items, " ,;\t\n");
  std::vector<std::string> names;
  for (const ParamSpec &p : params)
    names.push_back(p.name);
  std::string allowed = names.empty() ? "none" : llvm::join(names, ", ");
  auto bad = [&](const llvm::Twine &msg) {
    return keys::usageError(name + " parameters '" + text + "': " + msg);
  };
  ParamValues out;
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    if (!item.contains('=') || key.empty() || value.empty())
      return bad("'" + item + "' is not key=value");
    auto spec = llvm::find_if(
        params, [&](const ParamSpec &p) { return p.name == key; });
    if (spec == params.end())
      return bad("unknown parameter '" + key + "' (" + name +
                 " takes: " + allowed + ")");
    if (out.values.count(key.str()))
      return bad("'" + key + "' given twice");
    auto c = canonical(*spec, value);
    if (!c)
      return bad(llvm::toString(c.takeError()));
    out.values[key.str()] = *c;
  }
  for (const ParamSpec &p : params)
    if (!out.values.count(p.name) && p.defaultFrom.empty())
      out.values[p.name] = p.defaultValue;
  for (const ParamSpec &p : params)
    if (!out.values.count(p.name))
      out.values[p.name] = out.values[p.defaultFrom];
  return out;
}

std::string KernelDescriptor::paramsHelp() const {
  std::string s;
  for (const ParamSpec &p : params)
    s += llvm::formatv("    {0}={1}  {2} (default {3})\n", p.name,
                       p.allowedText(), p.help,
                       p.defaultFrom.empty() ? p.defaultValue
                                             : p.defaultFrom + "'s");
  return s;
}

llvm::Expected<KernelDefRef>
KernelDescriptor::signature(const ParamValues &values) const {
  return build(values, 0);
}

int64_t KernelDescriptor::rowClass(const ParamValues &params,
                                   int64_t rows) const {
  if (!buildForRows)
    return 0;
  rows = std::max<int64_t>(rows, 1);
  return classifyRows ? classifyRows(params, rows)
                      : dsl::folds::aten_reduce_row_class(rows);
}

llvm::Expected<KernelDefRef>
KernelDescriptor::definition(const ParamValues &values, int64_t cols,
                             int64_t rows) const {
  // rows <= 0: the class of every large row count.
  if (buildForRows)
    return buildForRows(values, cols,
                        rowClass(values, rows > 0 ? rows : int64_t(1) << 40));
  return build(values, cols);
}

KernelDescriptor templates::userKernel(KernelDefRef def, std::string summary,
                                       bool bitExact) {
  KernelDescriptor d;
  d.name = def ? def->name : "";
  d.summary = std::move(summary);
  d.bitExact = bitExact;
  if (def)
    d.build = [def](const ParamValues &, int64_t) { return def; };
  return d;
}

// ---- Registry --------------------------------------------------------------

static llvm::Error checkDescriptor(const KernelDescriptor &d) {
  if (d.name.empty() || !d.build)
    return keys::usageError("a kernel needs a name and a builder");
  std::set<std::string> seen;
  for (const ParamSpec &p : d.params) {
    if (!seen.insert(p.name).second)
      return keys::usageError(d.name + ": parameter '" + p.name + "' twice");
    if (!p.defaultFrom.empty())
      continue;
    auto c = canonical(p, p.defaultValue);
    if (!c)
      return keys::usageError(d.name + ": default " +
                              llvm::toString(c.takeError()));
  }
  return llvm::Error::success();
}

Registry &Registry::global() {
  // Never destroyed: names handed out (bitfold_template_name) stay valid
  // through static destruction.
  static Registry *r = [] {
    auto *reg = new Registry;
    for (KernelDescriptor &d : stockKernels())
      llvm::cantFail(reg->add(std::move(d)));
    return reg;
  }();
  return *r;
}

llvm::Error Registry::add(KernelDescriptor desc) {
  if (llvm::Error e = checkDescriptor(desc))
    return e;
  std::lock_guard<std::mutex> lock(mu);
  for (const DescriptorRef &d : entries)
    if (d->name == desc.name)
      return keys::usageError("a kernel named '" + desc.name +
                              "' is already registered");
  entries.push_back(std::make_shared<const KernelDescriptor>(std::move(desc)));
  return llvm::Error::success();
}

DescriptorRef Registry::find(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mu);
  for (const DescriptorRef &d : entries)
    if (d->name == name)
      return d;
  return nullptr;
}

llvm::Expected<DescriptorRef> Registry::lookup(llvm::StringRef name) const {
  if (DescriptorRef d = find(name))
    return d;
  std::string names;
  for (const DescriptorRef &d : all())
    names += (names.empty() ? "" : ", ") + d->name;
  return keys::usageError("no template '" + name + "' (templates: " + names +
                          ")");
}

std::vector<DescriptorRef> Registry::all() const {
  std::lock_guard<std::mutex> lock(mu);
  return entries;
}
