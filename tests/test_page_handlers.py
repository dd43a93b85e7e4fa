"""The page's handlers and voice library without a server: what each yield carries, named
voices, the loading state, and the voice store's errors as the page shows them."""

from __future__ import annotations

import errno
import inspect
import threading
import time

import gradio as gr
import numpy as np
import pytest
from conftest import StalledBackend

from tts_core.engine import Engine, EngineConfig, EngineSlot, Limits
from tts_core.server import VoiceRegistry
from tts_core.ui import handlers, voice_library
from tts_core.ui.formatting import notice_html, status_html

OWNER, STRANGER = "owner-key-of-this-browser", "someone-else"


def page_outputs(engine, text, reference=None, first=2, steady=6, voice=None, voices=None):
    """The page's handler, its inputs by name (the API's parameter names)."""
    outputs = handlers.stream_to_page(
        engine,
        text,
        language="english",
        reference=reference,
        reference_text="",
        seed=-1,
        first_chunk_frames=first,
        chunk_frames=steady,
        voice=voice,
        voices=voices,
    )
    return list(outputs)


def audio_of(output) -> np.ndarray | None:
    value = output[0]
    return value[1] if isinstance(value, tuple) else None


@pytest.fixture()
def voices(tmp_path):
    return VoiceRegistry(tmp_path / "voices")


def test_yields_int16_chunks_a_flush_nudge_then_the_full_clip_and_stats(engine):
    outputs = page_outputs(engine, "One sentence here. And a second one, which is longer.")
    audio = [audio_of(o) for o in outputs]
    assert all(a.dtype == np.int16 for a in audio if a is not None)
    real = [a for a in audio if a is not None and a.size > 1]
    nudges = [i for i, a in enumerate(audio) if a is not None and a.size == 1]
    last_real = max(i for i, a in enumerate(audio) if a is not None and a.size > 1)
    assert nudges and nudges[-1] > last_real  # the last real chunk is flushed by a nudge
    # every real chunk carries the stats so far (the stats panel redraws on each)
    chunk_stats = [o[2] for o in outputs if audio_of(o) is not None and audio_of(o).size > 1]
    assert [s["chunks"] for s in chunk_stats] == list(range(1, len(real) + 1))
    final = outputs[-1]
    rate, full = final[1]
    assert rate == 24_000 and np.array_equal(full, np.concatenate(real))
    assert final[2]["done"] and len(final[2]["timeline"]) == len(real)


def test_single_chunk_stream_still_gets_a_second_yield(engine):
    outputs = page_outputs(engine, "Hi.", first=25, steady=50)
    audio = [audio_of(o) for o in outputs if audio_of(o) is not None]
    assert len([a for a in audio if a.size > 1]) == 1
    assert len(audio) >= 2  # Gradio may not play a stream that got a single yield


def test_bad_input_is_a_gradio_error(engine):
    with pytest.raises(gr.Error, match="enter some text"):
        page_outputs(engine, "   ")


def test_request_notices_reach_the_stats(engine, write_clip, speech_like):
    short_limit = Engine(engine.backend, EngineConfig(limits=Limits(max_reference_s=2.0)))
    clip = write_clip("long.wav", speech_like(5.0, 24_000))
    final = page_outputs(short_limit, "Cut the reference.", reference=clip)[-1]
    assert any("only its first 2 s were used" in n for n in final[2]["notices"])


def test_a_named_voice_replaces_the_clip_and_its_transcript(engine, voices, write_clip):
    request = handlers.make_request(
        "Hi", "auto", write_clip("x.wav", np.zeros(100)), "other", voice="coral", voices=voices
    )
    voice, clip = voices.load("coral")
    rate, audio = request.reference
    assert rate == 24_000 and np.array_equal(audio, clip)
    assert request.reference_text == voice.transcript
    variants = {}  # eSpeak follows the clip's pitch: a female and a male voice differ
    for name in ("coral", "onyx"):
        final = page_outputs(engine, "Spoken by a named voice.", voice=name, voices=voices)[-1]
        variants[name] = final[2]["voice"]["variant"]
    assert variants["coral"].startswith("+f") and not variants["onyx"].startswith("+f")


