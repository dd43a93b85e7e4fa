"""The built-in voices are what voices.json says they are: real recordings with their source,
licence and checksum recorded, synthetic clips labelled as such."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from tts_core.server.voices import BUILTIN_FOLDER, VoiceRegistry

sys.path.insert(0, str(BUILTIN_FOLDER))  # make_voices.py: the joining's pause

MANIFEST = json.loads((BUILTIN_FOLDER / "voices.json").read_text())
RECORDED = {name: entry for name, entry in MANIFEST.items() if entry.get("recorded")}


def test_real_recordings_have_source_licence_and_checksum():
    assert set(RECORDED) == {"arctic-slt", "arctic-awb"}
    for entry in RECORDED.values():
        clip = BUILTIN_FOLDER / entry["file"]
        assert hashlib.sha256(clip.read_bytes()).hexdigest() == entry["sha256"]
        licence = (BUILTIN_FOLDER / entry["license"]).read_text()
        assert "Carnegie Mellon University" in licence and "any purpose" in licence
        assert entry["source"] and entry["transcript_source"] and entry["transcript"]
        assert "real recording" in entry["description"]


def test_joined_recordings_are_their_unmodified_sources_twice_and_marked_modified():
    """The sources ship one utterance per speaker, so each recorded voice is it twice with a
    pause (make_voices.joined_twice): sample for sample the source's, which is unmodified."""
    from make_voices import PAUSE_S  # assets/voices (on sys.path below)

    for entry in RECORDED.values():
        source = BUILTIN_FOLDER / entry["source_file"]
        assert hashlib.sha256(source.read_bytes()).hexdigest() == entry["source_sha256"]
        original, rate = sf.read(str(source), dtype="int16")
        joined, joined_rate = sf.read(str(BUILTIN_FOLDER / entry["file"]), dtype="int16")
        pause = np.zeros(round(PAUSE_S * rate), dtype=np.int16)
        assert joined_rate == rate
        np.testing.assert_array_equal(joined, np.concatenate([original, pause, original]))
        assert entry["modified"].startswith("MODIFIED") and "twice" in entry["modified"]
        once = entry["transcript"][: len(entry["transcript"]) // 2]
        assert entry["transcript"] == f"{once} {once}"


def test_every_built_in_voice_is_long_enough_for_every_model():
    """Issue 36: all 13 were 2.8-4.0 s, and Chatterbox Turbo refuses 5 s or less."""
    from tts_core.backends import backend_classes
    from tts_core.engine.backend import reference_needs
    from tts_core.server.voice_fit import clip_seconds

    registry = VoiceRegistry(Path("/nonexistent-voices"))
    for voice in registry.list():
        seconds = clip_seconds(voice.reference)
        assert seconds is not None and 5.5 <= seconds <= 10.0, (voice.name, seconds)
        for cls in backend_classes():
            assert reference_needs(cls).fits(seconds), (voice.name, cls.__name__)


def test_real_recordings_are_usable_reference_clips():
    registry = VoiceRegistry(Path("/nonexistent-voices"))
    pitches = {}
    for name in RECORDED:
        audio, rate = sf.read(str(registry.get(name).reference), dtype="float32")
        assert audio.ndim == 1 and 5.5 <= audio.size / rate <= 10.0  # every model takes it
        assert 0.1 < np.abs(audio).max() < 1.0  # speech, not clipped
        pitches[name] = _median_f0(audio, rate)
    assert pitches["arctic-slt"] > 160 > 140 > pitches["arctic-awb"]  # female / male as listed


def test_synthetic_clips_say_so():
    for entry in MANIFEST.values():
        assert entry.get("recorded") or "synthetic eSpeak NG" in entry["description"]


def _median_f0(audio: np.ndarray, rate: int) -> float:
    """Median pitch by autocorrelation over voiced 40 ms frames (enough to tell the two apart)."""
    frame, estimates = int(0.04 * rate), []
    for start in range(0, audio.size - frame, frame):
        x = audio[start : start + frame] - audio[start : start + frame].mean()
        if np.sqrt(np.mean(x**2)) < 0.02:
            continue
        ac = np.correlate(x, x, "full")[frame - 1 :]
        low, high = rate // 400, rate // 60
        estimates.append(rate / (low + int(np.argmax(ac[low:high]))))
    return float(np.median(estimates))


def test_the_built_in_recordings_are_prepared_before_the_first_click(engine, monkeypatch):
    """app.warm_builtin_voices (run while the status says "warming"): a request with a built-in
    recording, with its transcript or without, then finds its voice in the engine's cache."""
    import app

    app.warm_builtin_voices(engine)

    def no_new_voice(*_args, **_kwargs):
        raise AssertionError("the voice was built again")

    monkeypatch.setattr(engine.backend, "create_voice", no_new_voice)
    for entry in RECORDED.values():
        for transcript in (entry["transcript"], None):
            engine.prepare_voice(BUILTIN_FOLDER / entry["file"], transcript)  # from the cache
