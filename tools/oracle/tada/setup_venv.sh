#!/usr/bin/env bash
# Builds the isolated TADA oracle environment: the official hume-tada==0.1.9 (Hume AI), used only
# by tools/oracle/tada (tokenizer conversion, tiny checkpoints and goldens), never at run time or
# in CI. hume-tada pins transformers<5, torch<3 and wants torchaudio, torchvision and
# descript-audio-codec: torch 2.13.0 goes in first, pinned; the wheel, torchaudio and
# descript-audio-codec go in with --no-deps (their pins would replace torch 2.13); torchvision is
# never imported by the inference path and is left out.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${ORACLE_TADA_VENV:-$here/../../../.tada-venv}"
check='import torch, tiktoken, transformers
import tada_oracle_patch  # noqa: F401  (the Hub-free loaders)
from tada.modules.tada import TadaForCausalLM
from tada.modules.encoder import Encoder
from llama_models.llama3.tokenizer import Tokenizer
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert transformers.__version__ == "4.57.3", transformers.__version__'
run_check() { PYTHONPATH="$here/stubs:$here" "$venv/bin/python" -c "$check"; }
if [ -x "$venv/bin/python" ] && run_check >/dev/null 2>&1; then
  exit 0
fi
python3.11 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# torch first, pinned: the CPU wheel here, and the pin keeps pip from pulling another build.
"$venv/bin/pip" install -q torch==2.13.0
# What the inference path imports (transformers within the wheel's <5 pin; tiktoken and blobfile
# for llama-models' reference tokenizer; tokenizers for the converted file).
"$venv/bin/pip" install -q torch==2.13.0 "transformers==4.57.3" "tokenizers" "tiktoken" \
  "safetensors" "numpy<2.3" "einops" "soundfile" "scipy" "blobfile"
# No torch pins honoured here. descript-audio-codec is not installed at all: tada imports only
# its Snake1d (stubs/dac, the upstream function copied verbatim); its package __init__ pulls in
# audiotools and a dozen more. llama-models only for llama_models/llama3/tokenizer.model and its
# reference tiktoken Tokenizer (its wheel also installs a top-level `models/` package: harmless
# in this venv, never in the product's).
"$venv/bin/pip" install -q --no-deps "hume-tada==0.1.9" "torchaudio==2.11.0" "llama-models==0.3.0"
# torchaudio 2.11's compiled ops do not load against torch 2.13. tada uses only
# torchaudio.functional.resample (pure Python): move the .so files out so that torchaudio's
# _load_lib returns False and the import succeeds (the Chatterbox oracle's recipe).
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$venv/torchaudio-lib-removed"
find "$site/torchaudio/lib" -name '*.so' -exec mv {} "$venv/torchaudio-lib-removed/" \; || true
run_check
