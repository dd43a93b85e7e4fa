"""Issue 36: voices fitted to the served model (each backend's reference needs, declared once,
followed by the picker, the examples, /v1/audio/voices and the upload label), one text limit on
every surface, a bad clip refused when it is uploaded, and a loading line that says how far."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace

import gradio as gr
import httpx
import numpy as np
import pytest
from test_openai_api import LONG_TEXT, RecordingEngine, make_api, serve, speech

from tts_core.backends import backend_classes
from tts_core.backends.chatterbox import TURBO_MIN_REFERENCE_S, ChatterboxBackend
from tts_core.backends.voxcpm import SPEAKING_ROOM, reference_needs_of
from tts_core.engine import Engine, EngineConfig, EngineSlot, Limits
from tts_core.engine.backend import ReferenceNeeds, reads_transcript, reference_needs
from tts_core.server import VoiceRegistry
from tts_core.server.voice_fit import clip_seconds, starting_voice
from tts_core.ui import handlers, page, voice_library
from tts_core.ui.formatting import status_html

SLT_S = 6.69  # arctic-slt: its utterance twice (the shorter of the two recordings)


class PickyBackend:
    """The real eSpeak backend declaring another model's reference needs."""

    def __init__(self, inner, needs: ReferenceNeeds) -> None:  # noqa: ANN001
        self._inner, self.reference = inner, needs

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)


def picky_engine(espeak_backend, min_seconds: float, **config) -> Engine:  # noqa: ANN001, ANN003
    needs = ReferenceNeeds(min_seconds=min_seconds, min_exclusive=True, transcript="ignored")
    return RecordingEngine(PickyBackend(espeak_backend, needs), EngineConfig(**config))


# ------------------------------------------------------------------ the declaration
def test_every_backend_declares_its_reference_needs_once():
    for cls in backend_classes():
        assert isinstance(cls.reference, ReferenceNeeds), cls.__name__
        assert reads_transcript(cls) == (cls.reference.transcript != "ignored")  # used or required
    # Chatterbox clones from the clip alone: the page hides the transcript box
    assert reads_transcript(ChatterboxBackend) is False
    assert reference_needs(object()) == ReferenceNeeds()  # none declared: the defaults


def test_turbo_declares_the_models_own_shortest_clip():
    from tts_core.models.chatterbox.cloning import MIN_SECONDS

    assert TURBO_MIN_REFERENCE_S == MIN_SECONDS  # the model's check (the official's assert)
    turbo = ChatterboxBackend.reference
    assert not turbo.fits(5.0) and turbo.fits(5.01)  # "longer than 5 s"
    assert turbo.why_not(3.1) == "this model needs a clip longer than 5 s (this one is 3.1 s)"
    assert turbo.length_text() == "more than 5 s of speech (6-10 s work best)"
    assert ReferenceNeeds().length_text() == "3-10 s of speech"


def test_voxcpm_holds_the_reference_its_caches_have_room_for():
    # the release's numbers: 8192 positions, 16 kHz, hop 640, patch 4 -> 6.25 patches/s
    model = SimpleNamespace(
        vae=SimpleNamespace(sample_rate=16_000, hop_length=640),
        patch_size=4,
        config=SimpleNamespace(max_length=8192),
    )
    needs = reference_needs_of(model)
    # a clip with its transcript takes 2 x 6.25 positions a second; SPEAKING_ROOM stays free
    assert needs.max_seconds == pytest.approx((1 - SPEAKING_ROOM) * 8192 / 12.5, abs=0.01)
    assert needs.fits(30.0) and not needs.fits(needs.max_seconds + 0.1)
    assert "at most" in needs.why_not(needs.max_seconds + 0.1)


