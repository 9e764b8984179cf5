#!/usr/bin/env bash
# Runs ON A GPU HOST, from a copy of this checkout that holds the release
# package (scripts/package-release.sh, built where LLVM is; the GPU host
# needs no LLVM). Unpacks the package, then runs the requested steps,
# writing logs and summaries under the results directory (--out):
#   version   bitfold version                          -> version.txt
#   kernels   scripts/run-kernels.sh (main job)         -> kernels.txt
#   suite     the pytest oracle suite (tests/gpu)       -> gpu-suite.json, gpu-suite.log
#   torch     pip-installs pkg/bitfold-*.whl (scripts/build-wheel.sh --out pkg),
#             or the wheel built here from the unpacked release library, and
#             any wheels in the --wheels directory (e.g. diffusers, for a host
#             without network), into a fresh venv (/tmp/bf-venv, seeing the
#             host's torch); then, with the wheel's own library (BITFOLD_LIB
#             unset), that venv's python runs tests/gpu/test_torch_ops.py,
#             test_torch_tutorial.py, examples/torch, bench/host_cost.py.
#             Needs only the wheel.
#                                                       -> torch.log, torch-examples.json,
#                                                          host_cost.md
#   sanitize  compute-sanitizer memcheck, racecheck, initcheck, synccheck
#             over every stock kernel x every legal config at a small
#             shape (`bitfold run`)                     -> compute-sanitizer.txt
#             knobs: SANITIZE_TEMPLATES, SANITIZE_TOOLS, SANITIZE_JOBS (8
#             runs at once), SANITIZE_BUDGET_S (stop starting runs after it)
#   prebuilt  every shape of pkg/prebuilt-shapes.json launched once (`bitfold
#             run --iters 0`, --tune-db pkg/prebuilt-tune-db.json when
#             there is one) with BITFOLD_CACHE_DIR = a copy of
#             pkg/prebuilt-cache (scripts/prebuild-fleet.sh, built on a
#             machine without a GPU); each must say "0 compiled"
#                                                       -> prebuilt.txt
#   fleet     bitfold.fleet on a local Ray cluster of this host (FLEET_LOCAL=N:
#             N local processes instead): tunes the seed shapes on its GPU
#             (FLEET_TUNE_BUDGET_S per shape), prebuilds its arch, then the
#             `prebuilt` check on the merged cache; FLEET_ARGS: more
#             `bitfold.fleet run` arguments (e.g. --tune-resources)
#                                                       -> fleet.log, fleet-prebuilt.txt
#   compile-latency
#             bin/compile_latency (in the package when it was built with
#             BITFOLD_PACKAGE_COMPILE_LATENCY=1): every stock kernel x seed
#             shape compiled in one process, per-stage p50/p95, the first
#             compile apart; then the same at each case's quick config
#             (what quick-first mode serves first)
#                                                       -> compile-latency.md,
#                                                          compile-latency-quick.md
#   any other word is passed to bash as a command after the package is set
#   up; it sees the results directory as $OUT.
# Usage: bash scripts/gpu-run.sh [--out DIR] [--pkg FILE] [--wheels DIR] STEP...
#   --out DIR     results directory (default ./gpu-results)
#   --pkg FILE    the release package (default pkg/bitfold-release.tar.xz)
#   --wheels DIR  extra wheels to install first (default .whl when present)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$PWD/gpu-results pkg=$root/pkg/bitfold-release.tar.xz wheels=$root/.whl
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --pkg) pkg=$2; shift 2 ;;
    --pkg=*) pkg=${1#--pkg=}; shift ;;
    --wheels) wheels=$2; shift 2 ;;
    --wheels=*) wheels=${1#--wheels=}; shift ;;
    -h|--help) sed -n '2,/^# Usage/{s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) break ;;
  esac
