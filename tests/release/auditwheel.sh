#!/usr/bin/env bash
# `auditwheel show` on the probe's wheel: consistent with its tag (the
# newest tag it names is manylinux_2_28 or older). auditwheel is installed
# from PyPI into a venv; exit 77 (skipped) when PyPI cannot be reached.
# usage: auditwheel.sh WORK PYTHON
set -euo pipefail
work=$1 py=$2
venv=$(dirname "$work")/auditwheel-venv  # kept across runs (wheel_tag.sh empties WORK)
if [[ ! -x $venv/bin/auditwheel ]]; then
  "$py" -m venv "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check auditwheel; then
    echo "SKIPPED: auditwheel not installable (no network?)"; exit 77
  fi
fi
whl=$(ls "$work"/dist/bitfold-*.whl)
out=$("$venv/bin/auditwheel" show "$whl")
echo "$out"
# "... is consistent with the following platform tag: "manylinux_2_N_x86_64"."
tag=$(tr '\n' ' ' <<<"$out" | grep -o 'platform tag: *"manylinux_2_[0-9]*_x86_64' |
  head -1 | grep -o 'manylinux.*' || true)
[[ -n $tag ]] || { echo "auditwheel named no manylinux tag"; exit 1; }
minor=${tag#manylinux_2_}; minor=${minor%%_*}
((minor <= 28)) || { echo "needs $tag, newer than the wheel's manylinux_2_28"; exit 1; }
echo "ok: auditwheel: consistent with $tag (<= manylinux_2_28)"
