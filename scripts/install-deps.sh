#!/usr/bin/env bash
# Installs bitfold's build dependencies from Debian packages, idempotently:
# `apt-get update` runs at most once, and only when something is missing.
set -euo pipefail

packages=(
  cmake ninja-build ccache g++ python3 python3-dev
  llvm-22-dev libmlir-22-dev mlir-22-tools
  nlohmann-json3-dev libgtest-dev libdlpack-dev libzstd-dev zlib1g-dev
  libxml2-dev libedit-dev libffi-dev libncurses-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
