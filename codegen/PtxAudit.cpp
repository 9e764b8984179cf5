//===- codegen/PtxAudit.cpp - Bit-exactness rules on PTX text -------------===//

#include "codegen/PtxAudit.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <regex>
#include <set>

using namespace bitfold;
using namespace bitfold::codegen;

namespace {

/// Instruction lines: (mnemonic split on '.', full line).
template <typename Fn> void forEachInstruction(llvm::StringRef ptx, Fn &&fn) {
  llvm::SmallVector<llvm::StringRef, 0> lines;
  ptx.split(lines, '\n');
  for (llvm::StringRef line : lines) {
    llvm::StringRef l = line.trim();
    if (l.empty() || l.starts_with("//") || l.starts_with(".") ||
        l.starts_with("{") || l.starts_with("}") || l.ends_with(":") ||
        l.starts_with("$"))
      continue;
    if (l.starts_with("@")) // predicate guard
      l = l.split(' ').second.trim();
    llvm::StringRef mnemonic = l.split(' ').first.split('\t').first;
    llvm::SmallVector<llvm::StringRef, 6> parts;
    mnemonic.split(parts, '.');
    fn(parts, l);
  }
}

bool has(llvm::ArrayRef<llvm::StringRef> parts, llvm::StringRef p) {
  return llvm::is_contained(parts.drop_front(), p);
}

bool isFloatType(llvm::StringRef t) {
  return t == "f32" || t == "f64" || t == "f16" || t == "bf16" ||
         t == "f16x2" || t == "bf16x2";
}

/// The first type suffix: the destination type (sub.rn.f32.bf16 is an f32
/// op with a bf16 source, exact widening folded in on sm_100).
llvm::StringRef destType(llvm::ArrayRef<llvm::StringRef> parts) {
  for (llvm::StringRef p : parts.drop_front())
    if (isFloatType(p))
      return p;
  return "";
}

} // namespace

PtxCounts codegen::countPtx(llvm::StringRef ptx) {
  PtxCounts c;
  forEachInstruction(ptx, [&](llvm::ArrayRef<llvm::StringRef> p,
                              llvm::StringRef) {
    ++c.instructions;
    llvm::StringRef op = p[0];
    bool f32 = destType(p) == "f32";
    if (f32 && has(p, "rn")) {
      if (op == "add") ++c.addRn;
      if (op == "sub") ++c.subRn;
      if (op == "mul") ++c.mulRn;
      if (op == "fma") ++c.fmaRn;
    }
    if (op == "fma" && f32 && has(p, "rm"))
      ++c.fmaRm;
    if (op == "cvt" && has(p, "rn") &&
        (destType(p).starts_with("bf16") || destType(p).starts_with("f16")))
      ++c.cvtRnHalf;
    if (op == "shfl") ++c.shuffles;
    if (op == "bar" || op == "barrier") ++c.barriers;
    if ((op == "ld" || op == "st") && has(p, "global") &&
        (has(p, "v2") || has(p, "v4") || has(p, "v8")))
      ++(op == "ld" ? c.vectorLoads : c.vectorStores);
  });
  return c;
}

