#!/usr/bin/env bash
# Rebuilds tests/fixtures/chatterbox-turbo-tiny-{a,b}/ and chatterbox-english-tiny-{a,b}/, their
# goldens (<name>.golden.npz), the
# reference clip chatterbox-ref-44k.wav, chatterbox-turbo-release-shapes.json and
# perth-watermark.golden.npz (the official Perth watermarker, resemble-perth 1.0.1)
# with the official chatterbox-tts==0.1.7 (its own venv, .chatterbox-venv), single-threaded.
# Usage: bash tools/oracle/chatterbox/rebuild_fixtures.sh [FIXTURES_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
out="${1:-$repo/tests/fixtures}"
bash "$here/setup_venv.sh"
py="${ORACLE_CHATTERBOX_VENV:-$repo/.chatterbox-venv}/bin/python"
"$py" -W ignore "$here/build_tiny.py" --out "$out"
"$py" -W ignore "$here/make_goldens.py" --fixtures "$out" --threads 1
"$py" -W ignore "$here/make_goldens_english.py" --fixtures "$out" --threads 1
"$py" -W ignore "$here/dump_release_shapes.py" --out "$out/chatterbox-turbo-release-shapes.json"
"$py" -W ignore "$here/make_watermark_goldens.py" --fixtures "$out" --threads 1
