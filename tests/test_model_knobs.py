"""One knob declaration per model (issue 39 items 1 and 6): a model's knobs are one frozen
dataclass (names, defaults, checks: Qwen3-TTS `decode_settings.Knobs`, VoxCPM2 `VoxKnobs` /
`VoxStreamKnobs`, TADA `StreamKnobs`), read by name once per request (models/contract.py
`read_knobs`) by `request`, which `stream` and `generate` pass their keywords through to. A name
the model does not read is a TypeError naming it and listing the model's knobs, from every
entry; a bad value is the dataclass's ValueError.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tts_core
from tts_core.backends.chatterbox import KNOBS as TURBO_KNOBS
from tts_core.backends.chatterbox_english import KNOBS as ENGLISH_KNOBS
from tts_core.backends.qwen3 import KNOBS as QWEN3_KNOBS
from tts_core.backends.voxcpm import KNOBS as VOXCPM_KNOBS
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.knobs import EnglishKnobs, TurboKnobs
from tts_core.models.contract import read_knobs
from tts_core.models.qwen3_tts.config import GenerationDefaults
from tts_core.models.qwen3_tts.decode_settings import Knobs
from tts_core.models.tada.generate import DEFAULT_OPTIONS, served_options
from tts_core.models.tada.knobs import TadaKnobs
from tts_core.models.tada.model import StreamKnobs, TadaModel
from tts_core.models.voxcpm.model import CHUNK_NAMES, VoxKnobs, VoxStreamKnobs

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Hello world."
# the knobs Qwen3-TTS reads besides the sampling names of generation_config.json
QWEN3_OWN = {
    "first_chunk_frames",
    "chunk_frames",
    "greedy",
    "stop_ids",
    "repetition_window",
    "length_cap",
    "non_streaming_mode",
}


def names(kind: type) -> list[str]:
    return [field.name for field in dataclasses.fields(kind)]


def test_read_knobs_sets_the_named_fields_and_refuses_any_other():
    given = {"cfg_value": 1.5, "chunk_frames": 3}  # chunk_frames: the shared name, an alias
    assert read_knobs("VoxCPM2", VoxStreamKnobs, given, CHUNK_NAMES) == VoxStreamKnobs(
        cfg_value=1.5, chunk_patches=3
    )
    both = {"chunk_patches": 2, "chunk_frames": 3}  # the alias wins, as `stream` read it before
    assert read_knobs("VoxCPM2", VoxStreamKnobs, both, CHUNK_NAMES).chunk_patches == 3
    listed = "cfg_value, inference_timesteps, max_len, chunk_patches, first_chunk_patches"
    with pytest.raises(TypeError, match=f"VoxCPM2 does not read temperature; .*: {listed}"):
        read_knobs("VoxCPM2", VoxStreamKnobs, {"temperature": 0.7}, CHUNK_NAMES)


@pytest.mark.parametrize(
    ("kind", "bad", "message"),
    [
        (Knobs, {"chunk_frames": 0}, "first_chunk_frames and chunk_frames must be >= 1"),
        (Knobs, {"repetition_window": -1}, "repetition_window must be >= 0"),
        (Knobs, {"non_streaming_mode": "yes"}, "non_streaming_mode must be True or False"),
        (VoxKnobs, {"max_len": 0}, "max_len and inference_timesteps must be >= 1"),
        (VoxStreamKnobs, {"inference_timesteps": 0}, "max_len and inference_timesteps"),
        (VoxStreamKnobs, {"first_chunk_patches": 0}, "chunk_frames must be >= 1"),
        (StreamKnobs, {"first_chunk_tokens": 0}, "chunk_frames must be >= 1"),
        (StreamKnobs, {"lookahead": 0}, "lookahead >= 1"),
        (StreamKnobs, {"context": -1}, "context must be >= 0"),
    ],
)
def test_a_bad_value_is_refused_where_the_knob_is_declared(kind, bad, message):
    with pytest.raises(ValueError, match=message):
        kind(**bad)


def test_qwen3_sampling_knobs_are_the_generation_config_names():
    """Knobs' sampling fields are generation_config.json's (GenerationDefaults), None by
    default: the checkpoint's value unless given; greedy overrides the draws."""
    sampling = set(names(Knobs)) - QWEN3_OWN
    assert sampling == set(names(GenerationDefaults))
    assert all(getattr(Knobs(), name) is None for name in sampling)
    defaults = GenerationDefaults()
    settings = Knobs(temperature=0.5, stop_ids=[7]).settings(defaults, None, 11)
    assert settings.talker.temperature == 0.5 and settings.talker.top_k == defaults.top_k
    assert settings.stop_ids == (7,) and settings.seed == 11 and settings.length_cap is None
    greedy = Knobs(greedy=True, repetition_penalty=1.3).settings(defaults, 30, None)
    assert not greedy.talker.do_sample and not greedy.subtalker.do_sample
    assert greedy.talker.repetition_penalty == 1.0 and greedy.length_cap == 30
    with pytest.raises(ValueError, match="max_new_tokens must be >= 2"):
        Knobs(max_new_tokens=1).settings(defaults, None, None)


