"""Build the tiny Qwen3-TTS checkpoints with the official classes (run in .oracle-venv).

    PYTHONPATH=tools/oracle/stubs:tools/oracle .oracle-venv/bin/python \
        tools/oracle/build_fixtures.py [--out tests/fixtures] [--only qwen3-tiny-a]

Writes tests/fixtures/<name>/ in the released folder layout (see tests/fixtures/README.md)
and the reference clips tests/fixtures/ref_clip_24k.wav / ref_clip_16k_stereo.wav.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf
import torch
from build_codec import build_codec
from build_talker import build_model, calibrate_eos
from cases import CASES, EOS_CASE
from ref_clip import stereo_variant, synth_voice
from safetensors.torch import save_file
from tiny_configs import (
    COPIED_FILES,
    REFERENCE,
    SPECS,
    SPEECH_TOKENIZER_CONFIGURATION,
    TINY_A,
    model_config,
    schema_differences,
    speech_tokenizer_config,
    speech_tokenizer_preprocessor,
    write_json,
)

REPO = Path(__file__).resolve().parents[2]


def save_state(module: torch.nn.Module, path: Path, dtype: torch.dtype) -> None:
    state = {k: v.detach().to(dtype).contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(path), metadata={"format": "pt"})
    path.chmod(0o644)


def write_ref_clips(out: Path):
    """Write both clips as 16-bit PCM (float WAVs carry a timestamped PEAK chunk, which
    would make rebuilds differ) and return the 24 kHz clip as read back, float32 (S,)."""
    sf.write(out / "ref_clip_24k.wav", synth_voice(24000), 24000, subtype="PCM_16")
    sf.write(out / "ref_clip_16k_stereo.wav", stereo_variant(16000), 16000, subtype="PCM_16")
    audio, _sr = sf.read(out / "ref_clip_24k.wav", dtype="float32")
    return audio


def official_24k(path: Path) -> np.ndarray:
    """A clip as the official speech tokenizer's encode reads a path: mono, 24 kHz, float32."""
    audio, rate = librosa.load(path, sr=None, mono=True)
    if rate != 24000:
        audio = librosa.resample(y=audio, orig_sr=rate, target_sr=24000)
    return audio.astype(np.float32)


def write_folder(name: str, out: Path, ref_audio, codec) -> Path:
    spec = SPECS[name]
    folder = out / name
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    for fname in COPIED_FILES:
        shutil.copyfile(REFERENCE / fname, folder / fname)
    write_json(folder / "config.json", model_config(spec))
    st_cfg = speech_tokenizer_config(spec)
    for rel, tiny in (
        ("config.json", model_config(spec)),
        ("speech_tokenizer/config.json", st_cfg),
    ):
        diff = schema_differences(json.loads((REFERENCE / rel).read_text()), tiny)
        assert not diff, f"{name}/{rel}: keys differ from the release: {diff}"
    write_json(folder / "speech_tokenizer" / "config.json", st_cfg)
    write_json(
        folder / "speech_tokenizer" / "preprocessor_config.json", speech_tokenizer_preprocessor()
    )
    write_json(folder / "speech_tokenizer" / "configuration.json", SPEECH_TOKENIZER_CONFIGURATION)
    save_state(codec, folder / "speech_tokenizer" / "model.safetensors", torch.float32)
    model = build_model(model_config(spec), spec.seed)
    save_state(model, folder / "model.safetensors", torch.bfloat16)
    if name in EOS_CASE:
        stop = [c for c in CASES[name] if c.key == EOS_CASE[name]]
        keep = [c for c in CASES[name] if c.key != EOS_CASE[name]]
        calibrate_eos(folder, model, stop[0], keep, ref_audio, spec.seed)
        save_state(model, folder / "model.safetensors", torch.bfloat16)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures")
    parser.add_argument("--only", choices=sorted(SPECS), default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)  # fixed reduction order: rebuilds are byte-identical
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    ref_audio = write_ref_clips(args.out)
    # One codec for both checkpoints, calibrated under tiny-a's (released) attention windows.
    clips = [ref_audio, official_24k(args.out / "ref_clip_16k_stereo.wav")]
    codec = build_codec(speech_tokenizer_config(TINY_A), clips)
    for name in [args.only] if args.only else sorted(SPECS):
        print("built", write_folder(name, args.out, ref_audio, codec))


if __name__ == "__main__":
    main()
