"""The WAV the speech API writes: streamed with the "until the end" sizes, or whole with its
real sizes, which every reader (soundfile here, `soxi`, players) then reports exactly."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf

from tts_core.server.audio_formats import UNKNOWN_SIZE, make_encoder, pcm16_bytes


def encode(streamed: bool, pieces: list[np.ndarray], rate: int = 24_000) -> bytes:
    out: list[bytes] = []
    encoder = make_encoder("wav", out.append, rate, streamed=streamed)
    for piece in pieces:
        encoder.feed(piece)
    encoder.finish()
    return b"".join(out)


def test_a_whole_wav_has_its_real_sizes() -> None:
    rng = np.random.default_rng(0)
    pieces = [rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in (3840, 0, 11520, 1920)]
    data = encode(False, pieces, rate=48_000)
    samples = sum(p.size for p in pieces)
    assert int.from_bytes(data[4:8], "little") == 36 + 2 * samples  # RIFF size
    assert int.from_bytes(data[40:44], "little") == 2 * samples  # data size
    info = sf.info(io.BytesIO(data))
    assert (info.frames, info.samplerate) == (samples, 48_000)
    assert data[44:] == b"".join(pcm16_bytes(p) for p in pieces)


def test_a_streamed_wav_says_until_the_end_and_sends_each_piece_at_once() -> None:
    out: list[bytes] = []
    encoder = make_encoder("wav", out.append, 24_000, streamed=True)
    encoder.feed(np.zeros(1920, np.float32))
    assert len(out) == 1 and int.from_bytes(out[0][40:44], "little") == UNKNOWN_SIZE
    encoder.finish()


def test_an_empty_whole_wav_is_a_valid_empty_file() -> None:
    data = encode(False, [])
    assert len(data) == 44 and sf.info(io.BytesIO(data)).frames == 0
