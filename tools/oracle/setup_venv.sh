#!/usr/bin/env bash
# Builds the isolated oracle environment: the official qwen-tts==0.1.1 with its pinned
# transformers, used only by tools and fixture builders, never at run time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${ORACLE_VENV:-$here/../../.oracle-venv}"
# qwen_tts imports torchaudio/sox/onnxruntime at import time: check with the stubs on the path.
if [ -x "$venv/bin/python" ] && PYTHONPATH="$here/stubs" "$venv/bin/python" -c "import qwen_tts, transformers" >/dev/null 2>&1; then
  exit 0
fi
python3.11 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# torch first: the CPU wheel pinned here keeps pip from pulling a CUDA build.
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q "transformers==4.57.3" "accelerate==1.12.0" librosa soundfile einops numpy safetensors
# torchaudio, sox and onnxruntime are imported by qwen_tts but never used on the 12 Hz path:
# install the package without its dependencies and stub those modules (see stubs/).
"$venv/bin/pip" install -q --no-deps "qwen-tts==0.1.1"
