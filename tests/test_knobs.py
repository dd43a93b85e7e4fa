"""One schema: a knob declared once, on a backend class, reaches every surface.

`Breathy` declares a knob no other file knows ("breathiness"); served, it is checked by the
engine, taken by /v1/audio/speech and the page's PCM route (out of range: a 400 naming it), shown
in the page as a slider with its label and help, and passed by name through gradio_client; its
value reaches the backend's stream each time. The declarations of the real backends make the
same surfaces: their ranges, the page's controls and the Gradio API's parameter order. A shared
knob a model declares it does not read (Chatterbox's first_chunk_frames / chunk_frames) is not
offered (the page, /v1/models) and a request that sets it is refused naming it (the engine,
/v1, gradio_client), while the page's own hidden controls are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from test_openai_api import assert_error, free_port, make_api, serve

from tts_core.backends.espeak import EspeakBackend
from tts_core.engine import Engine, InputError, Knob, SynthesisParams, SynthesisRequest
from tts_core.engine.knobs import (
    SAMPLING_KNOBS,
    knobs_of,
    merge_knobs,
    parse_knobs,
    served_knobs,
    shared_knobs,
)
from tts_core.models.contract import knob
from tts_core.ui import build_demo, handlers

BREATHINESS = Knob(
    "breathiness",
    float,
    0.0,
    1.0,
    default=0.25,
    step=0.05,
    label="Breathiness",
    help="Air in the voice (a test knob: eSpeak does not read it).",
)


class Breathy:
    """The real eSpeak voice with one knob of its own, declared here and nowhere else; records
    the params each stream got."""

    knobs = (BREATHINESS,)

    def __init__(self, inner) -> None:  # noqa: ANN001 - EspeakBackend
        self._inner = inner
        self.seen: list[SynthesisParams] = []

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)

    def sampling_defaults(self) -> dict:
        return {"breathiness": 0.25}

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        self.seen.append(params)
        yield from self._inner.stream(text, voice, params, cancel)


@pytest.fixture()
def breathy(espeak_backend) -> Breathy:
    return Breathy(espeak_backend)


def request(**values) -> SynthesisRequest:  # noqa: ANN003
    return SynthesisRequest("Hello there.", None, None, SynthesisParams("english", **values))


# ------------------------------------------------------------------------------- engine
def test_the_engine_checks_the_served_backends_own_knob(breathy, espeak_backend):
    engine = Engine(breathy)
    assert engine.prepare(request(breathiness="0.5")).params.get("breathiness") == 0.5
    for value, message in (
        (1.5, r"breathiness must be in \[0, 1\]; got 1.5"),
        ("loud", "breathiness must be a number"),
        (True, "breathiness must be a number"),
    ):
        with pytest.raises(InputError, match=message) as caught:
            engine.prepare(request(breathiness=value))
        assert caught.value.param == "breathiness"
    # a backend without the knob does not read it: its engine leaves the value out
    plain = Engine(espeak_backend).prepare(request(breathiness=7, seed=3)).params
    assert plain.get("breathiness") is None and plain.seed == 3


def test_the_value_reaches_the_stream_by_name(breathy):
    _, stats = Engine(breathy).synthesize(request(breathiness=0.75, seed=11, chunk_frames=3))
    params = breathy.seen[-1]
    assert stats["done"] and params.get("breathiness") == 0.75
    assert (params.seed, params.first_chunk_frames, params.chunk_frames) == (11, 2, 3)
    assert params.values_of(Breathy.knobs) == {"breathiness": 0.75}


# -------------------------------------------------------------------------------- HTTP
def test_v1_speech_and_the_pcm_route_take_the_knob(breathy, tmp_path):
    with serve(make_api(Engine(breathy), tmp_path)) as url:
        body = {"input": "Hello.", "voice": "alloy", "response_format": "pcm"}
        answer = httpx.post(
            f"{url}/v1/audio/speech",
            json={**body, "breathiness": 0.75, "first_chunk_frames": 1},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text[:300]
        assert breathy.seen[-1].get("breathiness") == 0.75
        assert breathy.seen[-1].first_chunk_frames == 1  # a shared knob, now on /v1 too
        streams = len(breathy.seen)
        for bad in (1.5, -0.1, "loud", True):
            answer = httpx.post(
                f"{url}/v1/audio/speech", json={**body, "breathiness": bad}, timeout=60
            )
            error = assert_error(answer, 400, "breathiness")
            assert "breathiness must be" in error["message"]
        assert len(breathy.seen) == streams  # refused before any synthesis

        answer = httpx.post(
            f"{url}/tts_stream/pcm", json={"text": "Hello.", "breathiness": 0.3}, timeout=60
        )
        assert answer.status_code == 200 and breathy.seen[-1].get("breathiness") == 0.3
        answer = httpx.post(
            f"{url}/tts_stream/pcm", json={"text": "Hello.", "breathiness": 2}, timeout=60
        )
        assert_error(answer, 400, "breathiness")

        info = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][-1]["info"]
    assert info["knobs"]["breathiness"] == {
        "type": "number",
        "minimum": 0.0,
        "maximum": 1.0,
        "default": 0.25,
        "title": "Breathiness",
        "description": BREATHINESS.help,
    }
    assert set(info["knobs"]) == {"seed", "first_chunk_frames", "chunk_frames", "breathiness"}


# -------------------------------------------------------------------------------- page
def components_by_label(config: dict) -> dict[str, dict]:
    """The page's components by label (the first of a label: the API-only endpoints' hidden
    knob inputs, made after the page, carry their knob's label too)."""
    found: dict[str, dict] = {}
    for c in config["components"]:
        if c["props"].get("label"):
            found.setdefault(c["props"]["label"], c)
    return found


