#!/usr/bin/env bash
# CTest python.FleetOnLocalRay: bitfold.fleet on a local Ray cluster.
# Ray is bitfold's optional `fleet` extra: it goes into its own venv under
# the build directory (pip, from PyPI, once; reused after), never into the
# package's test venv, which proves the package needs no Ray.
# usage: run.sh SOURCE_DIR VENV PYTHON
set -euo pipefail
src=$1 venv=$2 py=$3
if ! "$venv/bin/python" -c 'import ray' 2>/dev/null; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check 'ray>=2.9'
fi
export PYTHONPATH=$src/python RAY_USAGE_STATS_ENABLED=0
cd "$src"
exec "$venv/bin/python" -m unittest -v tests.python.fleet.test_fleet
