#!/usr/bin/env bash
# Builds the isolated Chatterbox oracle environment: the official chatterbox-tts==0.1.7, used
# only by tools/oracle/chatterbox (tiny checkpoints and goldens), never at run time or in CI.
# Recipe from ../shared/reference/chatterbox/oracle-notes.md section 1: the wheel pins
# torch==2.6.0, so it and the packages that would drag torch along go in with --no-deps.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${ORACLE_CHATTERBOX_VENV:-$here/../../../.chatterbox-venv}"
check='import torch, perth, torchaudio
from chatterbox.tts_turbo import ChatterboxTurboTTS
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert perth.PerthImplicitWatermarker is not None, "perth needs setuptools<81 (pkg_resources)"'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  exit 0
fi
python3.11 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# torch first, pinned: the CPU wheel here, and the pin keeps pip from pulling another build.
"$venv/bin/pip" install -q torch==2.13.0
# What the EN/Turbo inference path imports, at the versions the trial ran (the wheel's pins
# where it has them). setuptools<81: perth does `from pkg_resources import ...`, and with a
# newer setuptools perth.PerthImplicitWatermarker silently becomes None.
"$venv/bin/pip" install -q torch==2.13.0 "transformers==5.2.0" "diffusers==0.29.0" \
  "librosa==0.11.0" "soxr==1.1.0" "safetensors==0.5.3" "numpy==1.26.4" "omegaconf" \
  "pyloudnorm==0.2.0" "conformer==0.3.2" "setuptools<81" "einops" "tqdm" "soundfile" "scipy" \
  "onnx==1.23.2"  # s3tokenizer.utils imports onnx at import time (onnx2torch, unused here)
# No torch pins honoured here: these would otherwise replace torch 2.13.
"$venv/bin/pip" install -q --no-deps "chatterbox-tts==0.1.7" "s3tokenizer==0.3.0" \
  "torchaudio==2.11.0" "resemble-perth==1.0.1"
# torchaudio 2.11's compiled ops do not load against torch 2.13. Chatterbox uses only its
# pure-Python kaldi.fbank and transforms.Resample: move the .so files out so that
# torchaudio's _load_lib returns False and the import succeeds.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$venv/torchaudio-lib-removed"
find "$site/torchaudio/lib" -name '*.so' -exec mv {} "$venv/torchaudio-lib-removed/" \; || true
"$venv/bin/python" -c "$check"
