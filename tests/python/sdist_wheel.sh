#!/usr/bin/env bash
# CTest fixture: the sdist (scikit-build-core, pyproject.toml) is made from
# the checkout, unpacked, and built into a wheel from the unpacked tree
# alone (CMake compiles libbitfold.so against the installed LLVM/MLIR 22
# and CUDA toolkit); the wheel goes into a fresh venv, whose package
# metadata, library and CMake project() must give one version.
# scikit-build-core comes from PyPI: exit 77 (skipped) without network.
# usage: sdist_wheel.sh SOURCE_DIR WORK PYTHON
set -euo pipefail
src=$1 work=$2 py=$3
backend=$work/backend-venv
if [[ ! -x $backend/bin/python ]] || ! "$backend/bin/python" -c 'import scikit_build_core' 2>/dev/null; then
  "$py" -m venv "$backend"
  if ! "$backend/bin/pip" install -q --disable-pip-version-check 'scikit-build-core>=0.10'; then
    echo "SKIPPED: scikit-build-core not installable (no network?)"; exit 77
  fi
fi
rm -rf "$work/dist" "$work/venv" && mkdir -p "$work/dist" "$work/src"
(cd "$src" && "$backend/bin/python" -c '
import sys
from scikit_build_core.build import build_sdist
print(build_sdist(sys.argv[1]))' "$work/dist")
sdist=$(ls "$work"/dist/bitfold-*.tar.gz)
tree=$work/src/$(basename "$sdist" .tar.gz)
rm -rf "$tree" && tar xzf "$sdist" -C "$work/src"
# Built where a checkout builds (tree/build), so ccache finds the objects.
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$backend/bin/pip" wheel -q --no-build-isolation --no-deps --disable-pip-version-check \
  -w "$work/dist" "$tree" -Cbuild-dir="$tree/build"
whl=$(ls "$work"/dist/bitfold-*.whl)
echo "sdist wheel: $(basename "$whl")"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$whl"
cd "$work"
env -u BITFOLD_LIB -u PYTHONPATH "$work/venv/bin/python" - "$src/CMakeLists.txt" <<'PY'
import importlib.metadata, re, sys
import bitfold, bitfold._lib as L
cmake = re.search(r"project\(bitfold VERSION ([0-9.]+)", open(sys.argv[1]).read()).group(1)
meta, lib = importlib.metadata.version("bitfold"), bitfold.version()
print(f"CMake {cmake}, package metadata {meta}, library {lib}, from {L.load().bitfold_path}")
assert L.load().bitfold_path.startswith(sys.prefix), "library not the packaged one"
assert cmake == meta == lib, "three versions"
PY
