#!/usr/bin/env bash
# Runs every bundled template at a seed shape with the given bitfold binary.
# Usage: scripts/run-kernels.sh path/to/bitfold
set -euo pipefail
bitfold=$1
"$bitfold" version
# One seed shape per template (NUMERICS.md), small enough for the CPU.
cases=(
  "ln_modulate --shape 2,1024,2240"
  "qk_layernorm --shape 1,4360,32,128"
  "conv_bias --shape 1,384,1,60,104 --bias-dtype f32"
  "conv_bias --shape 1,384,1,60,104 --residual"
  "residual_gate --shape 1,4096,4096"
  "rmsnorm_modulate --shape 1,128,2048"
  "wan_rmsnorm_silu --shape 1,96,1,60,104"
)
status=0
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086
  "$bitfold" interp $c || status=1
done
exit $status
