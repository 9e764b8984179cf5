#!/usr/bin/env bash
# The main job: builds bitfold and runs the bundled kernels at their seed
# shapes. On a machine with a GPU each kernel is compiled, run and checked
# against the CPU interpreter; without one, each kernel runs in the CPU
# interpreter (checked: every element written) and is compiled to PTX/cubin.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
build=${BITFOLD_BUILD_DIR:-$root/build}
exec "$root/scripts/run-kernels.sh" "$build/tools/bitfold"
