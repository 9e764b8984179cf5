#!/usr/bin/env bash
# Prints one line per stock template variant x seed shape x legal TileConfig:
#   <template> <params> <shape> <config> <sha256 of the PTX>
# (config "r1.t128.v8.p1" is sm_90 without PDL; ":sm_80", ":sm_100" and
# ":sm_90:pdl" rows are the default config under those options). Run it on
# two commits and diff the lists: empty means byte-identical PTX.
# Usage: scripts/ptx-hashes.sh [--mask-kernel-hash] [--drop-line TEXT]... [TEMPLATE] > list.txt
#   --mask-kernel-hash: hash the PTX with the kernel hash in entry names
#   masked, for changes that alter only the canonical text.
#   --drop-line TEXT: lines equal to TEXT removed before hashing (a change
#   that adds one directive, e.g. ".minnctapersm 1", and nothing else).
#   BITFOLD_BUILD_DIR (default build/) is built first (target ptx_hashes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BITFOLD_BUILD_DIR:-$root/build}
ninja -C "$build" -j2 ptx_hashes >&2
echo "# scripts/ptx-hashes.sh $*"
"$build/tests/codegen/ptx_hashes" "$@"
