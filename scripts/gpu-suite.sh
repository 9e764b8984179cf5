#!/usr/bin/env bash
# The GPU oracle suite in one device call.
#
#   scripts/gpu-suite.sh             builds the release package (pkg/) and
#                                    prints the device call to make
#   scripts/gpu-suite.sh summarize DIR
#                                    turns the call's files (DIR = the tool's
#                                    files_at) into a dated summary under
#                                    bench/results/
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
    "Command: `bash scripts/device-run.sh suite` (device tool, carry [\"pkg\", \".whl\"]).\n\n"
    + "\n".join(rows) + "\n")
print(out)
PY
  exit 0
fi
"$root/scripts/package-release.sh"
if [[ ! -d $root/.whl ]]; then
  echo "note: the GPU machine may lack pytest; fetch wheels into .whl/ (see" \
       "the device tool's README) and add .whl to carry" >&2
fi
cat <<'EOT'
Now make this device call (tool `device`, verb run):
  command: bash scripts/device-run.sh suite
  carry:   ["pkg", ".whl"]
then: scripts/gpu-suite.sh summarize <files_at>
EOT
