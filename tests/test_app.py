"""The app launched on localhost (`python app.py --model espeak`), driven with gradio_client."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import HANG_S, HeldBackend
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from tts_core.ui.handlers import FIRST_RELEASE_ORDER, ApiParameters

ASSETS = Path(__file__).resolve().parents[1] / "assets"

TEXT = "Streaming works. Each sentence is its own phrase! Here is the third, and the last one."
REFERENCE = str(ASSETS / "reference_female_en.wav")
ADVANCED = (0.9, 50, 1.0, 1.05, -1, 2, 6)  # temperature, top_k, top_p, penalty, seed, chunks
GUIDANCE = (2.0, 10)  # cfg_value, inference_timesteps (VoxCPM2's; eSpeak ignores them)


def every_input(*values) -> list:
    """A plain HTTP call's data (/gradio_api/call/...): Gradio wants a value for every input,
    so `values` (the first release's order) and None (a knob's default) for every later one."""
    return [*values, *[None] * (len(ApiParameters.for_engine().names) - len(values))]


def args(text=TEXT, language="english", reference=REFERENCE, ref_text="", advanced=ADVANCED):
    ref = handle_file(reference) if reference else None
    return (text, language, ref, ref_text, *advanced)


@pytest.fixture(scope="module")
def client(app_server):
    url, _ = app_server
    return Client(url, verbose=False)


def wav_seconds(path: str) -> float:
    info = sf.info(path)
    return info.frames / info.samplerate


def test_named_endpoints(client):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/synthesize", "/synthesize_full"} <= set(endpoints)
    for endpoint in ("/synthesize", "/synthesize_full"):
        names = [p["parameter_name"] for p in endpoints[endpoint]["parameters"]]
        # positional callers' order, kept; the knobs declared since come after it
        assert names == list(ApiParameters.for_engine().names)
        assert names[: len(FIRST_RELEASE_ORDER)] == list(FIRST_RELEASE_ORDER)


def test_espeak_keeps_the_language_choice(client):
    """eSpeak (and Qwen3-TTS) read the language: the page shows the dropdown (VoxCPM2 hides
    it: tests/test_app_voxcpm.py)."""
    import httpx

    config = httpx.get(f"{client.src.rstrip('/')}/config", timeout=30).json()
    (language,) = [
        c for c in config["components"] if c.get("props", {}).get("elem_id") == "language"
    ]
    assert language["props"].get("visible", True) is True


def test_gradio_client_passes_knobs_by_name(client):
    """The chunk sizes by name: the first chunk holds about first_chunk_frames x 80 ms (a
    chunk ends with the eSpeak buffer that completes it: well under 0.5 s past its target)."""
    text = "The first chunk of this sentence is as long as the request asks it to be."
    small = client.predict(
        text=text, first_chunk_frames=1, chunk_frames=25, api_name="/synthesize_full"
    )[1]
    large = client.predict(
        text=text, language="english", first_chunk_frames=25, api_name="/synthesize_full"
    )[1]
    assert small["audio_s"] > 2.5 and large["audio_s"] > 2.5  # room for a 2 s first chunk
    assert small["chunk_audio_s"][0] < 0.5 < 1.9 < large["chunk_audio_s"][0]


def test_synthesize_streams_chunks_then_final_stats(client):
    outputs = list(client.submit(*args(), api_name="/synthesize"))
    assert len(outputs) >= 4
    chunk_paths = [audio for audio, _ in outputs if audio]
    stats = [s for _, s in outputs]
    assert [s["chunks"] for s in stats] == list(range(1, len(outputs) + 1))
    assert not any(s["done"] for s in stats[:-1]) and stats[-1]["done"]
    final = stats[-1]
    assert final["backend"] == "espeak" and final["stop_reason"] == "end"
    assert final["time_to_first_audio_s"] > 0 and final["real_time_factor"] < 1
    assert final["voice"]["variant"] == "+f3"  # the female reference picked the female variant
    streamed = sum(wav_seconds(p) for p in chunk_paths)
    assert streamed == pytest.approx(final["audio_s"], abs=2e-3)


def test_synthesize_full_duration_matches_the_stream(client):
    outputs = list(client.submit(*args(), api_name="/synthesize"))
    streamed = sum(wav_seconds(audio) for audio, _ in outputs if audio)
    path, stats = client.predict(*args(), api_name="/synthesize_full")
    assert sf.info(path).samplerate == 24_000 and sf.info(path).channels == 1
    assert wav_seconds(path) == pytest.approx(stats["audio_s"], abs=2e-3)
    # two separate eSpeak runs: equal up to its small run-to-run timing jitter
    assert wav_seconds(path) == pytest.approx(streamed, rel=0.01)


def test_bad_inputs_are_errors_and_the_server_keeps_serving(client, tmp_path, speech_like):
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("plain text, not audio\n" * 40)
    short = tmp_path / "short.wav"
    sf.write(short, speech_like(0.5, 24_000), 24_000)
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(48_000, np.float32), 24_000)
    cases = [
        (args(text=""), "enter some text"),
        (args(text="x" * 4097), "limit is 4096"),  # the deployment's one limit, as /v1's
        (args(language="klingon"), "Unsupported language"),
        (args(reference=str(not_audio)), "not audio"),
        (args(reference=str(short)), "at least 1 s"),
        (args(reference=str(silent)), "silent"),
        (args(advanced=(0.9, 50, 1.0, 1.05, -1, 0, 6)), r"first_chunk_frames must be a whole"),
        # no clip: the server's upload rate limit counts every file of this test's calls
        (args(reference=None, advanced=(0.9, 50.5, 1.0, 1.05, -1, 2, 6)), "top_k must be a whole"),
    ]
    for call, message in cases:
        for api_name in ("/synthesize_full", "/synthesize"):
            with pytest.raises(AppError, match=message):
                client.predict(*call, api_name=api_name)
    path, stats = client.predict(*args(), api_name="/synthesize_full")
    assert stats["done"] and wav_seconds(path) > 1


def test_oversize_upload_is_refused(client, tmp_path, speech_like):
    big = tmp_path / "big.wav"  # the test server runs with --max-file-size 2mb
    sf.write(big, np.tile(speech_like(1.0, 48_000), 30), 48_000, subtype="PCM_16")  # ~2.9 MB
    with pytest.raises(Exception, match="(?i)too large|maximum|size"):
        client.predict(*args(reference=str(big)), api_name="/synthesize_full")
    assert client.predict(*args(), api_name="/synthesize_full")[1]["done"]


@pytest.fixture()
def slow_app(espeak_backend, free_port):
    """(engine, url, backend): the page on the real eSpeak voice, whose LONG_TEXT requests
    slow to a trickle after their first second of audio until their cancel (HeldBackend): a
    request that must be stopped cannot end on its own first, however fast or slow the
    machine is."""
    from tts_core.engine import Engine
    from tts_core.ui import build_demo

    backend = HeldBackend(espeak_backend, held=lambda text: text == LONG_TEXT)
    engine = Engine(backend)
    demo = build_demo(engine).queue()
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, server_port=free_port)
    yield engine, url.rstrip("/"), backend
    backend.release()
    demo.close()


LONG_TEXT = " ".join(["This long sentence keeps the slow voice busy for a while."] * 12)


def wait_until_idle(engine) -> None:
    """Until no request runs: a hang detector (a held request whose cancel never comes runs
    forever), not a speed bound."""
    deadline = time.monotonic() + HANG_S
    while engine.active_requests:
        assert time.monotonic() < deadline, f"the request still runs after {HANG_S} s"
        time.sleep(0.02)


def assert_stopped_by_its_cancel(engine, backend) -> None:
    """The held request ended through its cancel, asking for one piece at most after it (the
    one it was waiting for), and gave its slot back."""
    run = backend.runs[-1]
    assert run.text == LONG_TEXT
    wait_until_idle(engine)
    assert run.cancelled.is_set(), "the request ended without its cancel reaching the backend"
    assert run.ended.is_set()
    assert run.after_cancel <= 1, f"{run.after_cancel} pieces asked for after the cancel"


def test_stop_ends_the_generation_promptly(slow_app):
    engine, url, backend = slow_app
    client = Client(url, verbose=False)
    job = client.submit(*args(text=LONG_TEXT), api_name="/synthesize")
    backend.wait_holding()
    deadline = time.monotonic() + HANG_S
    while len(job.outputs()) < 2:  # the page got its first chunks
        assert time.monotonic() < deadline, "no chunks reached the client"
        time.sleep(0.05)
    assert engine.active_requests == 1
    job.cancel()
    assert_stopped_by_its_cancel(engine, backend)
    assert client.predict(*args(text="Still here."), api_name="/synthesize_full")[1]["done"]


def test_client_disconnect_ends_the_generation_promptly(slow_app):
    import httpx

    engine, url, backend = slow_app
    data = every_input(LONG_TEXT, "english", None, "", *ADVANCED, *GUIDANCE, None)
    event = httpx.post(f"{url}/gradio_api/call/synthesize", json={"data": data}).json()["event_id"]
    chunks = 0
    with httpx.stream("GET", f"{url}/gradio_api/call/synthesize/{event}", timeout=HANG_S) as sse:
        for line in sse.iter_lines():
            chunks += line.startswith("event: generating")
            if chunks == 2:
                break  # leaving the block closes the connection: a client that went away
    assert engine.active_requests == 1
    assert_stopped_by_its_cancel(engine, backend)


def test_unloadable_model_falls_back_to_espeak_with_a_notice(launch_app, tmp_path):
    import httpx

    missing = tmp_path / "no-such-checkpoint"
    url, log_path = launch_app("--model", str(missing))
    assert "falling back to the offline eSpeak voice" in log_path.read_text()
    config = httpx.get(f"{url}/config", timeout=30).text
    # the page says it in plain words, the error itself folded away under "Details"
    assert "was not found" in config and "fallback-notice" in config
    assert "To get the real voice" in config and "FileNotFoundError" in config
    path, stats = Client(url, verbose=False).predict(*args(), api_name="/synthesize_full")
    assert stats["backend"] == "espeak" and wav_seconds(path) > 1
    assert any("built-in eSpeak NG voice" in notice for notice in stats["notices"])


def test_cancelled_full_synthesis_frees_the_engine(slow_app):
    """A cancelled /synthesize_full kept synthesizing ~7 s, holding the engine's slot."""
    engine, url, backend = slow_app
    client = Client(url, verbose=False)
    job = client.submit(*args(text=LONG_TEXT), api_name="/synthesize_full")
    backend.wait_holding()  # well inside the synthesis, and it cannot end by itself
    job.cancel()
    assert_stopped_by_its_cancel(engine, backend)
    assert client.predict(*args(text="Still here."), api_name="/synthesize_full")[1]["done"]