llvm::Error codegen::auditPtx(const CompiledKernel &k,
                              const PtxAllowances &allow) {
  std::vector<std::string> bad;
  auto violation = [&](llvm::StringRef why, llvm::StringRef line) {
    if (bad.size() < 20)
      bad.push_back((why + ": " + line).str());
  };
  forEachInstruction(k.ptx, [&](llvm::ArrayRef<llvm::StringRef> p,
                                llvm::StringRef line) {
    llvm::StringRef op = p[0];
    bool f32 = destType(p) == "f32";
    bool ftz = has(p, "ftz");
    if (f32 && (op == "add" || op == "sub" || op == "mul") && !has(p, "rn"))
      violation("fp32 add/sub/mul without .rn (contractible)", line);
    if (ftz) {
      bool approx = (op == "rcp" || op == "rsqrt" || op == "ex2") &&
                    has(p, "approx") && f32;
      bool subFtz = op == "sub" && has(p, "rn") && f32 && allow.subFtz;
      if (!approx && !subFtz)
        violation(".ftz the program did not write", line);
    }
    if (op == "div" && f32 && !has(p, "rn"))
      violation("fp32 division that is not div.rn", line);
    if (op == "sqrt" && f32 && !has(p, "rn"))
      violation("fp32 sqrt that is not sqrt.rn", line);
    if (op == "fma" && f32 && !has(p, "rn") &&
        !(has(p, "rm") && allow.expLibdevice))
      violation("fma with a rounding the program did not write", line);
    if (op == "fma" && !f32 && destType(p) != "")
      violation("fma on a type other than f32", line);
    if (op == "cvt" && p.size() >= 3) {
      llvm::StringRef dst = destType(p);
      if ((dst.starts_with("bf16") || dst.starts_with("f16")) &&
          p.back() == "f32" &&
          (!has(p, "rn") || has(p, "relu") || has(p, "sat")))
        violation("conversion to bf16/f16 that is not cvt.rn", line);
    }
    if ((op == "add" || op == "sub" || op == "mul" || op == "fma" ||
         op == "neg" || op == "min" || op == "max") &&
        (destType(p).starts_with("bf16") || destType(p).starts_with("f16"))) {
      bool rewrite = k.ir.narrowArith > 0 && has(p, "rn") && !ftz &&
                     !has(p, "sat") && !has(p, "relu") &&
                     (op == "add" || op == "sub" || op == "mul");
      if (!rewrite)
        violation("half-precision arithmetic the lowering did not write", line);
    }
  });
  PtxCounts c = countPtx(k.ptx);
  if (k.ir.contractionAllowed)
    bad.push_back("the LLVM IR carries fast-math flags or llvm.fmuladd");
  // The backend may remove an fma exactly (dead after instruction
  // selection, or fma(x, 1, y) -> add: x*1 is exact, so one rounding
  // remains), never create one: more fma.rn than the IR had is contraction.
  if (c.fmaRn > k.ir.fmaAfterOpt)
    bad.push_back(llvm::formatv("PTX has {0} fma.rn.f32 but the optimized "
                                "LLVM IR has only {1} llvm.fma calls: the "
                                "backend contracted a mul and an add",
                                c.fmaRn, k.ir.fmaAfterOpt));
  if (k.ir.fmaAfterOpt > k.ir.fmaBeforeOpt)
    bad.push_back(llvm::formatv("the optimizer created fmas: {0} after O3, {1} "
                                "before",
                                k.ir.fmaAfterOpt, k.ir.fmaBeforeOpt));
  if (k.ir.fmaBeforeOpt != k.ir.fmaWritten)
    bad.push_back(llvm::formatv("translated IR has {0} llvm.fma calls; the "
                                "lowering wrote {1}",
                                k.ir.fmaBeforeOpt, k.ir.fmaWritten));
  if (k.ir.fmaWritten == 0 && c.fmaRn + c.fmaRm != 0)
    bad.push_back("a program without fma has fma instructions");
  if (bad.empty())
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("PTX audit of {0} failed:\n  {1}", k.entryName,
                    llvm::join(bad, "\n  ")));
}

PtxAllowances codegen::allowancesOf(const dsl::KernelDef &def) {
  PtxAllowances a;
  dsl::forEachNode(def, [&](const dsl::ExprNode &n) {
    a.subFtz |= n.op == dsl::Op::SubFtz;
    a.expLibdevice |= n.op == dsl::Op::ExpLibdevice;
  });
  return a;
}

PtxasUsage codegen::parsePtxasLog(llvm::StringRef log) {
  PtxasUsage u;
  std::string s = log.str();
  std::smatch m;
  static const std::regex regs("Used ([0-9]+) registers");
  static const std::regex spills(
      "([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  static const std::regex stack("([0-9]+) bytes stack frame");
  if (std::regex_search(s, m, regs))
    u.registers = std::stoi(m[1]);
  for (auto it = std::sregex_iterator(s.begin(), s.end(), spills);
       it != std::sregex_iterator(); ++it)
    u.spillBytes += std::stoll((*it)[1]) + std::stoll((*it)[2]);
  if (std::regex_search(s, m, stack))
    u.stackBytes = std::stoll(m[1]);
  return u;
}
