"""Decode a reference clip from a file path, raw file bytes, or an in-memory (rate, array) pair.

Anything soundfile reads (WAV 8/16/24/32-bit int and float, FLAC, OGG, MP3) is read directly;
other containers (webm/m4a from a browser microphone) go through ffmpeg. Output is float32
mono at 24 kHz plus facts about the original, for messages.

ffmpeg reads one local file and nothing else: its demuxers are limited to audio containers
(`FFMPEG_DEMUXERS`) and its protocols to `file`. Playlists and manifests (HLS .m3u8, DASH .mpd,
ffconcat) would have it open other files of the server's disk and hand their audio back as
"the clip"; they are text, and a text file is refused before ffmpeg sees it.

Cost is bounded by what is kept, never by what a header claims: the header is read first
(absurd rates and channel counts are refused), only the first `max_seconds` are read, in
blocks that are mixed to mono as they arrive, and only the kept part is resampled. A 10 KB WAV
whose header says 1 Hz would otherwise describe 5000 s of audio to resample to 24 kHz.

The mix to mono is the channels' mean, except where the mean cancels what the channels carry
(a stereo clip with one channel's polarity inverted, L = -R): there the first channel is kept
(`MonoMix`), so such a clip is neither refused as "silent" nor cloned from near-silence.
Containers read by ffmpeg are mixed by ffmpeg (`-ac 1`); where that mix is near silence, the
first channel is decoded too, and kept when the mix had cancelled it.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from .ffmpeg import ffmpeg_executable
from .pcm import SAMPLE_RATE, resample

MIN_RATE, MAX_RATE = 4_000, 384_000  # telephone speech .. the highest rate studio gear records
MAX_CHANNELS = 8  # 7.1 surround; more is not a voice recording
BLOCK_FRAMES = 65_536  # frames per read: memory per block is this x channels x 4 bytes
DEFAULT_MAX_SECONDS = 600.0  # when a caller sets no cut: still a bound
# ffmpeg's demuxers of audio containers (mov: mp4/m4a/3gp; matroska: webm/mkv; asf: wma): none
# of them opens another file (mov's external references are off unless asked for)
FFMPEG_DEMUXERS = (
    "mov",
    "matroska",
    "ogg",
    "mp3",
    "aac",
    "ac3",
    "eac3",
    "dts",
    "amr",
    "caf",
    "wv",
    "tta",
    "asf",
    "mpegts",
    "mpeg",
    "avi",
    "flv",
    "voc",
    "wav",
    "w64",
    "flac",
    "aiff",
    "au",
    "ape",
    "mpc",
    "mpc8",
)
TEXT_HEAD_BYTES = 4096  # what is looked at to tell a text file (a playlist) from audio
PLAYLIST_MARKERS = (b"#extm3u", b"<mpd", b"ffconcat", b"<smil", b"[playlist]", b"<asx")

Source = str | Path | bytes | tuple[int, np.ndarray]


class AudioDecodeError(ValueError):
    """The input is not decodable audio; the message is meant for the user."""


@dataclass
class DecodedAudio:
    audio: np.ndarray  # (N,) float32 mono, SAMPLE_RATE; at most max_seconds of it
    original_rate: int
    channels: int
    original_seconds: float | None  # of the whole input; None: longer than kept, length unknown

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE

    @property
    def was_cut(self) -> bool:
        if self.original_seconds is None:
            return True
        return self.original_seconds > self.seconds + 1.0 / SAMPLE_RATE


def decode_reference(source: Source, max_seconds: float | None = None) -> DecodedAudio:
    """The first `max_seconds` of `source` as 24 kHz float32 mono (AudioDecodeError if not audio)."""
    limit = float(max_seconds) if max_seconds is not None else DEFAULT_MAX_SECONDS
    if isinstance(source, tuple):
        rate, data = source
        return _from_array(np.asarray(data), int(rate), limit)
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        if not data:
            raise AudioDecodeError("The reference file is empty (0 bytes).")
        return _decode_file(lambda: io.BytesIO(data), data, limit)
    path = Path(source)
    if not path.is_file():
        raise AudioDecodeError("The reference file could not be found on the server.")
    if path.stat().st_size == 0:
        raise AudioDecodeError("The reference file is empty (0 bytes).")
    return _decode_file(lambda: str(path), path, limit)


def _decode_file(open_source, original: Path | bytes, limit: float) -> DecodedAudio:  # noqa: ANN001
    try:
        info = sf.info(open_source())
    except Exception:  # noqa: BLE001 - libsndfile raises several types for "not audio"
        return _decode_with_ffmpeg(original, limit)
    rate, channels = _check_header(int(info.samplerate), int(info.channels))
    keep = min(int(info.frames), math.ceil(limit * rate))
    try:
        mono = _read_mono(open_source(), keep)
    except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
        raise AudioDecodeError("The reference is not audio, or the file is corrupt.") from exc
    return _finish(mono, rate, channels, int(info.frames) / rate, limit)


def _check_header(rate: int, channels: int) -> tuple[int, int]:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioDecodeError(
            f"The reference has an unsupported sample rate ({rate} Hz); "
            f"{MIN_RATE // 1000}-{MAX_RATE // 1000} kHz is accepted."
        )
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioDecodeError(
            f"The reference has {channels} channels; at most {MAX_CHANNELS} are accepted."
        )
    return rate, channels


# the mean keeps under a tenth of the loudest channel's energy (-10 dB): the channels cancel.
# A stereo clip with one silent channel mixes to -6 dB of the other, so it keeps the mean.
CANCELLED_ENERGY = 0.1
NEAR_SILENCE = 10 ** (-50 / 20)  # Limits.silence_peak: a mix this quiet may have cancelled


class MonoMix:
    """(frames, channels) float32 blocks in, one mono signal out: the channels' mean, or the
    first channel where the mean cancels (see the module docstring). Holds the mean and, for
    several channels, the first channel: twice the mono signal, never all the channels."""

    def __init__(self) -> None:
        self.means: list[np.ndarray] = []
        self.firsts: list[np.ndarray] = []
        self.mean_energy = 0.0
        self.channel_energy: np.ndarray | None = None

    def add(self, block: np.ndarray) -> None:
        mean = block.mean(axis=1, dtype=np.float32)
        self.means.append(mean)
        if block.shape[1] == 1:
            return
        self.firsts.append(np.ascontiguousarray(block[:, 0]))
        energy = np.square(block, dtype=np.float64).sum(axis=0)
        self.channel_energy = (
            energy if self.channel_energy is None else self.channel_energy + energy
        )
        self.mean_energy += float(np.square(mean, dtype=np.float64).sum())

    def mono(self) -> np.ndarray:
        if not self.means:
            return np.zeros(0, np.float32)
        loudest = 0.0 if self.channel_energy is None else float(self.channel_energy.max())
        cancelled = self.mean_energy < CANCELLED_ENERGY * loudest
        return np.concatenate(self.firsts if cancelled else self.means)


def _read_mono(file, frames: int) -> np.ndarray:  # noqa: ANN001 - a path or a file object
    """The first `frames` frames, mixed to mono block by block: (frames,) float32."""
    if frames <= 0:
        return np.zeros(0, np.float32)
    blocks = sf.blocks(file, blocksize=BLOCK_FRAMES, frames=frames, dtype="float32", always_2d=True)
    mix = MonoMix()
    for block in blocks:
        mix.add(block)
    return mix.mono()


def _from_array(data: np.ndarray, rate: int, limit: float) -> DecodedAudio:
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2:  # (samples, channels), as soundfile and Gradio give it
        raise AudioDecodeError("The reference must be mono or multichannel audio samples.")
    rate, channels = _check_header(rate, int(data.shape[1]))
    total = data.shape[0]
    kept = data[: math.ceil(limit * rate)]
    mix = MonoMix()
    if kept.size:
        mix.add(_to_float(kept))
    return _finish(mix.mono(), rate, channels, total / rate, limit)


def _finish(
    mono: np.ndarray, rate: int, channels: int, original_seconds: float | None, limit: float
) -> DecodedAudio:
    if mono.size and not np.all(np.isfinite(mono)):
        raise AudioDecodeError("The reference contains invalid samples (NaN or infinity).")
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak > 1.0:  # float files may exceed full scale; bring them back without clipping
        mono = mono / peak
    audio = resample(mono, rate)[: math.ceil(limit * SAMPLE_RATE)]
    return DecodedAudio(audio, rate, channels, original_seconds)


def _to_float(data: np.ndarray) -> np.ndarray:
    if data.dtype == np.uint8:
        return (data.astype(np.float32) - 128.0) / 128.0
    if np.issubdtype(data.dtype, np.integer):
        return data.astype(np.float32) / float(np.iinfo(data.dtype).max + 1)
    return data.astype(np.float32)


def _decode_with_ffmpeg(original: Path | bytes, limit: float) -> DecodedAudio:
    """Containers libsndfile cannot read. ffmpeg stops after `limit` seconds (+ one sample to
    tell a longer input), and its output is capped at that size whatever it does."""
    keep_s = limit + 1.0 / SAMPLE_RATE
    max_bytes = math.ceil(keep_s * SAMPLE_RATE) * 4
    refuse_playlist(_head(original))
    if isinstance(original, bytes):
        with tempfile.TemporaryDirectory(prefix="tts_core-decode-") as folder:
            path = Path(folder) / "clip"
            path.write_bytes(original)  # mp4/m4a need a seekable input, so no pipe
            samples = _ffmpeg_mono(path, keep_s, max_bytes)
    else:
        samples = _ffmpeg_mono(original, keep_s, max_bytes)
    cut = samples.size > math.ceil(limit * SAMPLE_RATE)
    decoded = _finish(samples.copy(), SAMPLE_RATE, 1, samples.size / SAMPLE_RATE, limit)
    if cut:  # ffmpeg stopped reading: the true length is unknown, only that it is longer
        decoded.original_seconds = None
    return decoded


def _ffmpeg_mono(path: Path, seconds: float, max_bytes: int) -> np.ndarray:
    """ffmpeg's mix to mono; where that is near silence, its first channel if the mix cancelled
    it (MonoMix's rule; a second decode, for near-silent clips only)."""
    mix = _f32(_run_ffmpeg(path, seconds, max_bytes))
    if mix.size == 0 or float(np.max(np.abs(mix))) >= NEAR_SILENCE:
        return mix
    first = _f32(_run_ffmpeg(path, seconds, max_bytes, ["-af", "pan=mono|c0=c0"]))
    energy = float(np.square(first, dtype=np.float64).sum())
    return (
        first if float(np.square(mix, dtype=np.float64).sum()) < CANCELLED_ENERGY * energy else mix
    )


def _f32(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw[: len(raw) - len(raw) % 4], dtype=np.float32)


def _head(original: Path | bytes) -> bytes:
    if isinstance(original, bytes):
        return original[:TEXT_HEAD_BYTES]
    try:
        with open(original, "rb") as file:
            return file.read(TEXT_HEAD_BYTES)
    except OSError as exc:
        raise AudioDecodeError("The reference file could not be read.") from exc


def refuse_playlist(head: bytes) -> None:
    """AudioDecodeError when the file starts as text (a playlist, a manifest, a concat list)
    or names a playlist format: an audio container's first bytes are binary (sizes, NULs,
    frame syncs of 0xFF) within a few dozen bytes."""
    lowered = head.lower()
    if any(marker in lowered for marker in PLAYLIST_MARKERS) or _is_text(head):
        raise AudioDecodeError(
            "The reference is a text file (a playlist or manifest?), not audio; "
            "send the audio file itself."
        )


def _is_text(head: bytes) -> bool:
    if not head.strip():
        return bool(head)  # only whitespace: not audio either
    if any(byte < 0x20 and byte not in b"\t\n\r\f" for byte in head):
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # only a character cut by the head's end
    return True


def _run_ffmpeg(
    path: Path, seconds: float, max_bytes: int, mono: tuple[str, ...] | list[str] = ("-ac", "1")
) -> bytes:
    cmd = [ffmpeg_executable(), "-v", "error", "-nostdin"]
    cmd += ["-protocol_whitelist", "file", "-format_whitelist", ",".join(FFMPEG_DEMUXERS)]
    # "file:" + an absolute path: a name such as "concat:a|b" or "subfile,,..." is a file too
    cmd += ["-i", f"file:{os.path.abspath(path)}", "-vn", *mono]
    cmd += ["-ar", str(SAMPLE_RATE), "-t", f"{seconds:.6f}", "-fs", str(max_bytes)]
    cmd += ["-f", "f32le", "-"]
    try:
        # its own session: a group signal (Ctrl-C) reaches the app, which drains, not ffmpeg
        done = subprocess.run(
            cmd, capture_output=True, timeout=60, check=False, start_new_session=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AudioDecodeError("The reference could not be decoded.") from exc
    if done.returncode != 0:
        raise AudioDecodeError("The reference is not audio, or the file is corrupt.")
    return done.stdout[:max_bytes]


# A base64 data URL (RFC 2397), as vLLM-Omni's clients send a reference clip in JSON: the
# media type (optional), its parameters, then ";base64,". Only the clip itself is accepted:
# nothing named by a URL is ever fetched, so no request can make the server reach elsewhere.
DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+\"-]+)*;base64,", re.I)
AUDIO_MEDIA = ("audio/", "video/")  # video/webm, video/mp4: a browser's recording containers


class DataUrlTooLarge(AudioDecodeError):
    """The data URL carries more bytes than allowed (an HTTP 413, not a 400)."""


def base64_length(max_bytes: int) -> int:
    """Characters of base64 that carry `max_bytes` bytes (4 for every 3, padded)."""
    return 4 * -(-max_bytes // 3)


def decode_data_url(value: str, max_bytes: int) -> bytes:
    """The file bytes of `data:audio/wav;base64,UklGR...` (at most `max_bytes`). A URL to
    fetch (http, https, file) or plain base64 without the `data:` head is refused with a
    message saying what to send; so are another media type, bad base64 and an empty clip."""
    if value[:8].lower().startswith(("http://", "https://", "file:")):
        raise AudioDecodeError(
            "this server does not fetch URLs; send the clip itself as a "
            "base64 data URL (data:audio/wav;base64,...)."
        )
    match = DATA_URL.match(value)
    if match is None:
        raise AudioDecodeError("expected a base64 data URL such as data:audio/wav;base64,...")
    mime = (match["mime"] or "").lower()
    if mime and not mime.startswith(AUDIO_MEDIA) and mime != "application/octet-stream":
        raise AudioDecodeError(f"the data URL holds {mime}, not audio.")
    encoded = value[match.end() :]
    if len(encoded) > base64_length(max_bytes):  # refused before decoding anything
        raise DataUrlTooLarge(f"the clip is larger than {max_bytes / 1024**2:g} MB.")
    try:
        data = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise AudioDecodeError("the data URL's base64 is not valid.") from None
    if len(data) > max_bytes:
        raise DataUrlTooLarge(f"the clip is larger than {max_bytes / 1024**2:g} MB.")
    if not data:
        raise AudioDecodeError("the clip is empty (0 bytes).")
    return data
