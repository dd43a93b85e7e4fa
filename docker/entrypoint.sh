#!/bin/sh
# The container's entrypoint: persistent storage, then the app as PID 1 (exec), which handles
# SIGTERM itself (drains requests in flight, then exits 0: docs/serving.md).
#
# Hugging Face Spaces mount persistent storage at /data when it is enabled; anything else is
# lost at every restart. Where that directory exists and is writable, saved voices and our
# cache (compiled kernels, int8 weights, speed checks) live there, and so do model downloads
# unless HF_HOME is set or the image already holds a Hub cache (a model baked in at build time
# by the Space's preload_from_hub stays where it is). TTS_DATA_DIR names another directory.
data="${TTS_DATA_DIR:-/data}"
if [ -d "$data" ] && [ -w "$data" ]; then
  export TTS_VOICES_DIR="${TTS_VOICES_DIR:-$data/voices}"
  export TTS_CORE_CACHE="${TTS_CORE_CACHE:-$data/tts_core}"
  if [ -z "${HF_HOME:-}" ] && [ ! -d "$HOME/.cache/huggingface/hub" ]; then
    export HF_HOME="$data/huggingface"
  fi
  echo "persistent storage: $data (voices, caches; Hub cache: ${HF_HOME:-the image's})" >&2
else
  echo "no writable $data: voices and downloads last until the container stops" >&2
fi
exec "$@"
