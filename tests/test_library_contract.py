"""One library contract for every model (issue 39 item 6): `tts_core.load_model(folder)`,
`create_voice(audio, sr, ref_text=None)` (or a path to an audio file), and
`stream`/`generate(text, voice, seed=..., <knob>=...)` with each model's knobs by name, the same
call on every tiny checkpoint; a knob a model does not read, and a `create_voice` argument that
is no clip, are refused with errors that say what to pass. (TADA is not registered with
`load_model` yet: it is not in this list.)
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import tts_core
from tts_core.backends.chatterbox import KNOBS as TURBO_KNOBS
from tts_core.backends.chatterbox_english import KNOBS as ENGLISH_KNOBS
from tts_core.backends.qwen3 import KNOBS as QWEN3_KNOBS
from tts_core.backends.voxcpm import KNOBS as VOXCPM_KNOBS
from tts_core.models.checkpoint import CheckpointError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHORT_CLIP = FIXTURES / "ref_clip_24k.wav"  # 3 s: VoxCPM2 tiny holds 4096 positions
LONG_CLIP = FIXTURES / "chatterbox-ref-44k.wav"  # 7 s: Chatterbox Turbo needs > 5 s
TEXT = "Hello world."
REF_TEXT = "A reference clip."
# knobs the backend declares that the library's stream does not read: the Perth watermark is the
# served stream's (model.generate(watermark=True) marks the whole clip)
SERVED_ONLY = {"watermark"}
STREAM_ONLY = {"first_chunk_tokens", "chunk_tokens"}  # Chatterbox's S3Gen passes: stream's


@dataclass(frozen=True)
class Case:
    folder: str
    clip: object
    knobs: tuple  # the backend's declared knobs (engine/knobs.py Knob), read by name
    cap: dict  # each model's own length cap, to keep a random tiny model short (not a knob)
    foreign: str  # a knob of another model, which this one refuses


CASES = [
    Case("qwen3-tiny-a", SHORT_CLIP, QWEN3_KNOBS, {"max_new_tokens": 12}, "cfg_value"),
    Case("voxcpm2-tiny", SHORT_CLIP, VOXCPM_KNOBS, {"max_len": 12}, "temperature"),
    Case("chatterbox-turbo-tiny-a", LONG_CLIP, TURBO_KNOBS, {"max_new_tokens": 12}, "cfg_value"),
    Case("chatterbox-english-tiny-a", LONG_CLIP, ENGLISH_KNOBS, {"max_new_tokens": 12}, "top_k"),
]
IDS = [case.folder for case in CASES]
_MODELS: dict[str, object] = {}


def model_of(case: Case):
    if case.folder not in _MODELS:
        _MODELS[case.folder] = tts_core.load_model(FIXTURES / case.folder)
    return _MODELS[case.folder]


def knob_values(case: Case, streamed: bool = True) -> dict:
    """Each library knob at the value a control starts at (declared default, else ui_value)."""
    left_out = SERVED_ONLY if streamed else SERVED_ONLY | STREAM_ONLY
    return {k.name: k.initial() for k in case.knobs if k.name not in left_out}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_same_calls_run_on_every_model(case):
    model = model_of(case)
    samples, rate = sf.read(case.clip, dtype="float32")
    for voice in (
        model.create_voice(case.clip),  # a path
        model.create_voice(samples, rate, ref_text=REF_TEXT),  # an array, with a transcript
    ):
        stream = model.stream(TEXT, voice, seed=5, **knob_values(case), **case.cap)
        audio = np.concatenate([chunk.audio for chunk in stream])
        assert stream.seed == 5 and audio.size > 0 and np.all(np.isfinite(audio))
        result = model.generate(TEXT, voice, seed=5, **knob_values(case, False), **case.cap)
        assert result.seed == 5 and result.audio.size > 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_knob_the_model_does_not_read_is_refused_by_name(case):
    model = model_of(case)
    voice = model.create_voice(case.clip)
    with pytest.raises(TypeError, match=case.foreign):
        model.stream(TEXT, voice, seed=1, **{case.foreign: 1}, **case.cap)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_create_voice_says_what_to_pass(case):
    model = model_of(case)
    with pytest.raises(TypeError, match="path to an audio file"):
        model.create_voice({"not": "a clip"}, 24000)
    with pytest.raises(TypeError, match="sample rate"):
        model.create_voice(np.zeros(24000, np.float32))  # an array without its rate


@pytest.mark.parametrize("case", CASES[:2], ids=IDS[:2])
def test_the_shared_chunk_sizes_by_name(case):
    """first_chunk_frames / chunk_frames (engine/knobs.py's shared knobs) cut Qwen3-TTS's and
    VoxCPM2's streams: a first chunk of 1 frame, later ones of 2. (Chatterbox cuts its stream by
    S3Gen passes, first_chunk_tokens / chunk_tokens: it refuses these names, listing its own.)"""
    model = model_of(case)
    voice = model.create_voice(case.clip)
    stream = model.stream(TEXT, voice, seed=3, first_chunk_frames=1, chunk_frames=2, **case.cap)
    chunks = list(stream)
    assert len(chunks) >= 3
    assert chunks[0].audio.size * 2 == chunks[1].audio.size  # 1 frame, then 2


@pytest.mark.parametrize("case", CASES[2:], ids=IDS[2:])
def test_chatterbox_knobs_by_name_equal_the_sampling_object(case):
    """temperature= by name gives the bytes TurboSampling/EnglishSampling(temperature=) gives:
    the sampling-object API keeps working, and the names mean the same."""
    model = model_of(case)
    voice = model.create_voice(case.clip)
    from tts_core.models.chatterbox.english_t3 import EnglishSampling
    from tts_core.models.chatterbox.sampling import TurboSampling

    kind = TurboSampling if "turbo" in case.folder else EnglishSampling
    by_name = model.generate(TEXT, voice, seed=2, temperature=0.6, **case.cap).audio
    by_object = model.generate(TEXT, voice, seed=2, sampling=kind(temperature=0.6), **case.cap)
    assert by_name.tobytes() == by_object.audio.tobytes()
    with pytest.raises(ValueError, match="temperature"):  # engine/knobs.py's declared range
        model.generate(TEXT, voice, seed=2, temperature=0.0, **case.cap)


def test_chatterbox_transcript_is_accepted_and_not_used():
    """Chatterbox clones from the clip alone (its backends declare reads_transcript False): a
    ref_text changes nothing."""
    case = CASES[2]
    model = model_of(case)
    plain = model.generate(TEXT, model.create_voice(case.clip), seed=4, **case.cap)
    with_text = model.create_voice(case.clip, ref_text=REF_TEXT)
    assert model.generate(TEXT, with_text, seed=4, **case.cap).audio.tobytes() == (
        plain.audio.tobytes()
    )


@pytest.mark.parametrize("folder", ["chatterbox-turbo-tiny-a", "chatterbox-english-tiny-a"])
def test_chatterbox_of_other_sizes_without_its_sizes_file_names_the_file(folder, tmp_path):
    copy = tmp_path / folder
    shutil.copytree(FIXTURES / folder, copy)
    (copy / "chatterbox_sizes.json").unlink()
    with pytest.raises(CheckpointError, match="chatterbox_sizes.json"):
        tts_core.load_model(copy)
