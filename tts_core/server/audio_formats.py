"""Streaming encoders for the speech API: float32 chunks at the engine's rate in, bytes out.

`wav` and `pcm` are written here (16-bit little-endian mono, as OpenAI's `pcm` is); `mp3`,
`opus` (Ogg), `flac` and `aac` (ADTS) go through one ffmpeg process per response, fed on stdin
and drained by a reader thread so that encoded bytes are sent as soon as ffmpeg emits them.

A streamed WAV cannot know its length up front: its RIFF and data sizes are 0xFFFFFFFF, the
convention for "until the end of the stream" that players and libsndfile accept. A response
sent whole (`streamed=False`) has its exact sizes: the bytes are held until the end.
"""

from __future__ import annotations

import struct
import subprocess
import threading
from collections.abc import Callable

import numpy as np

from ..audio import SAMPLE_RATE, to_int16
from ..audio.ffmpeg import ffmpeg_executable

CONTENT_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "flac": "audio/flac",
    "aac": "audio/aac",
}
FORMATS = tuple(CONTENT_TYPES)
UNKNOWN_SIZE = 0xFFFFFFFF
# response_format -> ffmpeg output arguments (input is s16le mono at the stream's rate on stdin)
_FFMPEG_OUTPUT = {
    "mp3": ["-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"],
    "opus": ["-c:a", "libopus", "-b:a", "32k", "-application", "voip", "-f", "ogg"],
    "flac": ["-c:a", "flac", "-f", "flac"],
    "aac": ["-c:a", "aac", "-b:a", "64k", "-f", "adts"],
}
# encoded by an ffmpeg process: their bytes come from its reader thread, not from `feed`
THREADED_FORMATS = frozenset(_FFMPEG_OUTPUT)


def wav_header(data_bytes: int = UNKNOWN_SIZE, rate: int = SAMPLE_RATE) -> bytes:
    """44-byte header of a 16-bit mono PCM WAV; UNKNOWN_SIZE for a stream of unknown length."""
    riff_size = UNKNOWN_SIZE if data_bytes == UNKNOWN_SIZE else 36 + data_bytes
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)  # PCM, mono, 16-bit
    riff = struct.pack("<4sI4s4sI", b"RIFF", riff_size, b"WAVE", b"fmt ", len(fmt))
    return riff + fmt + b"data" + struct.pack("<I", data_bytes)


def pcm16_bytes(audio: np.ndarray) -> bytes:
    """(N,) float32 -> N little-endian int16 samples."""
    return to_int16(audio).astype("<i2").tobytes()


Sink = Callable[[bytes], None]


class Encoder:
    """feed(chunk) and finish() hand encoded bytes to `sink` as soon as they exist.

    Fed on the event loop (speech_output.speech_bytes); `sink` must be thread-safe (ffmpeg's
    output is handed over from its reader thread).
    """

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def feed(self, audio: np.ndarray) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Flush everything; returns once the last byte went to the sink."""

    def close(self) -> None:
        """Release resources early (client gone); safe to call twice."""


class PcmEncoder(Encoder):
    def feed(self, audio: np.ndarray) -> None:
        if audio.size:
            self.sink(pcm16_bytes(audio))


class WavEncoder(Encoder):
    def __init__(self, sink: Sink, rate: int = SAMPLE_RATE) -> None:
        super().__init__(sink)
        self.rate = rate
        self._header_sent = False

    def feed(self, audio: np.ndarray) -> None:
        head = b"" if self._header_sent else wav_header(rate=self.rate)
        self._header_sent = True
        self.sink(head + pcm16_bytes(audio))

    def finish(self) -> None:
        if not self._header_sent:
            self.sink(wav_header(0, self.rate))


class WholeWavEncoder(Encoder):
    """A WAV whose header has its real sizes: everything is held until `finish`."""

    def __init__(self, sink: Sink, rate: int = SAMPLE_RATE) -> None:
        super().__init__(sink)
        self.rate = rate
        self._pieces: list[bytes] = []

    def feed(self, audio: np.ndarray) -> None:
        if audio.size:
            self._pieces.append(pcm16_bytes(audio))

    def finish(self) -> None:
        data = b"".join(self._pieces)
        self._pieces = []
        self.sink(wav_header(len(data), self.rate) + data)

    def close(self) -> None:
        self._pieces = []


class FfmpegEncoder(Encoder):
    def __init__(self, sink: Sink, response_format: str, rate: int = SAMPLE_RATE) -> None:
        super().__init__(sink)
        cmd = [ffmpeg_executable(), "-hide_banner", "-loglevel", "error", "-nostdin"]
        cmd += ["-f", "s16le", "-ar", str(rate), "-ac", "1", "-i", "pipe:0"]
        cmd += [*_FFMPEG_OUTPUT[response_format], "-flush_packets", "1", "pipe:1"]
        # its own session: a signal to the app's process group (systemd's stop, Ctrl-C) reaches
        # the app alone, which drains the responses in flight; ffmpeg ends when its stdin does
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="ffmpeg-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self._proc.stdout
        while stdout is not None:
            block = stdout.read1(65536)
            if not block:
                return
            self.sink(block)

    def feed(self, audio: np.ndarray) -> None:
        if self._proc.stdin is not None and audio.size:
            self._proc.stdin.write(pcm16_bytes(audio))
            self._proc.stdin.flush()

    def finish(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._reader.join(timeout=60)
        self._proc.wait(timeout=10)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=5)


def make_encoder(
    response_format: str, sink: Sink, rate: int = SAMPLE_RATE, streamed: bool = True
) -> Encoder:
    """`rate`: of the audio fed in (the engine's native rate), kept in the output. `streamed`
    False: a WAV gets its real sizes (other formats are the same either way)."""
    if response_format == "pcm":
        return PcmEncoder(sink)
    if response_format == "wav":
        return WavEncoder(sink, rate) if streamed else WholeWavEncoder(sink, rate)
    if response_format in _FFMPEG_OUTPUT:
        return FfmpegEncoder(sink, response_format, rate)
    raise ValueError(f"unknown response_format {response_format!r}")
