"""`--model http://HOST:PORT/v1`: our page and API in front of another server's /v1.

The remote is a second instance of our own server (uvicorn on 127.0.0.1) serving the tiny
Qwen3-TTS checkpoint; the front is an engine on RemoteBackend behind the same routes. Seeded
sampling makes a request reproducible bit for bit, so "the remote's own bytes" is equality:
the front sends the clip's exact float32 samples (a float WAV) and turns the remote's int16
back into the same int16 (v / 32767 -> round(x * 32767) = v), and its engine adds no fade.
"""

from __future__ import annotations

import base64
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.test_openai_api import RecordingEngine, assert_error, make_api, serve
from tts_core.backends.remote import RemoteBackend, RemoteInfo
from tts_core.engine import BackendError, Engine, EngineConfig, Limits

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "qwen3-tiny-a"
CLIP = FIXTURES / "ref_clip_24k.wav"
TRANSCRIPT = "A short reference sentence."
TEXT = "Hello from the other server."
REMOTE_MAX_TRANSCRIPT = 40  # the remote refuses longer transcripts than the front (2000)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """(url of its /v1, its engine): the tiny checkpoint behind our routes."""
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    from tts_core.backends import load_backend

    backend, _ = load_backend(str(CHECKPOINT), "cpu", allow_fallback=False, quantize="none")
    engine = RecordingEngine(
        backend, EngineConfig(limits=Limits(max_reference_text_chars=REMOTE_MAX_TRANSCRIPT))
    )
    with serve(make_api(engine, tmp_path_factory.mktemp("remote-voices"))) as url:
        yield f"{url}/v1", engine


def front_for(base: str, stream_format: str, voices: Path):  # noqa: ANN201 - a context manager
    backend = RemoteBackend.connect(base, stream_format=stream_format)
    engine = Engine(backend, EngineConfig(fade_ms=0.0))  # as app.py builds it for a URL
    return serve(make_api(engine, voices)), engine


@pytest.fixture(scope="module", params=["audio", "sse"])
def front(request, remote, tmp_path_factory):
    """(url, engine): our routes on a RemoteBackend reading raw PCM or SSE from `remote`."""
    server, engine = front_for(remote[0], request.param, tmp_path_factory.mktemp("voices"))
    with server as url:
        yield url, engine


def speech(url: str, **body) -> httpx.Response:  # noqa: ANN003
    body = {
        "model": "tts-1",
        "input": TEXT,
        "seed": 99,
        "response_format": "pcm",
        "stream": False,
        **body,
    }
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def clip_url() -> str:
    return "data:audio/wav;base64," + base64.b64encode(CLIP.read_bytes()).decode()


@pytest.mark.parametrize("with_text", [True, False], ids=["icl", "xvector"])
def test_the_front_gives_the_remotes_own_bytes(front, remote, with_text):
    extra = {"ref_text": TRANSCRIPT} if with_text else {}
    direct = speech(remote[0][: -len("/v1")], ref_audio=clip_url(), **extra)
    through = speech(front[0], ref_audio=clip_url(), **extra)
    assert direct.status_code == through.status_code == 200, through.text[:300]
    assert len(direct.content) > 0 and through.content == direct.content
    assert through.headers["x-sample-rate"] == "24000"


def test_a_saved_voice_of_the_front_and_the_knobs_reach_the_remote(front, remote):
    url, _ = front
    files = {"file": ("clip.wav", CLIP.read_bytes(), "audio/wav")}
    saved = httpx.post(
        f"{url}/v1/audio/voices",
        data={"name": "kept", "transcript": TRANSCRIPT},
        files=files,
        timeout=60,
    )
    assert saved.status_code == 201, saved.text
    greedy = {"top_k": 1, "temperature": 0.5, "language": "english"}
    direct = speech(remote[0][: -len("/v1")], ref_audio=clip_url(), ref_text=TRANSCRIPT, **greedy)
    sampled = speech(remote[0][: -len("/v1")], ref_audio=clip_url(), ref_text=TRANSCRIPT)
    through = speech(url, voice="kept", **greedy)
    assert through.status_code == 200 and through.content == direct.content
    assert direct.content != sampled.content  # the knobs change the audio: they were sent


def test_the_stream_streams_and_sse_of_the_front_carries_the_same_audio(front, remote):
    url, _ = front
    whole = speech(url, ref_audio=clip_url(), ref_text=TRANSCRIPT)
    response = speech(url, ref_audio=clip_url(), ref_text=TRANSCRIPT, stream=True)
    assert response.status_code == 200
    deltas = [line for line in response.text.splitlines() if '"speech.audio.delta"' in line]
    audio = b"".join(base64.b64decode(line.split('"audio": "')[1].split('"')[0]) for line in deltas)
    assert len(deltas) >= 2 and audio == whole.content


