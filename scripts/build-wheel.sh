#!/usr/bin/env bash
# Builds the Python wheel dist/bitfold-<version>-py3-none-<plat>.whl from a
# built libbitfold.so: the pure-Python package python/bitfold plus the
# library inside it (bitfold/lib/), found at import without environment
# variables. Offline: standard library only (python/make_wheel.py; the
# package's metadata is pyproject.toml's, the version CMakeLists.txt's).
#   scripts/build-wheel.sh                 the release library: build-release/
#                                          (scripts/package-release.sh builds it:
#                                          LLVM/MLIR, libstdc++, zlib, zstd static,
#                                          glibc 2.28 symbol versions)
#   scripts/build-wheel.sh --lib PATH      another libbitfold.so (CI: the dev
#                                          build's, which needs the system's LLVM)
#   --out DIR                              where the wheel goes (default dist/)
# Platform tag, from what the library needs (docs/wheel.md):
#   manylinux_2_<N>_<arch>  when it needs only the manylinux allow-list (libc,
#                           libm, libpthread, libdl, librt, the loader) and no
#                           libstdc++/libgcc_s; N = the newest GLIBC_2.N it
#                           names, at least 28 (the release build's target)
#   linux_<arch>            otherwise (a wheel for this machine only, such as
#                           the dev build's: pip installs it here, PyPI
#                           would refuse it)
# py3-none: its one extension, bitfold.torch's warm call in C
# (_bitfold_fast.abi3.so, CPython's limited API 3.10: --fast, else the
# library's build's python/ folder where it is there), is optional and
# loaded by path, so every Python 3 imports the package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${BITFOLD_RELEASE_BUILD_DIR:-$root/build-release}/runtime/libbitfold.so
out=$root/dist
fast=
while (($#)); do
  case $1 in
    --lib) lib=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --fast) fast=$2; shift 2 ;;
    *) echo "build-wheel: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ ! -f $lib ]]; then
  echo "build-wheel: $lib not found (run scripts/package-release.sh, or pass --lib)" >&2
  exit 1
fi
lib=$(readlink -f "$lib")
if [[ -z $fast ]]; then  # the same build's python/ (lib is <build>/runtime/...)
  fast=$(dirname "$(dirname "$lib")")/python/_bitfold_fast.abi3.so
  [[ -f $fast ]] || fast=
fi
# The PTX Compiler API's library (codegen's default cubin tool), built
# beside libbitfold.so when the build found it; the wheel works without it
# (nvJitLink then).
ptxc=$(dirname "$lib")/libbitfold-ptxc.so.0
[[ -f $ptxc ]] && ptxc=$(readlink -f "$ptxc") || ptxc=
arch=$(uname -m)
# The names of the versions and libraries the libraries need are the strings
# of their .dynstr sections; read them with Python so binutils is not needed.
read -r glibc others < <(python3 - "$lib" $ptxc <<'PY'
import re, struct, sys
def dynstr(path):
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx]
    def name(sec):
        start = names[4] + sec[0]
        return data[start:data.index(b"\0", start)]
    sec = next(s for s in sections if name(s) == b".dynstr")
    return set(data[sec[4]:sec[4] + sec[5]].split(b"\0"))
strings = set().union(*(dynstr(p) for p in sys.argv[1:]))
allowed = {b"libc.so.6", b"libm.so.6", b"libpthread.so.0", b"libdl.so.2",
           b"librt.so.1", b"ld-linux-x86-64.so.2", b"ld-linux-aarch64.so.1"}
glibc = [int(m.group(1)) for s in strings for m in [re.fullmatch(rb"GLIBC_2\.([0-9]+)(\.[0-9]+)?", s)] if m]
bad = sorted(s.decode() for s in strings if re.fullmatch(rb"lib.*\.so[.0-9]*", s)
             and s not in allowed and not s.startswith(b"libbitfold"))
bad += [s.decode() for s in strings if s.startswith((b"GLIBCXX_", b"CXXABI_"))][:1]
print(max(glibc, default=17), ",".join(bad) or "-")
PY
)
if [[ $others == - ]]; then
  plat=manylinux_2_$((glibc > 28 ? glibc : 28))_$arch
else
  plat=linux_$arch
fi
echo "build-wheel: $lib${ptxc:+ and $ptxc}: newest GLIBC_2.$glibc, outside the manylinux allow-list: $others -> $plat" >&2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$lib" "$stage/libbitfold.so"
strip --strip-unneeded "$stage/libbitfold.so" 2>/dev/null || true
if [[ -n $ptxc ]]; then
  cp "$ptxc" "$stage/libbitfold-ptxc.so.0"
  strip --strip-unneeded "$stage/libbitfold-ptxc.so.0" 2>/dev/null || true
  ptxc=$stage/libbitfold-ptxc.so.0
fi
python3 "$root/python/make_wheel.py" --lib "$stage/libbitfold.so" ${fast:+--fast "$fast"} \
  ${ptxc:+--ptxc "$ptxc"} \
  --plat "$plat" --out "$out" --header "$root/runtime/bitfold.h"
