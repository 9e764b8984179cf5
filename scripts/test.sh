#!/usr/bin/env bash
# Sets up and runs every test: builds (scripts/build.sh), then CTest. GPU
# tests (tests/gpu, pytest) need a GPU and run through scripts/gpu-suite.sh;
# here they are reported as skipped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
build=${BITFOLD_BUILD_DIR:-$root/build}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPU present: run scripts/gpu-suite.sh for the PyTorch oracle tests."
else
  echo "SKIPPED: GPU oracle tests (tests/gpu/*.py): no GPU on this machine."
fi
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure
