//===- tools/NpyDump.cpp - interp --dump: operands as .npy files ----------===//
//
// NumPy's .npy format, version 1.0: the magic, a little-endian header
// length, a Python dict literal padded to a multiple of 64 bytes, then the
// raw C-order data. numpy has no bfloat16 or float8, so those operands are
// written as their bits, uint16 and uint8 (torch:
// `torch.from_numpy(a).view(torch.bfloat16)`).
//
//===----------------------------------------------------------------------===//

#include "tools/NpyDump.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace bitfold;

static llvm::StringRef npyDescr(dsl::DType t) {
  switch (t) {
  case dsl::DType::F32:
    return "<f4";
  case dsl::DType::F16:
    return "<f2";
  case dsl::DType::BF16:
    return "<u2";
  case dsl::DType::I8:
    return "|i1";
  case dsl::DType::I32:
    return "<i4";
  default: // float8 as their bits
    return "|u1";
  }
}

static llvm::Error writeNpy(llvm::StringRef path, llvm::StringRef descr,
                            int64_t rows, int64_t cols,
                            const std::vector<uint8_t> &data) {
  std::string dict = llvm::formatv("{{'descr': '{0}', 'fortran_order': False, "
                                   "'shape': ({1}, {2}), }",
                                   descr, rows, cols);
  // magic (6) + version (2) + length (2) + dict + '\n', to a multiple of 64.
  size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return llvm::createStringError(ec, "cannot write '" + path +
                                           "': " + ec.message());
  os << "\x93NUMPY" << char(1) << char(0) << char(dict.size() & 0xFF)
     << char(dict.size() >> 8) << dict;
  os.write(reinterpret_cast<const char *>(data.data()), data.size());
  os.close();
  if (os.has_error())
    return llvm::createStringError(os.error(), "cannot write '" + path + "'");
  return llvm::Error::success();
}

llvm::Error tools::dumpOperandsAsNpy(const dsl::KernelDef &def,
                                     const templates::HostProblem &problem,
                                     llvm::StringRef dir) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return llvm::createStringError(ec, "cannot create '" + dir +
                                           "': " + ec.message());
  for (int g = 0; g < def.groups; ++g)
    for (size_t i = 0; i < def.operands.size(); ++i) {
      const dsl::OperandDecl &o = def.operands[i];
      std::string name = def.groups > 1
                             ? llvm::formatv("g{0}.{1}.npy", g, o.name).str()
                             : o.name + ".npy";
      llvm::SmallString<256> path(dir);
      llvm::sys::path::append(path, name);
      if (llvm::Error e =
              writeNpy(path, npyDescr(o.dtype), problem.rows(g, int(i)),
                       dsl::storedCols(o, problem.shape.cols,
                                       problem.binding.dims),
                       problem.storage[g][i]))
        return e;
    }
  return llvm::Error::success();
}
