#!/usr/bin/env bash
# CTest fixture: build the wheel from LIB with scripts/build-wheel.sh, then
# install it into a fresh venv under WORK with pip and no network.
# usage: install_wheel.sh SOURCE_DIR LIB WORK PYTHON
set -euo pipefail
src=$1 lib=$2 work=$3 py=$4
rm -rf "$work"
mkdir -p "$work"
bash "$src/scripts/build-wheel.sh" --lib "$lib" --out "$work/dist"
whl=$(ls "$work"/dist/bitfold-*.whl)
"$py" -m zipfile -l "$whl"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$whl"
# Imports from the venv, outside the source tree, with no BITFOLD_LIB.
cd "$work"
# One version: the package metadata's is the library's (both CMake's).
env -u BITFOLD_LIB -u PYTHONPATH "$work/venv/bin/python" -c '
import importlib.metadata, sys, bitfold, bitfold._lib as L
assert "torch" not in sys.modules, "import bitfold pulled torch in"
print("bitfold", bitfold.version(), "from", L.load().bitfold_path)
assert L.load().bitfold_path.startswith(sys.prefix), "library not the packaged one"
assert importlib.metadata.version("bitfold") == bitfold.version(), "two versions"
'
