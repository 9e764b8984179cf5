#!/usr/bin/env bash
# The probe's wheel (scripts/build-wheel.sh) is tagged manylinux_2_28; pip
# installs it for a manylinux_2_28 platform and refuses it for 2_27 (a
# machine with glibc 2.27), offline.
# usage: wheel_tag.sh SOURCE_DIR LIB WORK PYTHON
set -euo pipefail
src=$1 lib=$2 work=$3 py=$4
rm -rf "$work" && mkdir -p "$work"
bash "$src/scripts/build-wheel.sh" --lib "$lib" --out "$work/dist"
whl=$(ls "$work"/dist/bitfold-*.whl)
[[ $whl == *-py3-none-manylinux_2_28_x86_64.whl ]] || { echo "wrong tag: $whl"; exit 1; }
get() { # platform
  "$py" -m pip download -q --no-index --find-links "$work/dist" --only-binary=:all: \
    --no-deps --disable-pip-version-check --platform "$1" -d "$work/get-$1" bitfold
}
get manylinux_2_28_x86_64
if get manylinux_2_27_x86_64 2>"$work/refused.txt"; then
  echo "pip took the manylinux_2_28 wheel for a glibc 2.27 platform"; exit 1
fi
grep -H . "$work/refused.txt"
echo "ok: $(basename "$whl"); pip refuses it for manylinux_2_27"