def test_lost_client_of_full_synthesis_frees_the_engine(slow_app):
    import httpx

    engine, url, backend = slow_app
    data = every_input(LONG_TEXT, "english", None, "", *ADVANCED, *GUIDANCE, None)
    call = f"{url}/gradio_api/call/synthesize_full"
    event = httpx.post(call, json={"data": data}).json()["event_id"]
    with httpx.stream("GET", f"{call}/{event}", timeout=HANG_S):  # headers only: no event comes
        backend.wait_holding()  # before the end for a function that is not a generator
    # leaving the block closed the connection
    assert_stopped_by_its_cancel(engine, backend)


def test_command_line_weight_options():
    from app import parse_args

    args = parse_args(["--quantize", "int8", "--dtype", "bfloat16", "--max-file-size", "5mb"])
    assert (args.quantize, args.dtype, args.max_file_bytes) == ("int8", "bfloat16", 5 * 2**20)
    assert parse_args([]).quantize == "auto"
    with pytest.raises(SystemExit):
        parse_args(["--quantize", "int3"])
    with pytest.raises(SystemExit):
        parse_args(["--max-file-size", "lots"])


def test_gradio_client_may_leave_out_the_reference(client):
    """Regression: `reference` had no default, so gradio_client refused a call without it
    ("No value provided for required argument: reference"); a named voice or none now works."""
    _, stats = client.predict(text="Hello there.", api_name="/synthesize_full")
    assert stats["done"] and stats["audio_s"] > 0
    _, stats = client.predict(text="Hello there.", voice="arctic-slt", api_name="/synthesize_full")
    assert stats["voice"]["variant"] == "+f3"  # the recorded female voice: eSpeak's female variant


