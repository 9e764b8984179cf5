#!/usr/bin/env bash
# Builds the statically linked release (MLIR/LLVM from their archives, see
# docs/design.md) and packs what a GPU host needs into pkg/ (git-ignored):
#   pkg/bitfold-release.tar.xz   bin/bitfold, bin/launch_latency,
#                                lib/libbitfold.so (+ .so.0 link),
#                                lib/libbitfold-ptxc.so.0 (the PTX
#                                Compiler API, about 10 MiB of the xz),
#                                lib/_bitfold_fast.abi3.so (bitfold.torch's
#                                warm call in C), include/
#                                (BITFOLD_PACKAGE_COMPILE_LATENCY=1: also
#                                bin/compile_latency, another static LLVM,
#                                about 15 MiB more; BITFOLD_PACKAGE_CLI=0:
#                                without bin/bitfold, about 15 MiB less, for
#                                a host that runs only the compile-latency
#                                step or the Python package)
# A GPU host needs no LLVM (and may lack a zstd command), so the package is
# self-contained and compressed with xz. We keep it under 60 MiB so it stays
# one easy file to copy. On the GPU host:
#   scripts/gpu-run.sh --out results version      (or by hand:
#   mkdir -p /tmp/bf && tar xJf pkg/bitfold-release.tar.xz -C /tmp/bf &&
#   /tmp/bf/bin/bitfold version)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=${BITFOLD_RELEASE_BUILD_DIR:-$root/build-release}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBITFOLD_STATIC_LLVM=ON -DBITFOLD_BUILD_TESTS=OFF >/dev/null
extra=()
[[ ${BITFOLD_PACKAGE_COMPILE_LATENCY:-0} == 1 ]] && extra=(compile_latency)
# bitfold_glibc_check fails the build when libbitfold.so names a glibc
# newer than 2.28 or a library outside the manylinux allow-list.
ninja -C "$build" -j"$(nproc)" bitfold launch_latency "${extra[@]}" bitfold_shared \
  bitfold_glibc_check $(ninja -C "$build" -t targets all | grep -q '^bitfold_fast:' && echo bitfold_fast)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/include"
[[ ${BITFOLD_PACKAGE_CLI:-1} == 0 ]] || cp "$build/tools/bitfold" "$stage/bin/"
# Links libbitfold.so.0 (its SONAME), found through RUNPATH $ORIGIN/../lib.
cp "$build/bench/launch_latency/launch_latency" "$stage/bin/"
[[ ${#extra[@]} -gt 0 ]] && cp "$build/bench/compile_latency/compile_latency" "$stage/bin/"
if [[ -f $build/runtime/libbitfold.so ]]; then
  cp "$build/runtime/libbitfold.so" "$stage/lib/"
  ln -s libbitfold.so "$stage/lib/libbitfold.so.0"
  cp "$root/runtime/bitfold.h" "$stage/include/" 2>/dev/null || true
fi
# The PTX Compiler API (codegen's default cubin tool; libbitfold.so and
# bin/bitfold find it next to themselves or in ../lib), when the build has it.
ptxc=$build/runtime/libbitfold-ptxc.so.0
if [[ -f $ptxc ]]; then
  cp "$(readlink -f "$ptxc")" "$stage/lib/libbitfold-ptxc.so.0"
  python3 "$root/release/check-glibc.py" "$stage/lib/libbitfold-ptxc.so.0" --max 2.28
fi
fast=$build/python/_bitfold_fast.abi3.so
if [[ -f $fast ]]; then cp "$fast" "$stage/lib/"; fi
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
# The binaries must need nothing a GPU host may lack.
for f in "$stage"/bin/* "$stage"/lib/*; do
  [[ -f $f ]] || continue
  if ldd "$f" | grep -q -E 'libLLVM|libMLIR|not found'; then
    echo "package-release: $f links a library a GPU host may lack:" >&2
    ldd "$f" >&2
    exit 1
  fi
done
mkdir -p "$root/pkg"
tar cJf "$root/pkg/bitfold-release.tar.xz" -C "$stage" .
size=$(stat -c %s "$root/pkg/bitfold-release.tar.xz")
echo "package-release: pkg/bitfold-release.tar.xz $((size / 1024 / 1024)) MiB"
if ((size > 60 * 1024 * 1024)); then
  echo "package-release: over our 60 MiB package budget" >&2
  exit 1
fi