def test_an_unknown_voice_is_a_clear_error(engine, voices):
    with pytest.raises(gr.Error, match="There is no voice named 'nobody'"):
        page_outputs(engine, "Hello.", voice="nobody", voices=voices)


def test_the_api_keeps_the_first_releases_order_and_not_the_registry(engine, voices):
    api = handlers.ApiParameters.for_engine(engine)
    names = list(api.names)
    first = len(handlers.FIRST_RELEASE_ORDER)
    assert names[:first] == list(handlers.FIRST_RELEASE_ORDER) and "voices" not in names
    later = {knob.name for knob in api.knobs} - set(names[:first])
    assert set(names[first:]) == later | set(handlers.MODEL_VOICE_FIELDS)  # #41's two fields
    handler = handlers.bind(handlers.synthesize_full, EngineSlot.holding(engine), voices, api)
    assert inspect.isgeneratorfunction(handler)
    assert list(inspect.signature(handler).parameters) == names


def test_positional_and_named_values_make_the_same_request(engine):
    positional = handlers.make_request(
        "Hi", "english", None, "", 0.7, 40, 0.9, 1.1, 9, 1, 3, 1.5, 12
    )
    named = handlers.make_request(
        text="Hi",
        language="english",
        temperature=0.7,
        top_k=40,
        top_p=0.9,
        repetition_penalty=1.1,
        seed=9,
        first_chunk_frames=1,
        chunk_frames=3,
        cfg_value=1.5,
        inference_timesteps=12,
    )
    assert positional.params == named.params
    assert named.params.values == {
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "seed": 9,
        "first_chunk_frames": 1,
        "chunk_frames": 3,
        "cfg_value": 1.5,
        "inference_timesteps": 12,
    }
    assert type(named.params.values["top_k"]) is int


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"top_p": 0}, r"top_p must be in \(0, 1\]; got 0"),  # every known backend's knob
        ({"inference_timesteps": 0.5}, "inference_timesteps must be a whole number"),
        ({"seed": "x"}, "seed must be a whole number"),
        ({"no_such_knob": 1}, "This API takes text, language"),
    ],
)
def test_bad_values_are_gradio_errors_naming_them(engine, values, message):
    with pytest.raises(gr.Error, match=message):
        list(handlers.synthesize_full(engine, "Hello.", **values))


def test_a_request_while_the_model_loads_gets_the_loading_message(engine, voices):
    slot = EngineSlot("some/model")
    slot.report("downloading", done=0.6e9, total=2.4e9)
    handler = handlers.bind(handlers.synthesize_full, slot, voices)
    with pytest.raises(gr.Error, match=r"still loading \(downloading 0.60 of 2.40 GB \(25 %\)\)"):
        list(handler("Hello", "english", None, ""))
    slot.set(engine)
    (rate, audio), stats = list(handler("Hello", "english", None, ""))[-1]
    assert rate == 24_000 and audio.size and stats["done"]


def test_model_line_and_notice_follow_the_slot(engine):
    slot = EngineSlot("some/model")
    slot.report("downloading", done=0.6e9, total=2.4e9)
    loading = status_html(slot.info())
    assert "The model is loading: downloading 0.60 of 2.40 GB (25 %)" in loading
    slot.report("loading")
    assert "The model is loading: loading the model into memory" in status_html(slot.info())
    slot.set(engine)
    ready = slot.info()
    assert "Voice model: <b>espeak</b>" in status_html(ready) and notice_html(ready) == ""
    failed = EngineSlot("other")
    failed.fail("OSError: <no disk>")
    assert "could not be loaded: OSError: &lt;no disk&gt;" in status_html(failed.info())


def test_notice_is_plain_with_its_details_folded(engine):
    info = {
        "notice": "The model could not be loaded, so you hear eSpeak.",
        "notice_details": "RuntimeError: <trace>",
    }
    html = notice_html(info)
    assert "<b>" not in html and "<strong>" not in html
    assert "<details><summary>Details</summary><pre>RuntimeError: &lt;trace&gt;</pre>" in html


