#!/usr/bin/env bash
# Rebuild every committed Qwen3-TTS test fixture from scratch with the official qwen-tts:
# tiny checkpoints, reference clips, goldens and tokenizer cases (see tests/fixtures/README.md).
# Deterministic: running it twice gives byte-identical files. Takes ~2 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/tests/fixtures}"
venv="${ORACLE_VENV:-$repo/.oracle-venv}"
bash "$here/setup_venv.sh"
quiet() { grep -v -e 'flash-attn' -e '^\*\+$' -e '^ $' -e 'pad_token_id' -e 'generation flags' || true; }
run() { PYTHONPATH="$here/stubs:$here" "$venv/bin/python" "$@" 2>&1 | quiet; }
export PYTHONHASHSEED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
run "$here/build_fixtures.py" --out "$out"
run "$here/make_goldens.py" --fixtures "$out"
run "$here/make_family.py" --fixtures "$out"  # CustomVoice / VoiceDesign: after tiny-a
run "$here/make_tokenizer_cases.py" --out "$out/tokenizer_cases.json"
echo "fixtures rebuilt in $out"
