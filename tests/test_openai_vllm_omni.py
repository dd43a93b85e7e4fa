"""vLLM-Omni's cloning fields and SSE events on our /v1/audio/speech (real HTTP, uvicorn).

The tiny random Qwen3-TTS checkpoint clones from the fixture clip: its speech is noise-like,
but seeded sampling makes every request reproducible bit for bit, so "the same clone" is
checked as equal bytes. What a vLLM-Omni client sends (docs/serving/speech_api.md and
examples/online_serving/text_to_speech/qwen3_tts/openai_speech_client.py of
vllm-project/vllm-omni) is sent here by a separate process with its own httpx client.
"""

from __future__ import annotations

import base64
import http.server
import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.test_openai_api import assert_error, make_api, serve
from tts_core.audio import SAMPLE_RATE, decode_reference, to_int16
from tts_core.engine import Engine, SynthesisParams, SynthesisRequest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "qwen3-tiny-a"
CLIP = FIXTURES / "ref_clip_24k.wav"
TRANSCRIPT = "A short reference sentence."
TEXT = "Hello from a cloned voice."
SEED = 1234
MAX_UPLOAD = 1024 * 1024  # the server's --max-file-size here: 1 MB

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qwen3_api(tmp_path_factory):
    """(url, engine): the tiny Qwen3-TTS checkpoint behind our routes."""
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    from tts_core.backends import load_backend

    backend, _ = load_backend(str(CHECKPOINT), "cpu", allow_fallback=False, quantize="none")
    engine = Engine(backend)
    app = make_api(engine, tmp_path_factory.mktemp("voices"), max_upload_bytes=MAX_UPLOAD)
    with serve(app) as url:
        yield url, engine