@pytest.mark.parametrize(("declared", "kind"), [(QWEN3_KNOBS, Knobs), (VOXCPM_KNOBS, VoxKnobs)])
def test_each_served_knob_is_a_field_of_the_models_declaration(declared, kind):
    """The backend's knobs (engine/knobs.py: ranges, labels) name fields of the model's
    dataclass, with its default where the backend declares one (None: the model's own)."""
    defaults = {field.name: field.default for field in dataclasses.fields(kind)}
    for knob in declared:
        assert knob.name in defaults
        assert knob.default is None or knob.default == defaults[knob.name], knob.name


@pytest.mark.parametrize(
    ("served", "kind", "own"),
    [(TURBO_KNOBS, TurboKnobs, ()), (ENGLISH_KNOBS, EnglishKnobs, ("exaggeration",))],
)
def test_chatterbox_serves_its_models_declaration(served, kind, own):
    """A Chatterbox backend's knobs are made from its model's declaration (models/chatterbox/
    knobs.py): the model's knobs by name, besides the watermark the backend applies (and
    English's exaggeration, `stream`'s own argument); the chunk sizes served at StreamChunking's
    defaults, the declared ones the model's."""
    assert {knob.name for knob in served} == {*names(kind), *own, "watermark"}
    defaults = {knob.name: knob.default for knob in served if knob.default is not None}
    chunking = StreamChunking()
    assert defaults["first_chunk_tokens"] == chunking.first_tokens
    assert defaults["chunk_tokens"] == chunking.chunk_tokens
    model_defaults = dataclasses.asdict(kind())
    for name in set(defaults) & set(model_defaults) - {"first_chunk_tokens", "chunk_tokens"}:
        assert defaults[name] == model_defaults[name], name


def test_tadas_served_knobs_make_its_generate_options():
    """TadaKnobs (the served declaration: backends/tada.py's knobs) at its defaults is the
    official InferenceOptions; each value lands in its field."""
    assert served_options(TadaKnobs()) == DEFAULT_OPTIONS
    options = served_options(TadaKnobs(flow_steps=3, acoustic_cfg=1.0, temperature=0.5, top_p=0.8))
    assert (options.flow.steps, options.flow.acoustic_cfg) == (3, 1.0)
    assert (options.text.temperature, options.text.top_p) == (0.5, 0.8)
    assert options.text.top_k == DEFAULT_OPTIONS.text.top_k


@pytest.fixture(scope="module")
def qwen3():
    return tts_core.load_model(FIXTURES / "qwen3-tiny-a")


@pytest.fixture(scope="module")
def voxcpm():
    return tts_core.load_model(FIXTURES / "voxcpm2-tiny")


@pytest.fixture(scope="module")
def tada():
    folder = FIXTURES / "tada-tiny-a"
    return TadaModel.from_folders(folder / "model", folder / "codec")


def test_qwen3_refuses_an_unknown_knob_from_every_entry_listing_its_own(qwen3):
    listed = "its knobs by name: " + ", ".join(names(Knobs))
    voice = qwen3.silent_voice()
    for entry in (qwen3.stream, qwen3.generate, qwen3.request, qwen3.plan):
        with pytest.raises(TypeError, match=f"Qwen3-TTS does not read cfg_value; {listed}$"):
            entry(TEXT, voice, cfg_value=2.0)


def test_voxcpm_refuses_an_unknown_knob_from_every_entry_listing_its_own(voxcpm):
    for entry, kind in ((voxcpm.stream, VoxStreamKnobs), (voxcpm.request, VoxStreamKnobs)):
        listed = ", ".join([*names(kind), *CHUNK_NAMES])
        with pytest.raises(TypeError, match=f"VoxCPM2 does not read top_k; .*: {listed}$"):
            entry(TEXT, None, seed=1, top_k=5)
    # generate reads no chunk sizes: a stream's is refused too, as before
    with pytest.raises(TypeError, match="does not read chunk_patches; .*: cfg_value, infer"):
        voxcpm.generate(TEXT, None, seed=1, chunk_patches=2)


def test_tada_refuses_an_unknown_knob_listing_its_own(tada):
    listed = "its knobs by name: context, lookahead, chunk_tokens, first_chunk_tokens"
    for entry in (tada.stream, tada.request):
        with pytest.raises(TypeError, match=f"TADA does not read temperature; {listed}"):
            entry(None, TEXT, temperature=0.6)
