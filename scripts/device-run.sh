#!/usr/bin/env bash
# Runs ON THE GPU MACHINE (through the `device` tool, carry: ["pkg", ".whl"]).
# Unpacks the release package, then runs the requested steps, writing logs
# and summaries under $OUT:
#   version   bitfold version                          -> $OUT/version.txt
#   kernels   scripts/run-kernels.sh (main job)         -> $OUT/kernels.txt
#   suite     the pytest oracle suite (tests/gpu)       -> $OUT/gpu-suite.json, gpu-suite.log
#   any other word is passed to bash as a command after the package is set up.
# Usage: bash scripts/device-run.sh version kernels suite
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/bitfold-out}
mkdir -p "$OUT" /tmp/bf
tar xJf "$root/pkg/bitfold-release.tar.xz" -C /tmp/bf || exit 1
export PATH=/tmp/bf/bin:$PATH BITFOLD_LIB=/tmp/bf/lib/libbitfold.so
export BITFOLD_CACHE_DIR=/tmp/bf-cache PYTHONUNBUFFERED=1
if ! python3 -c 'import pytest' 2>/dev/null && ls "$root"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site "$root"/.whl/*.whl && export PYTHONPATH=/tmp/site
fi
status=0
for step in "$@"; do
  case $step in
    version) bitfold version | tee "$OUT/version.txt" || status=1 ;;
    kernels) bash "$root/scripts/run-kernels.sh" /tmp/bf/bin/bitfold 2>&1 | tee "$OUT/kernels.txt" || status=1 ;;
    suite)
      BITFOLD_GPU_SUMMARY=$OUT/gpu-suite.json python3 -m pytest -q -p no:cacheprovider \
        "$root/tests/gpu" -rs 2>&1 | tee "$OUT/gpu-suite.log" | tail -25 || status=1 ;;
    *) bash -c "$step" || status=1 ;;
  esac
done
exit $status