def data_url(data: bytes, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


def speech(url: str, **body) -> httpx.Response:  # noqa: ANN003
    body = {"model": "tts-1", "input": TEXT, "seed": SEED, "response_format": "pcm", **body}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def sse_events(text: str) -> list[tuple[str, dict]]:
    """(event name, JSON data) of each SSE block, as an EventSource would read them."""
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_a_clone_by_ref_audio_is_the_clone_by_an_upload_or_a_saved_voice(qwen3_api):
    url, engine = qwen3_api
    clip = CLIP.read_bytes()
    # the page's upload path: the engine given the clip file and its transcript
    params = SynthesisParams("auto", seed=SEED)
    uploaded, _ = engine.synthesize(SynthesisRequest(TEXT, str(CLIP), TRANSCRIPT, params))
    expected = to_int16(uploaded).tobytes()
    by_ref = speech(
        url, ref_audio=data_url(clip), ref_text=TRANSCRIPT, task_type="Base", stream=False
    )
    assert by_ref.status_code == 200, by_ref.text[:300]
    assert len(expected) > 0 and by_ref.content == expected

    # a saved voice keeps its clip as 16-bit WAV (to_int16: round(x * 32767)); this clip's
    # samples come back exactly (|v| <= 2**14: v * 32767 / 32768 rounds to v, half to even)
    decoded = decode_reference(clip).audio
    assert np.array_equal(to_int16(decoded), sf.read(CLIP, dtype="int16")[0])
    files = {"file": ("clip.wav", clip, "audio/wav")}
    saved = httpx.post(
        f"{url}/v1/audio/voices",
        data={"name": "kept", "transcript": TRANSCRIPT},
        files=files,
        timeout=60,
    )
    assert saved.status_code == 201, saved.text
    by_voice = speech(url, voice="kept", stream=False)
    assert by_voice.status_code == 200 and by_voice.content == expected


def test_x_vector_only_mode_leaves_the_transcript_out(qwen3_api):
    url, _ = qwen3_api
    clip = data_url(CLIP.read_bytes())
    modes = {}
    for name, extra in {
        "icl": {"ref_text": TRANSCRIPT},
        "xvec": {"ref_text": TRANSCRIPT, "x_vector_only_mode": True},
        "none": {},
    }.items():
        response = speech(url, ref_audio=clip, stream_format="sse", **extra)
        assert response.status_code == 200, response.text[:300]
        events = sse_events(response.text)
        audio = b"".join(base64.b64decode(d["audio"]) for e, d in events if e.endswith("delta"))
        modes[name] = (events[-1][1]["stats"]["voice"]["mode"], audio)
    assert modes["icl"][0] == "icl" and modes["xvec"][0] == modes["none"][0] == "xvector"
    assert modes["xvec"][1] == modes["none"][1]  # the same request once the transcript is out


def test_stream_true_means_vllm_omni_sse_events(qwen3_api):
    """vLLM-Omni: `stream: true` without stream_format streams `event:` + `data:` blocks."""
    url, engine = qwen3_api
    clip = data_url(CLIP.read_bytes())
    whole = speech(url, ref_audio=clip, ref_text=TRANSCRIPT, stream=False)
    response = speech(url, ref_audio=clip, ref_text=TRANSCRIPT, stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[-1] == "speech.audio.done" and set(names[:-1]) == {"speech.audio.delta"}
    assert all(data["response_format"] == "pcm" for _, data in events[:-1])
    audio = b"".join(base64.b64decode(data["audio"]) for _, data in events[:-1])
    assert audio == whole.content  # the same seed: the same clone, streamed or not
    frames = len(audio) // 2 / engine.backend.frame_samples
    usage = events[-1][1]["usage"]
    assert usage == {
        "input_tokens": 0,
        "output_tokens": int(np.ceil(frames)),
        "total_tokens": int(np.ceil(frames)),
    }


class Counting(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Counting.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(CLIP.read_bytes())

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


def test_a_url_is_refused_and_never_fetched(qwen3_api):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        where = f"http://127.0.0.1:{server.server_address[1]}/clip.wav"
        error = assert_error(speech(qwen3_api[0], ref_audio=where), 400, "ref_audio")
        assert "does not fetch URLs" in error["message"]
        # the same URL from here is served: the server above answers, it was never asked
        assert httpx.get(where, timeout=10).status_code == 200
        assert Counting.hits == ["/clip.wav"]
    finally:
        server.shutdown()


def tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


BAD = [
    ({"ref_audio": base64.b64encode(b"RIFF....WAVE").decode()}, 400, "ref_audio"),  # no data:
    ({"ref_audio": "file:///etc/passwd"}, 400, "ref_audio"),
    ({"ref_audio": data_url(b"hello", "text/plain")}, 400, "ref_audio"),
    ({"ref_audio": "data:audio/wav;base64,not*base64!"}, 400, "ref_audio"),
    ({"ref_audio": data_url(b"\x00" * 4000)}, 400, "ref_audio"),  # not audio
    ({"ref_audio": data_url(wav_bytes(np.zeros(48_000, np.float32), 24_000))}, 400, "ref_audio"),
    ({"ref_audio": 5}, 400, "ref_audio"),
    ({"ref_audio": [data_url(b"x")]}, 400, "ref_audio"),
    # 31 s at 8 kHz (0.5 MB): longer than the 30 s limit, and a transcript would not match a cut
    (
        {"ref_audio": data_url(wav_bytes(tone(31, 8000), 8000)), "ref_text": "words"},
        400,
        "ref_audio",
    ),
    # 23 s at 24 kHz: 1.1 MB, over the 1 MB upload limit (the body itself is within its own)
    ({"ref_audio": data_url(wav_bytes(tone(23, 24_000), 24_000))}, 413, "ref_audio"),
    ({"ref_audio": data_url(CLIP.read_bytes()), "ref_text": "x" * 2001}, 400, "ref_text"),
    ({"ref_audio": data_url(CLIP.read_bytes()), "task_type": "CustomVoice"}, 400, "task_type"),
    ({"ref_text": TRANSCRIPT, "voice": "kept"}, 400, "ref_text"),  # a transcript of no clip
    ({"task_type": "Base"}, 400, "voice"),  # neither a voice nor a clip
]


@pytest.mark.parametrize(("body", "status", "param"), BAD)
def test_bad_cloning_fields_are_errors_naming_the_field(qwen3_api, body, status, param):
    url, engine = qwen3_api
    assert_error(speech(url, **body), status, param)
    assert engine.active_requests == 0
    # the server keeps serving
    assert speech(url, ref_audio=data_url(CLIP.read_bytes())).status_code == 200


VLLM_OMNI_CLIENT = """
import base64, json, sys
import httpx

api_base, ref_audio, ref_text, out = sys.argv[1:5]
with open(ref_audio, "rb") as f:
    ref = "data:audio/wav;base64," + base64.b64encode(f.read()).decode("utf-8")
payload = {"model": "Qwen/Qwen3-TTS-12Hz-0.6B-Base", "input": "Hello, this is a cloned voice.",
           "voice": "vivian", "response_format": "wav", "task_type": "Base",
           "language": "English", "ref_audio": ref, "ref_text": ref_text}
headers = {"Content-Type": "application/json", "Authorization": "Bearer EMPTY"}
with httpx.Client(timeout=300.0) as client:
    response = client.post(f"{api_base}/v1/audio/speech", json=payload, headers=headers)
response.raise_for_status()
open(out, "wb").write(response.content)
payload.update(stream=True, response_format="pcm")
pcm = bytearray()
with httpx.Client(timeout=300.0) as client:
    with client.stream("POST", f"{api_base}/v1/audio/speech", json=payload) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "speech.audio.delta":
                    pcm += base64.b64decode(event["audio"])
                elif event["type"] == "speech.audio.error":
                    sys.exit(event["error"]["message"])
                elif event["type"] == "speech.audio.done":
                    print("done", len(pcm), event["usage"]["output_tokens"])
"""


def test_a_vllm_omni_client_works_unchanged(qwen3_api, tmp_path):
    """Its request as their example sends it: model and voice of their server (ignored with
    ref_audio), task_type Base, a data URL, a Bearer header; then their SSE streaming."""
    script = tmp_path / "client.py"
    script.write_text(VLLM_OMNI_CLIENT)
    out = tmp_path / "out.wav"
    done = subprocess.run(
        [sys.executable, str(script), qwen3_api[0], str(CLIP), TRANSCRIPT, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    audio, rate = sf.read(out, dtype="int16")
    assert rate == SAMPLE_RATE and audio.size > 0
    word, samples, frames = done.stdout.split()
    assert word == "done" and int(samples) > 0 and int(frames) > 0