def test_the_page_has_a_slider_for_it_and_the_api_a_parameter(breathy, tmp_path):
    from tts_core.server import VoiceRegistry

    demo = build_demo(Engine(breathy), VoiceRegistry(tmp_path / "voices"))
    config = demo.get_config_file()
    slider = components_by_label(config)["Breathiness"]
    assert slider["type"] == "slider"
    props = slider["props"]
    assert (props["minimum"], props["maximum"], props["step"]) == (0.0, 1.0, 0.05)
    assert props["value"] == 0.25 and props["info"] == BREATHINESS.help
    assert props["visible"] is not False
    # the other models' knobs are there (one API whatever is served) but hidden
    assert components_by_label(config)["Temperature"]["props"]["visible"] is False
    api = demo.get_api_info()["named_endpoints"]["/synthesize_full"]["parameters"]
    names = [p["parameter_name"] for p in api]
    assert names[: len(handlers.FIRST_RELEASE_ORDER)] == list(handlers.FIRST_RELEASE_ORDER)
    assert names[-1] == "breathiness"  # declared after the first release: after `voice`
    # left out, a knob is None (the served backend's default), not the page's slider value
    assert api[-1]["parameter_has_default"] and api[-1]["parameter_default"] is None


def test_every_api_parameter_is_wired_to_its_own_control(breathy, tmp_path):
    """The inputs and the parameter names come from one list: the control at each position
    carries the label of the knob of that name (reordering a declaration cannot cross them)."""
    from tts_core.backends import request_knobs
    from tts_core.server import VoiceRegistry

    engine = Engine(breathy)
    demo = build_demo(engine, VoiceRegistry(tmp_path / "voices"))
    knobs = {knob.name: knob for knob in request_knobs(engine)}
    for api_name in ("synthesize", "synthesize_full"):
        (fn,) = [fn for fn in demo.fns.values() if fn.api_name == api_name]
        labels = [block.label for block in fn.inputs]
        names = list(handlers.ApiParameters.for_engine(engine).names)
        assert len(labels) == len(names) == len(knobs) + len(handlers.FIELDS)
        for name, label in zip(names, labels, strict=True):
            if name in knobs:
                assert label == knobs[name].label, name
        assert labels[names.index("voice")] == "Voice"
        assert labels[names.index("reference_text")] == "Transcript of the clip (optional)"


def test_gradio_client_passes_the_knob_by_name(breathy, tmp_path):
    from tts_core.server import VoiceRegistry

    demo = build_demo(Engine(breathy), VoiceRegistry(tmp_path / "voices")).queue()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    try:
        client = Client(url, verbose=False)
        _, stats = client.predict(
            text="Hello there.", breathiness=0.6, seed=5, api_name="/synthesize_full"
        )
        assert stats["done"]
        assert breathy.seen[-1].get("breathiness") == 0.6 and breathy.seen[-1].seed == 5
        # positional, as the first release's callers do: a knob left out is not set (the
        # backend's default), whatever the page's control showed
        first_release = ("Hello.", "english", None, "", 0.9, 50, 1.0, 1.05, -1, 2, 6, 2.0, 10)
        assert client.predict(*first_release, api_name="/synthesize_full")[1]["done"]
        # seed -1: a random one, drawn by the engine (the backend gets the number it reports)
        assert breathy.seen[-1].get("breathiness") is None and breathy.seen[-1].seed >= 0
        # the knob's own check, naming it (not a slider's bound)
        with pytest.raises(AppError, match=r"breathiness must be in \[0, 1\]; got 1.5"):
            client.predict(text="Hello.", breathiness=1.5, api_name="/synthesize_full")
    finally:
        demo.close()


