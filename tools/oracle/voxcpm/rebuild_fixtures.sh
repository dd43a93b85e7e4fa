#!/usr/bin/env bash
# Rebuilds tests/fixtures/voxcpm2-tiny{,-b} and their goldens ({.golden,-model.golden}) with the official voxcpm==2.0.3 (oracle venv).
# Usage: bash tools/oracle/voxcpm/rebuild_fixtures.sh [FIXTURES_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
out="${1:-$repo/tests/fixtures}"
bash "$here/setup_venv.sh"
py="${ORACLE_VOXCPM_VENV:-$repo/.oracle-voxcpm-venv}/bin/python"
"$py" -W ignore::FutureWarning "$here/build_tiny.py" --out "$out"
"$py" -W ignore::FutureWarning "$here/make_goldens.py" --fixtures "$out"
"$py" -W ignore::FutureWarning "$here/make_model_goldens.py" --fixtures "$out"
