#!/usr/bin/env bash
# The GPU oracle suite.
#
#   scripts/gpu-suite.sh             builds the release package (pkg/) and
#                                    prints what to run on the GPU host
#   scripts/gpu-suite.sh summarize DIR
#                                    turns a suite run's results directory
#                                    (gpu-run.sh --out DIR) into a dated
#                                    summary under bench/results/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${1:-} == summarize ]]; then
  dir=$2
  out=$root/bench/results/$(date +%F)-gpu-suite.md
  python3 - "$dir/gpu-suite.json" "$dir/gpu-suite.log" "$out" <<'PY'
import json, sys
summary, log, out = sys.argv[1:]
d = json.load(open(summary))
tail = [l for l in open(log).read().splitlines() if l.strip()][-1]
rows = ["| template | comparisons | equal | first mismatch |", "|---|--:|--:|---|"]
for k, v in d["templates"].items():
    rows.append(f"| {k} | {v['cases']} | {v['equal']} | {v['first_mismatch'] or 'none'} |")
open(out, "w").write(
    f"# GPU oracle suite\n\nGPU {d['gpu']}, torch {d['torch']}. pytest: `{tail}`\n\n"
    "Command: `bash scripts/gpu-run.sh --out DIR suite` on the GPU host.\n\n"
    + "\n".join(rows) + "\n")
print(out)
PY
  exit 0
fi
"$root/scripts/package-release.sh"
cat <<'EOT'
Now, on the GPU host, from a copy of this checkout with pkg/:
  bash scripts/gpu-run.sh --out results suite
  (a host without pytest or network: pip download its wheels elsewhere
   into a directory and add --wheels DIR)
then, here: scripts/gpu-suite.sh summarize results
EOT
