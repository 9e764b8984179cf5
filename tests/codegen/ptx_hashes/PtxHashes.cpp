//===- tests/codegen/ptx_hashes/PtxHashes.cpp - One PTX hash per kernel ---===//
//
// Prints `<template> <params> <shape> <config> <sha256 of PTX>` for every
// stock template variant, at every seed shape, under every legal TileConfig
// (sm_90, no PDL), plus the default config for sm_80, sm_100 and sm_90 with
// PDL. Two runs on two commits must print the same lines: the proof that a
// refactoring kept the generated code byte-identical
// (scripts/ptx-hashes.sh). Lines are printed in a stable order.
//
// Only `variants` and `specialise` know how templates are named and
// specialised; adapt those two when the template registry changes.
//
//===----------------------------------------------------------------------===//

#include "codegen/Codegen.h"
#include "tools/ShapedTemplate.h"
#include "templates/Problem.h"
#include "templates/Registry.h"
#include "templates/Templates.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

using namespace bitfold;

namespace {

struct Variant {
  std::string params; ///< stable text, e.g. "dtype=bf16,bias=f32,residual=1".
  tools::TemplateRequest request;
};

/// Every parameter combination a stock template accepts.
std::vector<Variant> variants(llvm::StringRef tmpl) {
  std::vector<Variant> out;
  for (dsl::DType dt : {dsl::DType::BF16, dsl::DType::F16, dsl::DType::F32}) {
    Variant v;
    v.request.name = tmpl.str();
    v.request.dtype = dt;
    v.request.biasDtype = dt;
    v.params = "dtype=" + dsl::dtypeName(dt).str();
    if (tmpl == "conv_bias") {
      // The bias is in x's dtype or f32.
      std::vector<dsl::DType> biases = {dt};
      if (dt != dsl::DType::F32)
        biases.push_back(dsl::DType::F32);
      for (dsl::DType bias : biases)
        for (bool residual : {false, true}) {
          Variant c = v;
          c.request.biasDtype = bias;
          c.request.residual = residual;
          c.params += ",bias=" + dsl::dtypeName(bias).str() +
                      ",residual=" + (residual ? "1" : "0");
          out.push_back(c);
        }
      continue;
    }
    if (tmpl == "residual_gate") {
      for (const char *gate : {"full", "per_batch", "global"}) {
        Variant c = v;
        c.request.gate = gate;
        c.params += std::string(",gate=") + gate;
        out.push_back(c);
      }
      continue;
    }
    out.push_back(v);
  }
  return out;
}

/// The template at one seed shape, as the CLI and runtime specialise it.
llvm::Expected<tools::ShapedTemplate> specialise(const Variant &v,
                                                   llvm::StringRef shape) {
  tools::TemplateRequest req = v.request;
  llvm::SmallVector<llvm::StringRef, 6> parts;
  llvm::StringRef(shape).split(parts, ',');
  for (llvm::StringRef p : parts) {
    int64_t d = 0;
    if (p.getAsInteger(10, d))
      return llvm::createStringError("bad seed shape '" + shape + "'");
    req.tensorShape.push_back(d);
  }
  return tools::shapeTemplate(req);
}

/// --mask-kernel-hash: the kernel hash inside entry names replaced by
/// "HASH", so that a change of the canonical text alone (e.g. a scalar
/// default, printed since the registry declares them) leaves the list equal
/// when the generated code is.
bool maskKernelHash = false;
/// --drop-line TEXT (repeatable): lines equal to TEXT removed before
/// hashing, for a change that adds one directive and nothing else.
std::vector<std::string> dropLines;

std::string sha256(llvm::StringRef text) {
  std::array<uint8_t, 32> h = llvm::SHA256::hash(
      llvm::ArrayRef<uint8_t>(text.bytes_begin(), text.bytes_end()));
  return llvm::toHex(h, /*LowerCase=*/true);
}

/// One line; errors are printed in place of the hash so they compare too.
void emit(llvm::raw_ostream &os, llvm::StringRef prefix,
          const tools::ShapedTemplate &st, const keys::TileConfig &cfg,
          const keys::CompileOptions &opts, llvm::StringRef suffix) {
  os << prefix << ' ' << cfg.str() << suffix << ' ';
  llvm::Expected<codegen::CompiledKernel> k =
      codegen::compile(*st.def, st.shape, cfg, opts);
  if (!k) {
    std::string msg = llvm::toString(k.takeError());
    os << "error:" << llvm::StringRef(msg).split('\n').first << '\n';
    return;
  }
  std::string ptx = k->ptx;
  if (maskKernelHash) {
    const std::string h = st.def->hash.substr(0, 12);
    for (size_t at = ptx.find(h); at != std::string::npos; at = ptx.find(h, at))
      ptx.replace(at, h.size(), "HASH");
  }
  for (const std::string &line : dropLines)
    for (size_t at = ptx.find("\n" + line + "\n"); at != std::string::npos;
         at = ptx.find("\n" + line + "\n", at))
      ptx.erase(at, line.size() + 1);
  os << sha256(ptx) << '\n';
}

} // namespace

int main(int argc, char **argv) {
  int first = 1;
  for (;;) {
    llvm::StringRef a = argc > first ? argv[first] : "";
    if (a == "--mask-kernel-hash") {
      maskKernelHash = true;
      first += 1;
    } else if (a == "--drop-line" && argc > first + 1) {
      dropLines.push_back(argv[first + 1]);
      first += 2;
    } else {
      break;
    }
  }
  llvm::StringRef only = argc > first ? argv[first] : "";
  llvm::raw_ostream &os = llvm::outs();
  for (const templates::DescriptorRef &t :
       templates::Registry::global().all()) {
    if (!only.empty() && only != t->name)
      continue;
    for (const Variant &v : variants(t->name))
      for (const std::string &shape : t->seedShapes) {
        std::string prefix = t->name + ' ' + v.params + ' ' + shape;
        llvm::Expected<tools::ShapedTemplate> st = specialise(v, shape);
        if (!st) {
          os << prefix << " - error:"
             << llvm::StringRef(llvm::toString(st.takeError())).split('\n').first
             << '\n';
          continue;
        }
        keys::CompileOptions opts;
        opts.emitCubin = false;
        for (const keys::TileConfig &c :
             codegen::enumerateConfigs(*st->def, st->shape))
          emit(os, prefix, *st, c, opts, "");
        keys::TileConfig def = codegen::defaultConfig(*st->def, st->shape);
        for (const char *arch : {"sm_80", "sm_100"}) {
          keys::CompileOptions o = opts;
          o.arch = arch;
          emit(os, prefix, *st, def, o, std::string(":") + arch);
        }
        keys::CompileOptions pdl = opts;
        pdl.gridDependencyControl = true;
        emit(os, prefix, *st, def, pdl, ":sm_90:pdl");
        os.flush();
      }
  }
  return 0;
}