def test_private_voices_option_and_its_environment_variable(monkeypatch):
    from app import parse_args

    assert parse_args([]).private_voices is False
    assert parse_args(["--private-voices"]).private_voices is True
    for value, on in (("1", True), ("true", True), ("YES", True), ("0", False), ("", False)):
        monkeypatch.setenv("TTS_PRIVATE_VOICES", value)
        assert parse_args([]).private_voices is on, value


def test_the_app_with_private_voices(launch_app):
    """`--private-voices`: a voice saved by one visitor (here over /v1 with its X-Voice-Owner
    key; the page's browsers: tests/test_page_browser.py) is not listed to, nor usable by,
    anyone else, gradio_client's named endpoints included (they carry no key)."""
    import httpx

    url, _ = launch_app("--model", "espeak", "--private-voices")
    issued = httpx.post(f"{url}/v1/audio/voices/owner_key", timeout=30).json()["owner_key"]
    owner = {"X-Voice-Owner": issued}  # a key the server issued (issue #37 M5)
    with open(REFERENCE, "rb") as clip:
        made = httpx.post(
            f"{url}/v1/audio/voices",
            data={"name": "kept"},
            headers=owner,
            files={"file": ("c.wav", clip, "audio/wav")},
            timeout=60,
        )
    assert made.status_code == 201, made.text

    def listed(**headers: str) -> list[str]:
        data = httpx.get(f"{url}/v1/audio/voices", headers=headers, timeout=30).json()["data"]
        return [voice["id"] for voice in data if voice["kind"] == "custom"]

    assert listed(**owner) == ["kept"] and listed() == []
    body = {"input": "Hello.", "voice": "kept", "response_format": "pcm", "stream": False}
    spoken = httpx.post(f"{url}/v1/audio/speech", json=body, headers=owner, timeout=60)
    assert spoken.status_code == 200 and len(spoken.content) > 0
    assert httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60).status_code == 404
    client = Client(url, verbose=False)
    with pytest.raises(AppError, match="There is no voice named 'kept'"):
        client.predict(text="Hello.", voice="kept", api_name="/synthesize_full")
    _, stats = client.predict(text="Hello.", voice="arctic-slt", api_name="/synthesize_full")
    assert stats["done"]


