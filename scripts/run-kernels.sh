#!/usr/bin/env bash
# Runs every bundled template at its seed shapes with the given bitfold
# binary. With a GPU: `bitfold run` compiles, launches and checks each
# kernel against the CPU interpreter and times it. Without one: each kernel
# is compiled to PTX and cubin (`bitfold compile`, PTX audit included) and
# run in the CPU interpreter on a small seed shape (`bitfold interp`).
# Usage: scripts/run-kernels.sh path/to/bitfold
set -uo pipefail
bitfold=$1
"$bitfold" version
status=0

if "$bitfold" version | grep -q '^GPU 0:'; then
  # template | shape | params
  cases=(
    "ln_modulate|1,4096,4096|"
    "ln_modulate|1,4359,4096|"
    "ln_modulate|2,1024,2240|"
    "ln_modulate|1,1,128|"
    "qk_layernorm|1,4360,32,128|"
    "conv_bias|1,96,4,480,832|"
    "conv_bias|1,96,4,480,832|residual=1"
    "conv_bias|4,96,480,832|bias_dtype=f32"
    "conv_bias|1,3,4,8,8|"
    "residual_gate|1,4096,4096|"
    "residual_gate|1,4096,4096|gate=per_batch"
    "rmsnorm_modulate|1,4096,4096|"
    "rmsnorm_modulate|1,128,2048|"
  )
  table=()
  for c in "${cases[@]}"; do
    IFS='|' read -r t shape params <<<"$c"
    args=("$t" --shape "$shape")
    [[ -n $params ]] && args+=(--params "$params")
    log=$("$bitfold" run "${args[@]}" 2>&1)
    rc=$?
    echo "$log"
    ((rc == 0)) || status=1
    config=$(sed -n 's/^config \([^ ,]*\).*/\1/p' <<<"$log" | head -1)
    time=$(sed -n 's/^time per launch: median \([0-9.]*\) us.*/\1/p' <<<"$log" | head -1)
    equal=no
    grep -q '^bit-exact vs the interpreter' <<<"$log" && equal=yes
    table+=("$(printf '%-18s %-16s %-18s %-16s %8s us  %s' "$t" "$shape" "${params:--}" "${config:-?}" "${time:-?}" "$equal")")
  done
  echo
  printf '%-18s %-16s %-18s %-16s %11s  %s\n' kernel shape params config time equal
  printf '%s\n' "${table[@]}"
  exit $status
fi

# No GPU: compile each kernel at a seed shape, then interpret a small one.
compile_cases=(
  "ln_modulate --shape 1,4096,4096"
  "qk_layernorm --shape 1,4360,32,128"
  "conv_bias --shape 1,96,4,480,832"
  "residual_gate --shape 1,4096,4096"
  "rmsnorm_modulate --shape 1,4096,4096"
)
for c in "${compile_cases[@]}"; do
  # shellcheck disable=SC2086
  "$bitfold" compile $c | grep -E '^(kernel|config|cubin|audit)|total' || status=1
done
interp_cases=(
  "ln_modulate --shape 2,1024,2240"
  "qk_layernorm --shape 1,4360,32,128"
  "conv_bias --shape 1,384,1,60,104 --params bias_dtype=f32"
  "conv_bias --shape 1,384,1,60,104 --params residual=1"
  "residual_gate --shape 1,4096,4096"
  "rmsnorm_modulate --shape 1,128,2048"
  "wan_rmsnorm_silu --shape 1,96,1,60,104"
)
for c in "${interp_cases[@]}"; do
  # shellcheck disable=SC2086
  "$bitfold" interp $c || status=1
done
exit $status
