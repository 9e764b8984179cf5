#!/usr/bin/env bash
# Configures and builds bitfold (dev flavour) into build/ after installing
# the dependencies. Usage: scripts/build.sh [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=${BITFOLD_BUILD_DIR:-$root/build}
if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
ninja -C "$build" -j"$(nproc)"