# ------------------------------------------------------------------ voice library
def test_choices_mark_the_voices_this_browser_saved(engine, voices, write_clip, speech_like):
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    voices.register("mine", clip, None, owner_key=OWNER)
    voices.register("theirs", clip, None)  # through the API: no owner
    (voices.root / "broken").mkdir()
    (voices.root / "broken" / "reference.wav").write_text("not audio")
    labels = dict((name, label) for label, name in voice_library.choices(voices, OWNER))
    assert labels[""] == "Upload or record a clip" and labels["alloy"] == "alloy (built-in)"
    assert labels["mine"] == "mine (saved by you)" and labels["theirs"] == "theirs"
    assert "broken" not in labels  # damaged: it cannot speak
    assert dict(voice_library.choices(voices, STRANGER)).get("mine (saved by you)") is None


def test_save_stores_the_clip_and_warms_the_voice(engine, voices, write_clip, speech_like):
    slot = EngineSlot.holding(engine)
    warmed = []
    engine.prepare_voice = lambda ref, text: warmed.append((ref[0], ref[1].size, text))
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    name = voice_library.save_voice(slot, voices, "my-voice", clip, "Hello there.", OWNER)
    assert name == "my-voice" and voices.get(name).owned_by(OWNER)
    assert voices.get(name).transcript == "Hello there."
    deadline = time.monotonic() + 60  # warmed on a background thread (a hang detector)
    while not warmed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert warmed == [(24_000, 3 * 24_000, "Hello there.")]


@pytest.mark.parametrize(
    ("name", "clip", "message"),
    [
        ("bad name!", "good", "Voice names are 1-64 characters"),
        ("alloy", "good", "'alloy' is a built-in voice"),
        ("taken", "good", "A voice named 'taken' already exists"),
        ("fresh", None, "Upload or record a clip first"),
        ("fresh", "short", "at least 1 s"),
    ],
)
def test_save_errors_are_the_registrys_messages(
    engine, voices, write_clip, speech_like, name, clip, message
):
    clips = {
        "good": write_clip("good.wav", speech_like(3.0, 24_000)),
        "short": write_clip("short.wav", speech_like(0.4, 24_000)),
        None: None,
    }
    voices.register("taken", clips["good"], None)
    with pytest.raises(gr.Error, match=message):
        voice_library.save_voice(EngineSlot.holding(engine), voices, name, clips[clip], "", OWNER)


def test_a_full_disk_is_reported_without_a_path(
    engine, voices, write_clip, speech_like, monkeypatch
):
    import tts_core.server.voices as registry_module

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(voices.root / "x"))

    monkeypatch.setattr(registry_module, "stage", full)
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    with pytest.raises(gr.Error) as caught:
        voice_library.save_voice(EngineSlot.holding(engine), voices, "v", clip, "", OWNER)
    assert caught.value.message == "The server has no disk space left for voices."


def test_an_unusable_store_is_reported_without_a_path(engine, tmp_path, write_clip, speech_like):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    voices = VoiceRegistry(blocker / "voices")  # cannot be created: ENOTDIR
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    with pytest.raises(gr.Error) as caught:
        voice_library.save_voice(EngineSlot.holding(engine), voices, "v", clip, "", OWNER)
    assert str(tmp_path) not in caught.value.message and "server log" in caught.value.message


def test_only_the_browser_that_saved_a_voice_may_delete_it(voices, write_clip, speech_like):
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    voices.register("mine", clip, None, owner_key=OWNER)
    voices.register("theirs", clip, None)  # through the API
    for name, key in (("mine", STRANGER), ("theirs", OWNER), ("theirs", "")):
        with pytest.raises(gr.Error, match="not saved from this browser"):
            voice_library.delete_voice(voices, name, key)
    with pytest.raises(gr.Error, match="There is no voice named 'gone'"):
        voice_library.delete_voice(voices, "gone", OWNER)
    with pytest.raises(gr.Error, match="'alloy' is a built-in voice"):
        voice_library.delete_voice(voices, "alloy", OWNER)
    voice_library.delete_voice(voices, "mine", OWNER)
    assert "mine" not in voices.names() and "theirs" in voices.names()


