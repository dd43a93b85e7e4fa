"""Every bad input gets a clear InputError; odd but valid clips are decoded correctly."""

from __future__ import annotations

import numpy as np
import pytest

from tts_core.engine import (
    Engine,
    EngineConfig,
    InputError,
    Limits,
    SynthesisParams,
    SynthesisRequest,
)
from tts_core.engine.validation import prepare_reference

RATE = 24_000


def check(engine: Engine, text="Hello there.", reference=None, **params) -> None:
    engine.prepare(SynthesisRequest(text, reference, None, SynthesisParams(**params)))


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "enter some text"), ("   \n\t ", "enter some text"), ("x" * 1001, "limit is 1000")],
)
def test_bad_text(engine, text, message):
    with pytest.raises(InputError, match=message):
        check(engine, text)


@pytest.mark.parametrize(
    ("transcript", "message"), [(5, "must be a string"), ("word " * 500, "limit is 2000")]
)
def test_bad_reference_transcript(engine, transcript, message):
    with pytest.raises(InputError, match=message):
        engine.prepare(SynthesisRequest("Hello.", None, transcript, SynthesisParams()))


def test_blank_reference_transcript_means_none(engine):
    assert (
        engine.prepare(SynthesisRequest("Hello.", None, " \n ", SynthesisParams())).reference_text
        is None
    )


def test_unsupported_language(engine):
    with pytest.raises(InputError, match="Unsupported language 'klingon'"):
        check(engine, language="klingon")
    check(engine, language="French")  # case does not matter


class AllKnobs:
    """The eSpeak backend, declaring the knobs of Qwen3-TTS and VoxCPM2 (their own
    declarations): the engine checks the knobs of the backend it serves."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self._inner = inner

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._inner, name)

    @property
    def knobs(self) -> tuple:
        from tts_core.backends.qwen3 import Qwen3Backend
        from tts_core.backends.voxcpm import VoxCPMBackend

        return (*Qwen3Backend.knobs, *VoxCPMBackend.knobs)


@pytest.fixture()
def knobbed(espeak_backend) -> Engine:
    return Engine(AllKnobs(espeak_backend))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": 0}, r"temperature must be in \[0.01, 5\]; got 0"),
        ({"temperature": 1e-45}, "temperature"),  # the float32 floor (MIN_TEMPERATURE)
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]; got 1.5"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_k": 2.5}, r"top_k must be a whole number in \[0, 100000\]; got 2.5"),
        ({"top_k": -1}, "top_k"),
        ({"repetition_penalty": 1e-40}, r"repetition_penalty must be in \[0.1, 5\]"),
        ({"cfg_value": 10.5}, r"cfg_value must be in \[0, 10\]"),
        ({"inference_timesteps": 0}, r"inference_timesteps must be a whole number in \[1, 100\]"),
        ({"seed": "abc"}, "seed must be a whole number."),
        ({"seed": -2}, r"seed must be a whole number in \[-1, 4294967295\]"),
        ({"seed": 2**32}, "seed"),
        ({"first_chunk_frames": 0}, "first_chunk_frames"),
        ({"chunk_frames": 1000}, r"chunk_frames must be a whole number in \[1, 100\]"),
    ],
)
def test_bad_parameters(knobbed, params, message):
    with pytest.raises(InputError, match=message) as caught:
        check(knobbed, **params)
    assert caught.value.param == next(iter(params))


def test_good_parameters_are_typed_and_unset_ones_are_left_out(knobbed):
    params = knobbed.prepare(
        SynthesisRequest(
            "Hi.",
            None,
            None,
            SynthesisParams(
                top_k=50.0,
                top_p=1.0,
                temperature="0.7",
                seed=-1,
                inference_timesteps=None,
            ),
        )
    ).params
    drawn = params.values.pop("seed")  # -1: random, drawn once here (models/contract.py)
    assert params.values == {"top_k": 50, "top_p": 1.0, "temperature": 0.7}
    assert type(params.values["top_k"]) is int and isinstance(drawn, int) and drawn >= 0
    assert (params.first_chunk_frames, params.chunk_frames) == (2, 6)  # the declared defaults


def test_the_chunk_limit_comes_from_the_engines_limits(espeak_backend):
    engine = Engine(espeak_backend, EngineConfig(limits=Limits(max_chunk_frames=8)))
    check(engine, chunk_frames=8)
    with pytest.raises(InputError, match=r"chunk_frames must be a whole number in \[1, 8\]"):
        check(engine, chunk_frames=9)


def test_knobs_the_backend_does_not_have_are_left_out(engine):
    """eSpeak reads no sampling knob: its engine neither checks nor passes them on (the page
    and the HTTP routes check every known backend's knobs themselves)."""
    params = engine.prepare(
        SynthesisRequest(
            "Hi.",
            None,
            None,
            SynthesisParams(
                temperature=99,
                cfg_value="x",
                seed=4,
            ),
        )
    ).params
    assert params.values == {"seed": 4}


def test_missing_reference_where_needed(espeak_backend):
    class NeedsReference:  # the eSpeak backend, declared as needing a reference
        def __getattr__(self, name):
            return getattr(espeak_backend, name)

        needs_reference = True

    engine = Engine(NeedsReference())
    with pytest.raises(InputError, match="needs a reference clip"):
        check(engine)


def test_corrupt_and_non_audio_files(engine, tmp_path):
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(256)) * 4)
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio at all\n" * 50)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    for path, message in [(corrupt, "corrupt"), (text, "not audio"), (empty, "empty")]:
        with pytest.raises(InputError, match=message):
            check(engine, reference=str(path))
    with pytest.raises(InputError, match="could not be found"):
        check(engine, reference=str(tmp_path / "missing.wav"))


