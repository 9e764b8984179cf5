#!/usr/bin/env bash
# The GPU measurements behind bench/results/2026-11-30-launch-latency.md and
# 2026-11-30-tuned-cache-reuse.md, on a GPU host (the release package
# unpacked by scripts/gpu-run.sh: bitfold and launch_latency on PATH):
#   bash scripts/gpu-run.sh --out DIR version "bash bench/launch_latency/gpu-steps.sh"
# Logs go to $OUT (gpu-run.sh sets it to DIR).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/bitfold-out}
mkdir -p "$OUT"
status=0
step() { echo "\$ $*" | tee -a "$OUT/commands.txt"; }

# 1. Launch latency (twice: the numbers should agree).
for run in 1 2; do
  step launch_latency --json "$OUT/launch-latency-$run.json"
  launch_latency --json "$OUT/launch-latency-$run.json" 2>&1 |
    tee "$OUT/launch-latency-$run.txt" || status=1
done

# 2. Tune two shapes into /tmp/tune (DB + cubins).
rm -rf /tmp/tune
shapes=$root/bench/shapes/tuned-cache-reuse.json
step bitfold tune --shapes "$shapes" --out /tmp/tune --report /tmp/tune/report.md
bitfold tune --shapes "$shapes" --out /tmp/tune --report /tmp/tune/report.md \
  > "$OUT/tune.txt" 2> "$OUT/tune.stderr" || status=1
cat "$OUT/tune.txt"; tail -3 "$OUT/tune.stderr"
cp /tmp/tune/tune-db.json /tmp/tune/report.md "$OUT/" 2>/dev/null
entries() { find /tmp/tune/cache -name '*.bfk' | wc -l; }
before=$(entries)

# 3. Fresh processes on the tuned cache and DB: disk hits, tuned configs.
for t in ln_modulate residual_gate; do
  step BITFOLD_CACHE_DIR=/tmp/tune/cache BITFOLD_TUNE_DB=/tmp/tune/tune-db.json bitfold run $t --shape 1,4096,4096
  BITFOLD_CACHE_DIR=/tmp/tune/cache BITFOLD_TUNE_DB=/tmp/tune/tune-db.json \
    bitfold run $t --shape 1,4096,4096 2>&1 | tee "$OUT/run-$t.txt" || status=1
done
# Control: the same cache without the DB picks the default (also a hit).
step BITFOLD_CACHE_DIR=/tmp/tune/cache bitfold run ln_modulate --shape 1,4096,4096
BITFOLD_CACHE_DIR=/tmp/tune/cache BITFOLD_TUNE_DB= \
  bitfold run ln_modulate --shape 1,4096,4096 2>&1 | tee "$OUT/run-ln_modulate-no-db.txt" || status=1
after=$(entries)
echo "cache entries before the runs: $before, after: $after" | tee "$OUT/cache-entries.txt"
exit $status