done
mkdir -p "$out" /tmp/bf || exit 2
export OUT=$(cd "$out" && pwd)
# The torch step needs only a wheel (pkg/bitfold-*.whl); every other step
# needs the release package.
if [[ -f $pkg ]]; then
  tar xJf "$pkg" -C /tmp/bf || exit 1
elif ! ls "$root"/pkg/bitfold-*.whl >/dev/null 2>&1; then
  echo "gpu-run: neither $pkg (scripts/package-release.sh) nor pkg/bitfold-*.whl" >&2; exit 2
fi
export PATH=/tmp/bf/bin:$PATH BITFOLD_LIB=/tmp/bf/lib/libbitfold.so
export BITFOLD_CACHE_DIR=/tmp/bf-cache PYTHONUNBUFFERED=1
if ! python3 -c 'import pytest' 2>/dev/null && ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site "$wheels"/*.whl && export PYTHONPATH=/tmp/site
fi
torch_step() {
  local venv=/tmp/bf-venv rc=0 whl
  rm -rf "$venv" /tmp/bf-dist
  # The wheel from pkg/ if there is one, else built here from the release
  # library just unpacked (the same script and contents).
  whl=$(ls "$root"/pkg/bitfold-*.whl 2>/dev/null | head -1)
  if [[ -z $whl ]]; then
    bash "$root/scripts/build-wheel.sh" --lib /tmp/bf/lib/libbitfold.so --out /tmp/bf-dist || return 1
    whl=$(ls /tmp/bf-dist/bitfold-*.whl)
  fi
  # A user's install: a fresh venv (seeing the host's torch), plain pip
  # install of the wheel (and of --wheels' extra wheels, e.g. diffusers).
  python3 -m venv --system-site-packages "$venv" || return 1
  # When python3 is itself a venv's (torch installed there), its packages
  # are not the base interpreter's "system" ones: make them visible too.
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-site.pth" || return 1
  "$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check \
    "$whl" $(ls "$wheels"/*.whl 2>/dev/null) || return 1
  (
    unset BITFOLD_LIB PYTHONPATH
    # The examples and host_cost.py time kernels: first calls wait for their
    # compile (bitfold.torch's default serves eager while it runs).
    export BITFOLD_ASYNC_COMPILE=0
    cd "$root"
    py=$venv/bin/python
    $py -c 'import bitfold, bitfold._lib as L; print("bitfold", bitfold.version(), L.load().bitfold_path)'
    $py -m pip list 2>/dev/null | grep -E '^(bitfold|torch|diffusers) '
    $py -m pytest -q -p no:cacheprovider -rs tests/gpu/test_torch_ops.py \
      tests/gpu/test_torch_tutorial.py || rc=1
    $py examples/torch/silu_and_mul.py || rc=1
    $py examples/torch/glm_image_blocks.py --json /tmp/bf-glm.json || rc=1
    $py examples/torch/wan_vae_decode.py --json /tmp/bf-wan.json || rc=1
    $py bench/host_cost.py --out /tmp/bf-host || rc=1
    $py -c 'import json,sys; json.dump({"glm": json.load(open("/tmp/bf-glm.json")), "wan": json.load(open("/tmp/bf-wan.json"))}, open(sys.argv[1], "w"), indent=1)' "$OUT/torch-examples.json" || rc=1
    cp /tmp/bf-host/host_cost.md "$OUT/" || rc=1
    exit $rc
  ) 2>&1 | tee "$OUT/torch.log" | tail -40
  return "${PIPESTATUS[0]}"
}
# One line per (template, shape, config, tool): "clean" or the error count.
sanitize_one() { # template shape config tool
  local log=/tmp/bf-cs/$1.$3.$4.log
  if (( $(date +%s) > SANITIZE_DEADLINE )); then echo "$1 $2 $3 $4 NOT-RUN (budget)"; return; fi
  timeout 300 compute-sanitizer --tool "$4" --error-exitcode 86 \
    bitfold run "$1" --shape "$2" --config "$3" --iters 1 >"$log" 2>&1
  local rc=$? errors
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  if [[ $rc == 0 && ${errors:-0} == 0 ]]; then echo "$1 $2 $3 $4 clean"
  else echo "$1 $2 $3 $4 FAILED rc=$rc errors=${errors:-?} log=$log"; fi
}
sanitize() {
  local summary=$OUT/compute-sanitizer.txt start=$SECONDS
  local -A shapes=([ln_modulate]=1,8,128 [qk_layernorm]=1,8,2,128
    [conv_bias]=1,96,1,4,4 [residual_gate]=1,8,256 [rmsnorm_modulate]=1,8,2048
    [wan_rmsnorm_silu]=1,96,1,4,4)
  mkdir -p /tmp/bf-cs
  command -v compute-sanitizer >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
  export SANITIZE_DEADLINE=$(( $(date +%s) + ${SANITIZE_BUDGET_S:-520} ))
  export -f sanitize_one
  for t in ${SANITIZE_TEMPLATES:-${!shapes[@]}}; do
    for c in $(bitfold compile "$t" --shape "${shapes[$t]}" --list-configs); do
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
        echo "$t ${shapes[$t]} $c $tool"
      done
    done
  done | xargs -P "${SANITIZE_JOBS:-8}" -L 1 bash -c 'sanitize_one "$@"' _ \
    | sort > "$summary.runs"
  { echo "compute-sanitizer $(compute-sanitizer --version | tail -1)"
    bitfold version | grep '^GPU 0' || true
    echo "runs: $(wc -l < "$summary.runs"), clean: $(grep -c ' clean$' "$summary.runs"), failed: $(grep -c ' FAILED ' "$summary.runs"), not run (budget): $(grep -c ' NOT-RUN ' "$summary.runs"), $((SECONDS - start)) s"
    grep ' FAILED ' "$summary.runs" || true
    echo "--- every run"; cat "$summary.runs"; } > "$summary"
  grep -o 'log=.*' "$summary.runs" | cut -d= -f2 | xargs -r cp -t "$OUT" 2>/dev/null
  head -3 "$summary"
  ! grep -q ' FAILED ' "$summary.runs"
}

# One line per seed shape: its first launch's cache line; then a summary.
# When something compiled, the key fields of a new entry and of a prebuilt
# one, to see what differs between the two machines.
# Arguments (all optional): cache dir, shapes file, tune DB, log name.
prebuilt_step() {
  local src=${1:-$root/pkg/prebuilt-cache} shapes=${2:-$root/pkg/prebuilt-shapes.json}
  local db=${3-$root/pkg/prebuilt-tune-db.json} log=$OUT/${4:-prebuilt.txt}
  local dir=/tmp/bf-prebuilt runs=0 zero=0
  [[ -d $src && -f $shapes ]] || {
    echo "prebuilt: no $src or $shapes (run scripts/prebuild-fleet.sh)"; return 1; }
  rm -rf "$dir" && cp -r "$src" "$dir"
  # The DB that chose the prebuilt configs, when there was one.
  [[ -n $db && -f $db ]] || db=""
  find "$dir" -name '*.bfk' | sort > /tmp/bf-prebuilt.before
  { bitfold version | grep -E '^(bitfold|CUDA|GPU 0)'
    echo "prebuilt from $src: $(head -1 "$root/pkg/prebuilt-built-by.txt" 2>/dev/null); tune DB: ${db:-none}"
    while IFS='|' read -r t shape params; do
      args=("$t" --shape "$shape" --iters 0)
      [[ -n $params ]] && args+=(--params "$params")
      [[ -n $db ]] && args+=(--tune-db "$db")
      line=$(BITFOLD_CACHE_DIR=$dir bitfold run "${args[@]}" 2>&1 | grep '^first launch')
      runs=$((runs + 1))
      grep -q 'kernel cache: 0 compiled' <<<"$line" && zero=$((zero + 1))
      echo "$t $shape ${params:--}: ${line:-NO LAUNCH}"
    done < <(python3 -c 'import json,sys
for e in json.load(open(sys.argv[1])):
    p=",".join(f"{k}={v}" for k,v in sorted(e.get("params",{}).items()))
    print("|".join([e["template"], e["shape"], p]))' "$shapes")
    echo "prebuilt: $zero of $runs seed shapes compiled nothing"
    find "$dir" -name '*.bfk' | sort | comm -13 /tmp/bf-prebuilt.before - > /tmp/bf-prebuilt.new
    if [[ -s /tmp/bf-prebuilt.new ]]; then
      echo "compiled here (the key text of one new entry, then of a prebuilt one):"
      # An entry: "BITFOLD-KERNEL <format>", "<meta bytes> ...", then the
      # metadata JSON, whose "key" is the full key text.
      python3 -c 'import json,sys
for f in sys.argv[1:]:
    data = open(f, "rb").read()
    head, sizes, payload = data.split(b"\n", 2)
    meta = json.loads(payload[:int(sizes.split()[0])])
    print(meta["key"] + "--")' "$(head -1 /tmp/bf-prebuilt.new)" "$(head -1 /tmp/bf-prebuilt.before)"
    fi
    ((zero == runs && runs > 0)); } 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

# bitfold.fleet on this host: a local Ray cluster with this host's GPUs tunes
# FLEET_SHAPES (default: the seed shapes; FLEET_TUNE_BUDGET_S per shape),
# prebuilds for this GPU's arch, then a fresh process per shape launches
# from the merged cache and must compile nothing. Needs Ray importable.
fleet_step() {
  local out=/tmp/bf-fleet shapes=${FLEET_SHAPES:-$root/bench/shapes/seed-shapes.json}
  local gpu arch
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/^NVIDIA //; s/ .*//')
  arch=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  rm -rf "$out"
  ( export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
    # FLEET_LOCAL=N: the same plan on N local processes instead of Ray.
    local where=()
    [[ -n ${FLEET_LOCAL:-} ]] && where=(--local "$FLEET_LOCAL" --local-gpu-types "$gpu")
    python3 -m bitfold.fleet run --shapes "$shapes" --gpu-types "$gpu" --archs "$arch" \
      --out "$out" --cli /tmp/bf/bin/bitfold --prebuild-jobs 4 "${where[@]}" \
      --tune-budget-s "${FLEET_TUNE_BUDGET_S:-5}" ${FLEET_ARGS:-} ) 2>&1 | tee "$OUT/fleet.log" | tail -40
  [[ ${PIPESTATUS[0]} == 0 ]] || return 1
  prebuilt_step "$out/cache/$arch" "$shapes" "$out/tune-db.json" fleet-prebuilt.txt
}

status=0
for step in "$@"; do
  case $step in
    version) bitfold version | tee "$OUT/version.txt" || status=1 ;;
    kernels) bash "$root/scripts/run-kernels.sh" /tmp/bf/bin/bitfold 2>&1 | tee "$OUT/kernels.txt" || status=1 ;;
    suite)
      PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} \
        BITFOLD_GPU_SUMMARY=$OUT/gpu-suite.json python3 -m pytest -q -p no:cacheprovider \
        "$root/tests/gpu" -rs 2>&1 | tee "$OUT/gpu-suite.log" | tail -25 || status=1 ;;
    torch) torch_step || status=1 ;;
    sanitize) sanitize || status=1 ;;
    prebuilt) prebuilt_step || status=1 ;;
    fleet) fleet_step || status=1 ;;
    compile-latency)
      /tmp/bf/bin/compile_latency --out "$OUT/compile-latency.md" 2>&1 |
        tee "$OUT/compile-latency.log" | tail -40 || status=1
      /tmp/bf/bin/compile_latency --quick --out "$OUT/compile-latency-quick.md" \
        2>&1 | tee "$OUT/compile-latency-quick.log" | tail -40 || status=1 ;;
    *) bash -c "$step" || status=1 ;;
  esac
done
exit $status