def test_plain_http_with_too_few_values_is_told_what_the_endpoint_takes(app_server):
    """Regression (issue 36): the README's plain-HTTP call sent 11 of /synthesize_full's values;
    Gradio answered with its components' Python reprs and logged a traceback. Now the answer
    names the values in order, and the log has no traceback."""
    import json

    import httpx

    url, log_path = app_server
    logged = len(log_path.read_text())
    call = f"{url}/gradio_api/call/synthesize_full"
    event = httpx.post(call, json={"data": ["Hello.", "english"]}, timeout=30).json()["event_id"]
    answer = httpx.get(f"{call}/{event}", timeout=HANG_S).text
    assert answer.startswith("event: error"), answer[:300]
    message = json.loads(answer.split("data: ", 1)[1].splitlines()[0])["error"]
    names = ", ".join(ApiParameters.for_engine().names)
    assert message == (
        f"/synthesize_full takes {len(ApiParameters.for_engine().names)} values "
        f"in this order: {names} (null: the default); got 2."
    )
    assert "Traceback" not in log_path.read_text()[logged:]


def test_the_page_queue_lets_the_event_loop_sleep(tmp_path):
    """Gradio's queue looks for page events every 1 ms while idle (progress every 10 ms): ~900
    wake-ups a second of the app's event loop with no request at all, measured, each taking the
    GIL and a core from the model thread. The app's queue looks every 20 ms (progress 100 ms)."""
    import app

    args = app.parse_args(["--model", "espeak", "--wait-for-model", "--voices-dir", str(tmp_path)])
    queue = app.build_app(args)._queue
    assert queue.sleep_when_free >= 0.02 and queue.progress_update_sleep_when_free >= 0.1