# ------------------------------------------------------------- shared knobs a model does not read
class Chunkless(Breathy):
    """Breathy declaring, as Chatterbox does, that of the shared knobs it reads the seed alone
    (a chunk is a pass of its own: first_chunk_frames / chunk_frames mean nothing to it)."""

    capabilities = replace(EspeakBackend.capabilities, shared_knobs=("seed",))


@pytest.fixture()
def chunkless(espeak_backend) -> Chunkless:
    return Chunkless(espeak_backend)


def test_the_chatterbox_declarations_leave_out_the_shared_chunk_sizes():
    from tts_core.backends.chatterbox import ChatterboxBackend
    from tts_core.backends.chatterbox_english import ChatterboxEnglishBackend

    for backend in (ChatterboxBackend, ChatterboxEnglishBackend):
        names = [knob.name for knob in served_knobs(backend)]
        assert names[0] == "seed" and "first_chunk_tokens" in names and "chunk_tokens" in names
        assert "first_chunk_frames" not in names and "chunk_frames" not in names


def test_an_unread_shared_knob_is_refused_by_name_and_not_offered(chunkless, tmp_path):
    engine = Engine(chunkless)
    for name in ("first_chunk_frames", "chunk_frames"):
        with pytest.raises(InputError, match=f"{name} does not apply") as refused:
            engine.prepare(request(**{name: 3}))
        assert refused.value.param == name
    assert engine.prepare(request(seed=4, first_chunk_frames="")).params.seed == 4  # blank: unset
    with serve(make_api(engine, tmp_path)) as url:
        body = {"input": "Hello.", "voice": "alloy", "response_format": "pcm"}
        answer = httpx.post(f"{url}/v1/audio/speech", json={**body, "chunk_frames": 3}, timeout=60)
        error = assert_error(answer, 400, "chunk_frames")
        assert "its settings: seed, breathiness" in error["message"]
        assert httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60).status_code == 200
        info = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][-1]["info"]
        assert set(info["knobs"]) == {"seed", "breathiness"}
        # the page's route: it sends its hidden controls too, which are not the request's
        page = {"text": "Hello.", "first_chunk_frames": 2, "chunk_frames": 6, "breathiness": 0.3}
        answer = httpx.post(f"{url}/tts_stream/pcm", json=page, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
    seen = chunkless.seen[-1]
    assert seen.values == {"breathiness": 0.3, "seed": seen.seed}


def test_the_page_hides_an_unread_shared_knob_and_its_api_refuses_it(chunkless, tmp_path):
    from tts_core.server import VoiceRegistry

    demo = build_demo(Engine(chunkless), VoiceRegistry(tmp_path / "voices"))
    controls = components_by_label(demo.get_config_file())
    assert controls["First chunk (frames)"]["props"]["visible"] is False
    assert controls["Later chunks (frames)"]["props"]["visible"] is False
    assert controls["Seed (-1: random)"]["props"]["visible"] is not False
    _, url, _ = demo.queue().launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    try:
        client = Client(url, verbose=False)
        with pytest.raises(AppError, match="first_chunk_frames does not apply"):
            client.predict(text="Hello.", first_chunk_frames=3, api_name="/synthesize_full")
        assert client.predict(text="Hello.", seed=2, api_name="/synthesize_full")[1]["done"]
    finally:
        demo.close()


# ------------------------------------------------------------------------ declarations
# the knobs declared since the first release, after its names (positional callers keep working)
# (TADA's three last)
LATER_KNOBS = (
    "first_chunk_tokens",
    "chunk_tokens",
    "watermark",
    "exaggeration",
    "cfg_weight",
    "min_p",
)
SINCE_PRESETS = ("flow_steps", "acoustic_cfg", "noise_temperature")  # TADA's, after speaker


def test_the_real_backends_declarations_extend_the_first_releases_api():
    names = handlers.ApiParameters.for_engine().names
    assert names == (
        *handlers.FIRST_RELEASE_ORDER,
        *LATER_KNOBS,
        "speaker",
        "instructions",
        *SINCE_PRESETS,
    )


@dataclass(frozen=True)
class ModelKnobs:
    """A model's dataclass of knobs: what it reads by name, and what the server offers of it."""

    steps: int = knob(10, 1, 100, step=1, label="Steps", help="Solver steps.")
    scale: float | None = knob(None, 0.0, 2.0, low_open=True, label="Scale")
    temperature: float = 0.7  # a shared sampling name: the engine's one declaration of it
    max_len: int = 4096  # read, not served


def test_a_models_knob_fields_are_the_served_declaration():
    steps, scale, temperature = knobs_of(ModelKnobs)
    assert steps == Knob(
        "steps", int, 1, 100, default=10, step=1, label="Steps", help="Solver steps."
    )
    assert scale == Knob("scale", float, 0.0, 2.0, low_open=True, label="Scale")
    assert temperature is SAMPLING_KNOBS["temperature"]  # its default: the backend's own
    with pytest.raises(InputError, match=r"steps must be a whole number in \[1, 100\]; got 0"):
        steps.parse(0)


def test_the_served_backends_knobs_are_their_models_fields():
    """VoxCPM2's are its VoxKnobs' (range and labels there); Qwen3-TTS's, the sampling names
    of generation_config.json."""
    from tts_core.backends.qwen3 import Qwen3Backend
    from tts_core.backends.voxcpm import VoxCPMBackend

    voxcpm = {k.name: k for k in VoxCPMBackend.knobs}
    assert list(voxcpm) == ["cfg_value", "inference_timesteps"]
    assert (voxcpm["cfg_value"].default, voxcpm["cfg_value"].high) == (2.0, 10.0)
    assert voxcpm["inference_timesteps"].kind is int
    names = ("temperature", "top_k", "top_p", "repetition_penalty")
    assert Qwen3Backend.knobs == tuple(SAMPLING_KNOBS[name] for name in names)


def test_a_knob_declared_twice_differently_is_refused():
    other = Knob("breathiness", float, 0.0, 2.0, label="Breathiness")
    assert merge_knobs((BREATHINESS,), (BREATHINESS,)) == (BREATHINESS,)
    with pytest.raises(ValueError, match="declared twice"):
        merge_knobs((BREATHINESS,), (other,))
    for name in ("text", "voice", "input", "api_name", "not a name"):
        with pytest.raises(ValueError, match="reserved"):
            Knob(name, float, 0.0, 1.0)


@pytest.mark.parametrize(
    ("knob", "value", "parsed"),
    [
        (Knob("k", int, 0, 10), 4.0, 4),  # sliders send whole numbers as floats
        (Knob("k", int, 0, 10), "7", 7),
        (Knob("k", float, 0.0, 1.0), "0.5", 0.5),
        (Knob("k", int, -1, 9, unset=-1), -1, None),  # the seed's "random"
        (Knob("k", float, 0.0, 1.0), "", None),
        (Knob("k", float, 0.0, 1.0, low_open=True, high_open=True), 0.999, 0.999),
    ],
)
def test_parse_types_and_unset(knob, value, parsed):
    result = knob.parse(value)
    assert result == parsed and type(result) is type(parsed)


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        (Knob("k", int, 0, 10), 2.5, r"k must be a whole number in \[0, 10\]; got 2.5"),
        (Knob("k", int, 0, 10), 10**400, r"in \[0, 10\]"),  # exact: no float overflow
        (Knob("k", float, 0.0, 1.0), 10**400, r"k must be in \[0, 1\]"),
        (Knob("k", float, 0.0, 1.0), float("nan"), r"k must be in \[0, 1\]; got nan"),
        (Knob("k", float, 0.0, 1.0, low_open=True), 0.0, r"k must be in \(0, 1\]"),
        (Knob("k", float, 0.0, 1.0, high_open=True), 1.0, r"k must be in \[0, 1\)"),
        (Knob("k", int, 0, 10), [3], "k must be a whole number."),
    ],
)
def test_parse_refuses_with_the_knobs_name(knob, value, message):
    with pytest.raises(InputError, match=message) as caught:
        knob.parse(value)
    assert caught.value.param == "k"


def test_parse_knobs_leaves_out_what_is_unset_or_unknown():
    seed, first, steady = shared_knobs()
    values = {"seed": -1, "first_chunk_frames": 3.0, "chunk_frames": None, "other": 99}
    assert parse_knobs(values, (seed, first, steady)) == {"first_chunk_frames": 3}
