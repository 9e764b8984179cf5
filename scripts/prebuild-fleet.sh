#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), the kernel cache a fleet ships:
# every seed shape (bench/shapes/seed-shapes.json) for each arch, with the
# tune DB's winners where it has them and the default configs elsewhere,
# into pkg/prebuilt-cache (git-ignored; docs/deployment.md). The GPU side
# of the check is `scripts/gpu-run.sh --out DIR prebuilt` on a GPU host
# (from a copy of the checkout with pkg/): a fresh process on the GPU,
# pointed at that directory, must compile nothing.
#
# Usage: scripts/prebuild-fleet.sh
#   ARCHS    archs to build for           (default sm_80,sm_90,sm_100)
#   TUNE_DB  tune DB whose winners to use (default: none, default configs)
#   SHAPES   shapes file                  (default bench/shapes/seed-shapes.json)
#   BITFOLD  the bitfold binary           (default build/tools/bitfold)
#   JOBS     parallel compiles            (default: one per hardware thread)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bitfold=${BITFOLD:-$root/build/tools/bitfold}
shapes=${SHAPES:-$root/bench/shapes/seed-shapes.json}
out=$root/pkg/prebuilt-cache
args=(prebuild --shapes "$shapes" --arch "${ARCHS:-sm_80,sm_90,sm_100}"
      --cache-dir "$out")
[[ -n ${TUNE_DB:-} ]] && args+=(--tune-db "$TUNE_DB")
[[ -n ${JOBS:-} ]] && args+=(--jobs "$JOBS")
rm -rf "$out" "$root/pkg/prebuilt-tune-db.json"
mkdir -p "$out"
"$bitfold" "${args[@]}"
# Next to the directory (not in it): the shapes the GPU side launches, the
# tune DB its launches must use (the one that chose the configs) and the
# build that keyed them.
cp "$shapes" "$root/pkg/prebuilt-shapes.json"
[[ -n ${TUNE_DB:-} ]] && cp "$TUNE_DB" "$root/pkg/prebuilt-tune-db.json"
"$bitfold" version > "$root/pkg/prebuilt-built-by.txt" 2>&1 || true
"$bitfold" cache stats --dir "$out"
echo "prebuild-fleet: $out ($(du -sh "$out" | cut -f1)); check it on a GPU with" \
     "scripts/gpu-run.sh --out DIR prebuilt on the GPU host"
