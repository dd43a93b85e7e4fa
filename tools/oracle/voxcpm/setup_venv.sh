#!/usr/bin/env bash
# Builds the isolated VoxCPM oracle environment: the official voxcpm==2.0.3, used only by
# tools/oracle/voxcpm (fixture and golden builders), never at run time or in CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${ORACLE_VOXCPM_VENV:-$here/../../../.oracle-voxcpm-venv}"
check='import voxcpm, torch; from voxcpm.modules.audiovae import AudioVAEV2; from voxcpm.model import VoxCPM2Model; assert torch.__version__.startswith("2.13.0")'
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  exit 0
fi
python3.11 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# torch first, pinned: on a CPU-only index this is the CPU wheel, and the pin keeps pip from
# pulling a newer (CUDA) build when the other packages are resolved.
"$venv/bin/pip" install -q torch==2.13.0
# What the VoxCPM2 inference path imports (model/voxcpm2.py, model/utils.py, modules/*).
# gradio, funasr, modelscope, wetext, torchaudio, torchcodec, datasets, ... are declared by the
# package but unused for inference with enable_denoiser=False and normalize=False.
"$venv/bin/pip" install -q torch==2.13.0 "transformers==4.57.3" "pydantic>=2,<3" "einops==0.8.2" \
  "librosa==0.11.0" "soxr==1.1.0" "safetensors==0.8.0" "tqdm" "numpy<3" "soundfile"
"$venv/bin/pip" install -q --no-deps "voxcpm==2.0.3"
# torchaudio is imported at package import time by the v1 model only: stub it (see stubs/).
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$here/stubs" > "$site/voxcpm_oracle_stubs.pth"
"$venv/bin/python" -c "$check"
