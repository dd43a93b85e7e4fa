"""Reference clips cost what is kept, not what a header claims (decoding bombs), and a clip
cut to the limit never keeps a transcript that no longer matches it."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tts_core.audio import SAMPLE_RATE, AudioDecodeError, decode_reference
from tts_core.audio import decode as decode_module
from tts_core.engine import InputError, Limits, SynthesisRequest
from tts_core.engine.validation import prepare_reference

# Peak memory a decode may add. The legitimate worst case kept here is 30 s at 8 kHz mono plus
# its 24 kHz resampling (~4 MB); 100 MB leaves room for allocator slack while the bombs below
# used +0.9 GB to +15 GB before the fix.
MAX_EXTRA_RSS_MB = 100

_MEASURE = """
import json, resource, sys, time
from tts_core.audio import decode_reference
from tts_core.engine import InputError, Limits
from tts_core.engine.validation import prepare_reference
import soundfile
prepare_reference(sys.argv[2], Limits())  # warm: imports, soxr, libsndfile
frames_read, read = [0], soundfile.SoundFile.read
def counted_read(self, *args, **kwargs):
    out = read(self, *args, **kwargs)
    frames_read[0] += len(out)
    return out
soundfile.SoundFile.read = counted_read
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
try:
    audio, notices = prepare_reference(sys.argv[1], Limits(max_reference_s=30.0))
    result = {"seconds": audio.size / 24000, "notices": notices}
except InputError as exc:
    result = {"error": str(exc)}
result["extra_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
result["elapsed_s"] = time.perf_counter() - started
result["frames_read"] = frames_read[0]
print(json.dumps(result))
"""


def measure(path: Path, warm_clip: str) -> dict:
    """prepare_reference(path) in a fresh process: its result and the peak RSS it added."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), warm_clip],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture()
def warm_clip(write_clip, speech_like) -> str:
    return write_clip("warm.wav", speech_like(2.0, 24_000))


def test_wav_whose_header_claims_1_hz_is_refused_cheaply(tmp_path, warm_clip):
    """The issue's probe: 10 KB of samples, header rate 1 Hz = 5000 s to resample."""
    x = (np.sin(np.arange(5000) * 0.3) * 8000).astype(np.int16)
    bomb = tmp_path / "bomb.wav"
    sf.write(bomb, x, 24000, subtype="PCM_16")
    data = bytearray(bomb.read_bytes())
    data[24:28] = struct.pack("<I", 1)  # sample rate
    data[28:32] = struct.pack("<I", 2)  # byte rate
    bomb.write_bytes(bytes(data))
    result = measure(bomb, warm_clip)
    assert "unsupported sample rate (1 Hz)" in result["error"]
    assert result["extra_mb"] < MAX_EXTRA_RSS_MB


def test_flac_of_an_hour_reads_only_the_kept_seconds(tmp_path, warm_clip):
    """~100 KB of FLAC (an hour of a constant at 8 kHz) decodes only its first 30 s."""
    path = tmp_path / "hour.flac"
    block = np.full(8000 * 60, 0.25, np.float32)
    with sf.SoundFile(path, "w", 8000, 1, subtype="PCM_16") as out:
        for _ in range(60):
            out.write(block)
    assert path.stat().st_size < 2_000_000
    result = measure(path, warm_clip)
    assert result["seconds"] == pytest.approx(30.0, abs=1e-3)
    assert "3600.0 s long" in result["notices"][0]
    assert result["extra_mb"] < MAX_EXTRA_RSS_MB
    # what is decoded, not how long it takes: the kept 30 s of the hour's 28.8 M frames
    assert result["frames_read"] == 30 * 8000


def _wav_header(rate: int, channels: int, frames: int) -> bytes:
    data_bytes = frames * channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * channels * 2, channels * 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", data_bytes)
    )


@pytest.mark.parametrize(
    ("rate", "channels", "message"),
    [
        (3_999, 1, "unsupported sample rate"),
        (400_000, 1, "unsupported sample rate"),
        (24_000, 9, "9 channels"),
        (24_000, 1024, "1024 channels"),  # libsndfile itself refuses more than 1024
    ],
)
def test_absurd_rates_and_channel_counts_are_refused(rate, channels, message):
    clip = _wav_header(rate, channels, 4800) + bytes(4800 * channels * 2)
    with pytest.raises(AudioDecodeError, match=message):
        decode_reference(clip)
    with pytest.raises(InputError, match=message):  # an in-memory pair is held to the same
        prepare_reference((rate, np.zeros((10, channels), np.int16)), Limits())