def test_picking_a_voice_offers_delete_only_to_its_owner(voices, write_clip, speech_like):
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    voices.register("mine", clip, "Hello.", owner_key=OWNER)
    visible = lambda update: update["visible"]  # noqa: E731
    upload, about, delete = voice_library.show_picked(voices, "mine", OWNER)
    assert not visible(upload) and visible(delete) and "Hello." in about["value"]
    upload, about, delete = voice_library.show_picked(voices, "mine", STRANGER)
    assert not visible(delete) and "not delete it" in about["value"]
    upload, about, delete = voice_library.show_picked(voices, "alloy", OWNER)
    assert not visible(delete) and "eSpeak" in about["value"]
    upload, about, delete = voice_library.show_picked(voices, "", OWNER)
    assert visible(upload) and not visible(about) and not visible(delete)


def test_a_transcript_is_shown_as_text_not_markup(voices, write_clip, speech_like):
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    voices.register("tricky", clip, "![x](https://evil.example/p.png) <b>hi</b>", owner_key=OWNER)
    _, about, _ = voice_library.show_picked(voices, "tricky", STRANGER)
    assert "![" not in about["value"] and "<b>" not in about["value"]
    assert r"\!\[x\]" in about["value"] and r"\<b\>" in about["value"]


def test_with_an_api_key_the_page_does_not_write_the_voice_store(engine, voices):
    from tts_core.server import AccessPolicy, ApiConfig
    from tts_core.ui import build_demo

    locked = ApiConfig(access=AccessPolicy(api_key="k"))
    for api, editable in ((None, True), (ApiConfig(), True), (locked, False)):
        config = build_demo(engine, voices, api=api).get_config_file()
        (save,) = [c for c in config["components"] if c["props"].get("elem_id") == "save-voice"]
        fns = [
            d for d in config["dependencies"] if save["id"] in [t[0] for t in d.get("targets", [])]
        ]
        assert bool(fns) == editable  # no save event at all on a locked server


@pytest.mark.parametrize("handler", [handlers.stream_to_page, handlers.synthesize_full])
def test_a_stalled_synthesis_still_yields_so_stop_can_end_it(espeak_backend, handler):
    """Regression: the page's stream yielded only when a chunk came, and Gradio stops a job
    only at a yield, so Stop could not end a synthesis whose backend had stalled."""
    backend = StalledBackend(espeak_backend)
    outputs = handler(Engine(backend), "Hello there.", "english", None, "")
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(next(outputs)), daemon=True)
    waiter.start()
    try:
        waiter.join(60)  # a hang detector: the yield comes after PUBLISH_NUDGE_S (0.15 s)
        assert got, "the handler did not yield while the backend made nothing"
        assert not backend.release.is_set() and all(o == gr.skip() for o in got[0])
    finally:
        backend.release.set()
        waiter.join(60)
        outputs.close()  # what Gradio does on Stop: the synthesis is cancelled


# ------------------------------------------------------------------ private voices
@pytest.fixture()
def private_voices(tmp_path, write_clip, speech_like):
    """A private registry holding "mine" (saved by OWNER's browser) and "api-made" (no owner)."""
    registry = VoiceRegistry(tmp_path / "private-voices", private=True)
    clip = write_clip("me.wav", speech_like(3.0, 24_000))
    registry.register("mine", clip, "Hello.", owner_key=OWNER)
    registry.register("api-made", clip, None)
    return registry


