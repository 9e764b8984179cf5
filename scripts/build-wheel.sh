#!/usr/bin/env bash
# Builds the Python wheel dist/bitfold-<version>-py3-none-<plat>.whl: the
# pure-Python package python/bitfold plus libbitfold.so inside it
# (bitfold/lib/), found at import without environment variables.
#   scripts/build-wheel.sh                 the release library: build-release/
#                                          (scripts/package-release.sh builds it;
#                                          LLVM/MLIR static, for machines without
#                                          LLVM such as the H200 one)
#   scripts/build-wheel.sh --lib PATH      another libbitfold.so (CI: the dev
#                                          build's, which needs the system's LLVM)
#   --out DIR                              where the wheel goes (default dist/)
# Platform tag: manylinux_2_<N>_<arch>, N the newest GLIBC_2.N symbol version
# the library needs (so pip refuses it where glibc is older); py3-none since
# nothing in it is a Python extension.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${BITFOLD_RELEASE_BUILD_DIR:-$root/build-release}/runtime/libbitfold.so
out=$root/dist
while (($#)); do
  case $1 in
    --lib) lib=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "build-wheel: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ ! -f $lib ]]; then
  echo "build-wheel: $lib not found (run scripts/package-release.sh, or pass --lib)" >&2
  exit 1
fi
lib=$(readlink -f "$lib")
version=$(sed -n 's/^project(bitfold VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
arch=$(uname -m)
# The version names the library's symbols need sit in its .dynstr; read them
# with Python so binutils is not needed (a GPU host builds it too).
read -r glibc glibcxx < <(python3 - "$lib" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
g = [int(m) for m in re.findall(rb"GLIBC_2\.([0-9]+)\x00", data)]
x = sorted({m.decode() for m in re.findall(rb"(GLIBCXX_[0-9.]+)\x00", data)},
           key=lambda v: [int(p) for p in v[8:].split(".") if p])
print(max(g, default=17), x[-1] if x else "")
PY
)
plat=manylinux_2_${glibc}_$arch
echo "build-wheel: $lib needs GLIBC_2.$glibc${glibcxx:+, $glibcxx} -> $plat" >&2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$lib" "$stage/libbitfold.so"
strip --strip-unneeded "$stage/libbitfold.so" 2>/dev/null || true
python3 "$root/python/make_wheel.py" --lib "$stage/libbitfold.so" --version "$version" \
  --plat "$plat" --out "$out" --header "$root/runtime/bitfold.h"