def test_the_remotes_refusal_is_our_error(front, remote):
    words = "A transcript longer than the remote server accepts for a clip."
    assert len(words) > REMOTE_MAX_TRANSCRIPT
    refused = speech(front[0], ref_audio=clip_url(), ref_text=words)
    error = assert_error(refused, 400, "ref_text")
    assert f"the limit is {REMOTE_MAX_TRANSCRIPT}" in error["message"]
    assert speech(front[0], ref_audio=clip_url()).status_code == 200  # and it keeps serving


def test_a_cancelled_request_stops_the_remotes_work(front, remote):
    url, _ = front
    runs = len(remote[1].runs)
    body = {
        "input": "Cancel me please, " * 3,
        "ref_audio": clip_url(),
        "response_format": "pcm",
        "chunk_frames": 1,
        "first_chunk_frames": 1,
    }
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_bytes())
    deadline = time.monotonic() + 60  # event-bounded: the remote's run ends once cancelled
    while time.monotonic() < deadline and not (
        len(remote[1].runs) > runs and remote[1].runs[-1]["ended"] is not None
    ):
        time.sleep(0.05)
    run = remote[1].runs[-1]
    assert run["ended"] is not None and run["cancel"].is_set()


def test_a_remote_that_is_down_is_a_clear_error_and_the_front_keeps_serving(remote, tmp_path):
    with ExitStack() as remote_server:  # a second remote we can stop: the same engine
        gone = remote_server.enter_context(serve(make_api(remote[1], tmp_path / "remote")))
        server, _ = front_for(f"{gone}/v1", "audio", tmp_path / "front")
        with server as url:
            assert speech(url, ref_audio=clip_url()).status_code == 200
            remote_server.close()  # the remote stops; the front does not know
            for _ in range(2):  # each request gets the error at once: no hang, no lasting harm
                error = assert_error(speech(url, ref_audio=clip_url()), 500)
                assert gone in error["message"] and "could not be reached" in error["message"]
            assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 200


def test_a_busy_remote_is_our_busy_answer(remote, tmp_path):
    """The remote's 503 (its line full, or it is closing) is our 503 `engine_busy` with the
    remote's Retry-After: what our own admission answers, not a 500."""
    busy = Engine(remote[1].backend, EngineConfig(max_concurrent=1, max_queue=0))
    held = busy.admission.reserve()  # the remote's only place: taken
    with ExitStack() as stack:
        remote_url = stack.enter_context(serve(make_api(busy, tmp_path / "remote")))
        server, _ = front_for(f"{remote_url}/v1", "audio", tmp_path / "front")
        url = stack.enter_context(server)
        own = assert_error(speech(remote_url, ref_audio=clip_url()), 503)  # the remote itself
        refused = speech(url, ref_audio=clip_url())
        error = assert_error(refused, 503)
        assert (
            (error["type"], error["code"])
            == (own["type"], own["code"])
            == ("server_busy", "engine_busy")
        )
        assert refused.headers["retry-after"] == "1" and "busy" in error["message"]
        held.release()
        assert speech(url, ref_audio=clip_url()).status_code == 200  # busy was for the moment
        busy.admission.close("The server is shutting down.")  # Retry-After 10: carried over
        closing = speech(url, ref_audio=clip_url())
        assert assert_error(closing, 503)["code"] == "engine_busy"
        assert closing.headers["retry-after"] == "10"


def test_connecting_to_nothing_is_a_backend_error(free_port):
    with pytest.raises(BackendError, match="could not be reached"):
        RemoteBackend.connect(f"http://127.0.0.1:{free_port}/v1")


def test_a_bare_vllm_omni_model_list_means_qwen3_tts_at_24_khz():
    info = RemoteInfo.from_models({"object": "list", "data": [{"id": "Qwen/Qwen3-TTS-Base"}]})
    assert (info.model, info.sample_rate, info.frame_samples) == (
        "Qwen/Qwen3-TTS-Base",
        24_000,
        1920,
    )
    assert info.needs_reference


def test_int16_comes_back_exactly():
    from tts_core.audio import to_int16

    every = np.arange(-32767, 32768, dtype=np.int16)  # what round(x * 32767) can produce
    assert np.array_equal(to_int16(every.astype(np.float32) / np.float32(32767.0)), every)


def test_app_serves_the_page_from_a_remote(remote, launch_app):
    """`python app.py --model URL`: the page's API (gradio_client) speaks through it."""
    from gradio_client import Client, handle_file

    url, _ = launch_app("--model", remote[0], "--no-fallback")
    info = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][-1]["info"]
    assert info["backend"] == "remote" and info["sample_rate"] == 24_000
    client = Client(url, verbose=False)
    outputs = list(
        client.submit(
            "Hello from the page.",
            "english",
            handle_file(str(CLIP)),
            "",
            0.9,
            50,
            1.0,
            1.05,
            7,
            2,
            4,
            api_name="/synthesize",
        )
    )
    stats = outputs[-1][1]
    assert stats["backend"] == "remote" and stats["done"], stats
