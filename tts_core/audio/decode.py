"""Decode a reference clip from a file path or an in-memory (rate, array) pair.

Anything soundfile reads (WAV 8/16/24/32-bit int and float, FLAC, OGG, MP3) is read directly;
other containers (webm/m4a from a browser microphone) go through ffmpeg. Output is float32
mono at 24 kHz plus facts about the original, for messages.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from .ffmpeg import ffmpeg_executable
from .pcm import SAMPLE_RATE, resample


class AudioDecodeError(ValueError):
    """The input is not decodable audio; the message is meant for the user."""


@dataclass
class DecodedAudio:
    audio: np.ndarray  # (N,) float32 mono, SAMPLE_RATE
    original_rate: int
    channels: int

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE


def decode_reference(source: str | Path | tuple[int, np.ndarray]) -> DecodedAudio:
    if isinstance(source, tuple):
        rate, data = source
        return _from_array(np.asarray(data), int(rate))
    path = Path(source)
    if not path.is_file():
        raise AudioDecodeError("The reference file could not be found on the server.")
    if path.stat().st_size == 0:
        raise AudioDecodeError("The reference file is empty (0 bytes).")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception:  # noqa: BLE001 - libsndfile raises several types for "not audio"
        data, rate = _decode_with_ffmpeg(path), SAMPLE_RATE
    return _from_array(data, int(rate))


def _from_array(data: np.ndarray, rate: int) -> DecodedAudio:
    if rate <= 0:
        raise AudioDecodeError(f"The reference has an invalid sample rate ({rate}).")
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2:  # (samples, channels), as soundfile and Gradio give it
        raise AudioDecodeError("The reference must be mono or multichannel audio samples.")
    if data.shape[0] == 0:
        return DecodedAudio(np.zeros(0, np.float32), rate, int(data.shape[1]))
    channels = int(data.shape[1])
    mono = _to_float(data).mean(axis=1)
    if mono.size and not np.all(np.isfinite(mono)):
        raise AudioDecodeError("The reference contains invalid samples (NaN or infinity).")
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak > 1.0:  # float files may exceed full scale; bring them back without clipping
        mono = mono / peak
    return DecodedAudio(resample(mono, rate), rate, channels)


def _to_float(data: np.ndarray) -> np.ndarray:
    if data.dtype == np.uint8:
        return (data.astype(np.float32) - 128.0) / 128.0
    if np.issubdtype(data.dtype, np.integer):
        return data.astype(np.float32) / float(np.iinfo(data.dtype).max + 1)
    return data.astype(np.float32)


def _decode_with_ffmpeg(path: Path) -> np.ndarray:
    cmd = [ffmpeg_executable(), "-v", "error", "-nostdin", "-i", str(path), "-vn", "-ac", "1"]
    cmd += ["-ar", str(SAMPLE_RATE), "-f", "f32le", "-"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AudioDecodeError("The reference could not be decoded.") from exc
    if done.returncode != 0:
        raise AudioDecodeError("The reference is not audio, or the file is corrupt.")
    return np.frombuffer(done.stdout, dtype=np.float32)[:, None]