# ------------------------------------------------------------------ voices fitted to the model
def test_the_picker_offers_only_voices_that_fit_and_starts_on_a_recording(espeak_backend, tmp_path):
    voices = VoiceRegistry(tmp_path)
    everything = voice_library.choices(voices, None, espeak_backend)
    assert len(everything) == 1 + len(voices.list())  # upload + every built-in voice
    assert voice_library.start_voice(voices, espeak_backend) == "arctic-slt"
    lengths = {v.name: clip_seconds(v.reference) for v in voices.list()}
    cut = sorted(lengths.values())[len(lengths) // 2]  # half of them are this long or shorter
    picky = PickyBackend(espeak_backend, ReferenceNeeds(min_seconds=cut, min_exclusive=True))
    offered = {name for _, name in voice_library.choices(voices, None, picky)}
    assert offered == {""} | {name for name, s in lengths.items() if s > cut}
    start = starting_voice(voices.list(), picky)
    # a recording first (the slt one preferred), else the first built-in voice that fits
    assert start == next(n for n in ("arctic-slt", "arctic-awb", *sorted(offered)) if n in offered)
    nothing_fits = PickyBackend(espeak_backend, ReferenceNeeds(min_seconds=60))
    assert voice_library.start_voice(voices, nothing_fits) == voice_library.UPLOAD


def test_examples_and_the_upload_label_follow_the_declaration(espeak_backend, tmp_path):
    voices = VoiceRegistry(tmp_path)
    rows, labels = page.example_rows(voices, espeak_backend)
    assert len(rows) == len(page.EXAMPLES) and labels == [e[0] for e in page.EXAMPLES]
    assert {row[2] for row in rows} == {"arctic-slt", "arctic-awb"}  # two real voices
    too_long = PickyBackend(espeak_backend, ReferenceNeeds(max_seconds=SLT_S - 1))
    assert page.example_rows(voices, too_long) == ([], [])
    turbo_like = PickyBackend(espeak_backend, ChatterboxBackend.reference)
    info = {"needs_reference": False}
    label = page.model_dependent(info, turbo_like)["reference"]
    assert (
        label == "Reference clip: more than 5 s of speech (6-10 s work best) (optional for "
        "this model)"
    )
    assert "3-10 s" in page.model_dependent({}, None)["reference"]  # loading: the defaults


def test_the_voice_list_says_which_voices_fit_the_served_model(espeak_backend, tmp_path):
    engine = picky_engine(espeak_backend, SLT_S + 0.5)
    with serve(make_api(engine, tmp_path)) as url:
        answer = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()
    voices = {v["id"]: v for v in answer["data"]}
    slt = voices["arctic-slt"]
    assert slt["fits_model"] is False and "longer than" in slt["unfit_reason"]
    assert slt["reference_seconds"] == pytest.approx(6.69, abs=0.01)
    assert voices["arctic-awb"]["fits_model"] is True and "unfit_reason" not in voices["arctic-awb"]
    assert {"name", "transcript", "kind", "description", "status"} <= set(slt)  # kept fields
    assert answer["reference"]["min_seconds"] == SLT_S + 0.5
    assert answer["reference"]["transcript"] == "ignored"


# ------------------------------------------------------------------ one text limit
LIMIT = 300  # the deployment's (ApiConfig.max_input_chars); the engine takes 80 per synthesis


def stats_frames(body: bytes) -> list[dict]:
    """The STATS frames (kind 2) of the page's PCM route: 8-byte header (kind, size), payload."""
    found, offset = [], 0
    while offset + 8 <= len(body):
        kind, size = struct.unpack_from("<II", body, offset)
        if kind == 2:
            found.append(json.loads(body[offset + 8 : offset + 8 + size]))
        offset += 8 + size
    return found


def test_one_text_limit_on_every_surface(espeak_backend, tmp_path):
    """Issue 36: the page cut 1000 characters silently, gradio_client said 1000, /v1 4096."""
    engine = RecordingEngine(espeak_backend, EngineConfig(limits=Limits(max_chars=80)))
    text = LONG_TEXT[:LIMIT]  # at the limit: taken everywhere, in pieces of at most 80
    over = text + "x" * (LIMIT + 1 - len(text))  # one character over
    message = f"The text is {LIMIT + 1} characters long; the limit is {LIMIT}."
    with serve(make_api(engine, tmp_path, max_input_chars=LIMIT)) as url:
        assert speech(url, input=text, voice="alloy", response_format="pcm").status_code == 200
        refused = speech(url, input=over, voice="alloy", response_format="pcm")
        assert refused.status_code == 413 and str(LIMIT) in refused.json()["error"]["message"]
        pcm = httpx.post(f"{url}/tts_stream/pcm", json={"text": text, "voice": "alloy"}, timeout=60)
        assert pcm.status_code == 200 and pcm.headers["x-sample-rate"] == "24000"
        # its pieces are one run: "done" only at the last one's end (the page's players and
        # panel said Done after the first piece)
        done = [stats["done"] for stats in stats_frames(pcm.content)]
        assert len(engine.runs) >= 2 * 2 and done.count(True) == 1 and done[-1] is True
        runs = len(engine.runs)
        pcm = httpx.post(f"{url}/tts_stream/pcm", json={"text": over, "voice": "alloy"}, timeout=60)
        assert pcm.status_code == 400 and message in pcm.json()["error"]["message"]
        assert len(engine.runs) == runs  # refused before any synthesis
    voices = VoiceRegistry(tmp_path / "voices")
    api = handlers.ApiParameters.for_engine(engine, LIMIT)
    slot = EngineSlot.holding(engine)
    full = handlers.bind(handlers.synthesize_full, slot, voices, api)
    runs = len(engine.runs)

    def values(text: str) -> list:  # by position, as Gradio calls the handler
        return [{"text": text, "voice": "alloy"}.get(name) for name in api.names]

    (_, audio), _ = list(full(*values(text)))[-1]
    assert (
        audio.size
        and len(engine.runs) - runs
        == len(handlers.split_request(handlers.SynthesisRequest(text), LIMIT, 80))
        > 1
    )
    with pytest.raises(gr.Error, match=message):
        list(full(*values(over)))
    # the page says the same limit before the cut (page.js counts as the visitor types)
    assert f'data-max="{LIMIT}"' in page.count_html(LIMIT)


def test_the_page_never_cuts_the_text(espeak_backend, tmp_path):
    demo = page.build_demo(EngineSlot.holding(Engine(espeak_backend)), VoiceRegistry(tmp_path))
    config = demo.get_config_file()
    text_box = next(c for c in config["components"] if c["props"].get("elem_id") == "text")
    assert text_box["props"].get("max_length") is None  # Gradio's max_length cuts silently
    count = next(c for c in config["components"] if c["props"].get("elem_id") == "text-count")
    assert 'data-max="4096"' in count["props"]["value"]  # ApiConfig's, as /v1's


# ------------------------------------------------------------------ a bad upload
def test_a_bad_clip_is_refused_when_it_is_uploaded(
    espeak_backend, tmp_path, write_clip, speech_like
):
    slot = EngineSlot.holding(picky_engine(espeak_backend, 5.0))
    junk = tmp_path / "notes.wav"
    junk.write_bytes(b"this is not audio at all" * 40)
    assert "not audio" in voice_library.clip_problem(slot, str(junk))
    silent = write_clip("silent.wav", np.zeros(24_000 * 6, dtype=np.float32))
    assert "silent" in voice_library.clip_problem(slot, silent)
    short = write_clip("short.wav", speech_like(3.0, 24_000))
    assert voice_library.clip_problem(slot, short) == (
        "this model needs a clip longer than 5 s (this one is 3.0 s)"
    )
    assert voice_library.clip_problem(slot, write_clip("ok.wav", speech_like(6.0, 24_000))) is None
    assert voice_library.clip_problem(slot, None) is None
    loading = EngineSlot("some/model")  # before the model is known: the engine's own checks
    assert voice_library.clip_problem(loading, short) is None
    assert "not audio" in voice_library.clip_problem(loading, str(junk))


# ------------------------------------------------------------------ the loading line
def test_the_loading_line_says_the_step_and_a_bar_only_for_bytes():
    slot = EngineSlot("some/model")
    slot.report("downloading", done=0.6e9, total=2.4e9)
    html = status_html(slot.info())
    assert "downloading 0.60 of 2.40 GB (25 %)" in html and "(step 1 of 3)" in html
    assert '<progress max="1" value="0.250">' in html
    slot.report("loading")
    html = status_html(slot.info())
    assert "loading the model into memory" in html and "(step 2 of 3)" in html
    assert "<progress" not in html  # a full bar for minutes said nothing
    slot.report("warming")
    assert "(step 3 of 3)" in status_html(slot.info())
