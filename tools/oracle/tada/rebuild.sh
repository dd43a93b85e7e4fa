#!/usr/bin/env bash
# Rebuilds tests/fixtures/tada-tiny-{a,b}/, their goldens (tada-tiny-<v>.golden.npz), the seed
# sweep (tada-tiny-seed-sweep.json) and tada-release-shapes.json with the
# official hume-tada==0.1.9 in its own venv (.tada-venv), single-threaded; then remakes the
# goldens with two threads into a scratch folder and checks them against the one-thread ones
# (integers equal, floats within 5 E; see compare_goldens.py).
# Usage: bash tools/oracle/tada/rebuild.sh [FIXTURES_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
out="${1:-$repo/tests/fixtures}"
bash "$here/setup_venv.sh"
py="${ORACLE_TADA_VENV:-$repo/.tada-venv}/bin/python"
export PYTHONPATH="$here/stubs:$here"
"$py" -W ignore "$here/build_tiny.py" --out "$out"
"$py" -W ignore "$here/make_goldens.py" --fixtures "$out" --threads 1
"$py" -W ignore "$here/seed_sweep.py" --fixtures "$out"
"$py" -W ignore "$here/dump_release_shapes.py" --out "$out/tada-release-shapes.json"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for v in a b; do cp -r "$out/tada-tiny-$v" "$scratch/"; done
"$py" -W ignore "$here/make_goldens.py" --fixtures "$scratch" --threads 2
for v in a b; do
  "$py" "$here/compare_goldens.py" "$out/tada-tiny-$v.golden.npz" "$scratch/tada-tiny-$v.golden.npz"
done