def test_header_claiming_more_frames_than_the_file_has_reads_what_is_there():
    clip = _wav_header(24_000, 1, 10**9) + (np.ones(24_000, np.int16) * 3000).tobytes()
    decoded = decode_reference(clip, max_seconds=30)
    assert decoded.audio.size <= 30 * SAMPLE_RATE


def test_in_memory_array_is_cut_before_resampling(monkeypatch):
    seen = []
    real = decode_module.resample
    monkeypatch.setattr(decode_module, "resample", lambda a, r: seen.append(a.size) or real(a, r))
    long = np.ones((16_000 * 600, 2), np.int16) * 1000  # 10 minutes, stereo
    decoded = decode_reference((16_000, long), max_seconds=30)
    assert seen == [16_000 * 30]
    assert decoded.audio.size == 30 * SAMPLE_RATE and decoded.was_cut


def test_ffmpeg_fallback_is_bounded(monkeypatch):
    """Containers libsndfile cannot read go through ffmpeg with -t, and its output is capped
    even if it ignored -t."""
    calls = []

    def fake_run(cmd, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(cmd)
        endless = np.full(SAMPLE_RATE * 100, 0.1, np.float32).tobytes()  # 100 s
        return subprocess.CompletedProcess(cmd, 0, endless, b"")

    monkeypatch.setattr(decode_module.subprocess, "run", fake_run)
    decoded = decode_reference(b"\x1aE\xdf\xa3 not a real webm", max_seconds=12)
    cmd = calls[0]
    assert float(cmd[cmd.index("-t") + 1]) == pytest.approx(12, abs=0.01)
    assert "-fs" in cmd
    assert decoded.audio.size == 12 * SAMPLE_RATE
    assert decoded.was_cut and decoded.original_seconds is None


def test_ffmpeg_decodes_a_real_m4a_from_bytes(tmp_path, speech_like):
    from tts_core.audio.ffmpeg import ffmpeg_executable

    wav, m4a = tmp_path / "v.wav", tmp_path / "v.m4a"
    sf.write(wav, speech_like(3.0, 24_000), 24_000)
    subprocess.run(
        [ffmpeg_executable(), "-v", "error", "-i", str(wav), "-c:a", "aac", str(m4a)],
        check=True,
        timeout=60,
    )
    decoded = decode_reference(m4a.read_bytes(), max_seconds=2.0)
    assert decoded.audio.size == 2 * SAMPLE_RATE and decoded.was_cut
    assert float(np.abs(decoded.audio).max()) > 0.1
    assert not list(tmp_path.glob("tts_core-decode-*"))


def test_long_clip_with_a_transcript_is_refused(write_clip, speech_like, engine):
    """The words of a transcript belong to the whole clip: pairing them with its first 30 s
    would teach the model the wrong alignment."""
    path = write_clip("long.wav", speech_like(40.0, 16_000), rate=16_000)
    with pytest.raises(InputError, match="transcript must match") as caught:
        prepare_reference(path, Limits(max_reference_s=30.0), has_transcript=True)
    assert caught.value.param == "reference"
    with pytest.raises(InputError, match="40.0 s long"):
        engine.stream(SynthesisRequest("Hello.", path, "the words of all forty seconds"))
    audio, notices = prepare_reference(path, Limits(max_reference_s=30.0))  # no transcript: cut
    assert audio.size == 30 * SAMPLE_RATE and "first 30 s" in notices[0]
    assert engine.admission.waiting == engine.admission.running == 0  # places given back


def test_registered_voice_with_a_transcript_must_fit_the_limit(tmp_path, write_clip, speech_like):
    from tts_core.server.voices import VoiceRegistry

    path = write_clip("long.wav", speech_like(35.0, 16_000), rate=16_000)
    registry = VoiceRegistry(tmp_path)
    with pytest.raises(InputError, match="transcript must match"):
        registry.register("long", path, "all the words", Limits(max_reference_s=30.0))
    voice = registry.register("long", path, None, Limits(max_reference_s=30.0))
    assert sf.info(str(voice.reference)).duration == pytest.approx(30.0, abs=1e-3)