def test_zero_length_silent_and_short_clips(engine, speech_like, write_clip):
    cases = [
        (write_clip("zero.wav", np.zeros(0, np.float32)), "zero length"),
        (write_clip("silent.wav", np.zeros(3 * RATE, np.float32)), "silent"),
        (write_clip("short.wav", speech_like(0.6, RATE)), "0.60 s long"),
    ]
    for path, message in cases:
        with pytest.raises(InputError, match=message):
            check(engine, reference=path)


def test_long_clip_is_cut_with_a_notice(write_clip, speech_like):
    path = write_clip("long.wav", speech_like(40.0, 16_000), rate=16_000)
    audio, notices = prepare_reference(path, Limits(max_reference_s=12.0))
    assert audio.size == 12 * RATE
    assert "40.0 s long" in notices[0] and "first 12 s" in notices[0]


@pytest.mark.parametrize("rate", [8_000, 16_000, 22_050, 44_100, 48_000])
def test_any_sample_rate_is_resampled_to_24k(write_clip, speech_like, rate):
    path = write_clip(f"r{rate}.wav", speech_like(2.0, rate), rate=rate)
    audio, _ = prepare_reference(path, Limits())
    assert audio.size == pytest.approx(2 * RATE, abs=2)


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"])
def test_bit_depths_keep_their_level(write_clip, speech_like, subtype):
    path = write_clip(f"{subtype}.wav", speech_like(2.0, RATE, amplitude=0.5), subtype=subtype)
    audio, _ = prepare_reference(path, Limits())
    assert float(np.max(np.abs(audio))) == pytest.approx(0.5, abs=0.02)


def test_multichannel_is_mixed_to_mono(write_clip, speech_like):
    voice = speech_like(2.0, RATE)
    stereo = np.stack([voice, voice, np.zeros_like(voice)], axis=1)
    audio, _ = prepare_reference(write_clip("three.wav", stereo), Limits())
    assert audio.ndim == 1 and audio.size == voice.size
    assert np.allclose(audio, voice * 2 / 3, atol=1e-3)


def test_in_memory_int16_pair_as_gradio_numpy_gives_it(engine, speech_like):
    voice = (speech_like(2.0, 16_000) * 32767).astype(np.int16)
    audio, _ = prepare_reference((16_000, voice), Limits())
    assert audio.size == 2 * RATE
    check(engine, reference=(16_000, voice))