def test_private_voices_are_listed_and_shown_to_their_browser_only(private_voices):
    mine = dict((name, label) for label, name in voice_library.choices(private_voices, OWNER))
    theirs = dict((name, label) for label, name in voice_library.choices(private_voices, STRANGER))
    assert mine["mine"] == "mine (saved by you)" and "api-made" not in mine
    assert "mine" not in theirs and "api-made" not in theirs
    assert theirs["alloy"] == "alloy (built-in)"
    _, about, delete = voice_library.show_picked(private_voices, "mine", OWNER)
    assert "no one else sees it" in about["value"] and delete["visible"]
    _, about, delete = voice_library.show_picked(private_voices, "mine", STRANGER)
    assert about["value"] == "There is no voice named 'mine'." and not delete["visible"]
    # a server with --api-key: the page shows its own voices, but no Delete
    _, about, delete = voice_library.show_picked(private_voices, "mine", OWNER, may_delete=False)
    assert "Hello." in about["value"] and not delete["visible"]
    with pytest.raises(gr.Error, match="There is no voice named 'mine'"):
        voice_library.delete_voice(private_voices, "mine", STRANGER)
    assert "mine" in private_voices.names()


def test_a_private_voice_speaks_only_for_the_browser_that_saved_it(engine, private_voices):
    """The page's own event passes the browser's key (bind_page); the API's endpoints have
    none, so with private voices they take the built-in voices only."""
    api = handlers.ApiParameters.for_engine(engine)
    page = handlers.bind_page(EngineSlot.holding(engine), private_voices, api)
    values = dict.fromkeys(api.names) | {"text": "Hello.", "voice": "mine"}
    assert list(inspect.signature(page).parameters) == [*api.names, "owner_key"]
    outputs = list(page(*values.values(), OWNER))
    assert outputs[-1][2]["done"] and outputs[-1][1][1].size
    for key in (STRANGER, None):
        with pytest.raises(gr.Error, match="There is no voice named 'mine'"):
            list(page(*values.values(), key))
    endpoint = handlers.bind(
        handlers.synthesize_full, EngineSlot.holding(engine), private_voices, api
    )
    with pytest.raises(gr.Error, match="There is no voice named 'mine'"):
        list(endpoint(*values.values()))  # as Gradio calls it: by position
    assert list(endpoint(*(values | {"voice": "alloy"}).values()))[-1][1]["done"]


def test_the_page_clears_the_last_clip_and_reports_errors_to_the_stats_panel(engine, voices):
    """Issue #24: a stale clip stayed next to a new error. The page's Generate first clears the
    full clip, and an error also goes to the stats panel (besides its toast)."""
    api = handlers.ApiParameters.for_engine(engine)
    page = handlers.bind_page(EngineSlot.holding(engine), voices, api)
    values = dict.fromkeys(api.names) | {"text": "   "}
    outputs = page(*values.values(), OWNER)
    assert next(outputs) == (gr.skip(), None, gr.skip())
    first = next(outputs)
    assert first[:2] == (gr.skip(), gr.skip()) and "enter some text" in first[2]["error"]
    with pytest.raises(gr.Error, match="enter some text"):
        next(outputs)
    again = page(*values.values(), OWNER)
    next(again)
    second = next(again)
    again.close()
    assert second[2]["error"] == first[2]["error"] and second[2]["at"] > first[2]["at"]
    slot = EngineSlot("some/model")  # the model still loading: the panel hears of it too
    loading = handlers.bind_page(slot, voices, api)(*(values | {"text": "Hi."}).values(), OWNER)
    assert next(loading)[1] is None and "still loading" in next(loading)[2]["error"]


def test_a_browser_without_a_usable_key_gets_a_new_one():
    """The key is made on the first visit; one the page's routes would refuse (a damaged
    storage: not a string of 16-256 characters) is replaced, not sent with every request."""
    kept = "k" * 32
    assert voice_library.usable_key(kept) == kept
    for bad in ("", None, "short", {"not": "a key"}, "x" * 300):
        fresh = voice_library.usable_key(bad)
        assert isinstance(fresh, str) and 16 <= len(fresh) <= 256 and fresh != bad
    assert voice_library.usable_key(None) != voice_library.usable_key(None)  # random
