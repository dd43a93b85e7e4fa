"""Round four of hardening (issue 37), the findings about files, subprocesses and inputs: no file
of the server's disk comes back through a "clip" (H1, M1), uploads are bounded per file and per
request (M6), a signal to the process group drains encoded streams (M7), the event guard reads
fn_index as Gradio does (L2), a full temp disk is a 507 (L3), an anti-phase stereo clip is not
"silent" (L4), echoed values are cut (L5), a named voice is admitted before its clip is read
(L6).

Each test failed on the code before its fix; the docstrings say how it failed.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import start_app, stop_app

from tts_core.audio import AudioDecodeError, decode_reference
from tts_core.audio import decode as decode_module
from tts_core.audio.ffmpeg import ffmpeg_executable
from tts_core.engine import InputError, Limits
from tts_core.engine.validation import prepare_reference
from tts_core.server.audio_formats import FfmpegEncoder
from tts_core.server.disk_guard import CachePolicy

FAIL_AFTER_S = 60  # only a hung server takes this long
ASSETS = Path(__file__).resolve().parents[1] / "assets"
CLIP = ASSETS / "reference_female_en.wav"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """app.py (espeak) on its own: (url, log path, Gradio's cache folder)."""
    folder = tmp_path_factory.mktemp("round4")
    url, process, log_path = start_app(folder, "--model", "espeak")
    yield url, log_path, folder / "gradio"
    stop_app(process)


# ---------------------------------------------------------------- secret media on the disk


@pytest.fixture(scope="module")
def secret(tmp_path_factory) -> dict[str, Path]:
    """Media files of the server's disk no request should read: a 2 s tone as .ts and .m4a,
    and manifests pointing at them (as the issue's probes did)."""
    folder = tmp_path_factory.mktemp("secret")
    t = np.arange(48_000) / 24_000
    sf.write(folder / "src.wav", (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), 24_000)
    for name in ("secret.ts", "secret.m4a"):
        subprocess.run(
            [
                ffmpeg_executable(),
                "-v",
                "error",
                "-y",
                "-i",
                str(folder / "src.wav"),
                "-c:a",
                "aac",
                str(folder / name),
            ],
            check=True,
        )
    m4a, ts = folder / "secret.m4a", folder / "secret.ts"
    manifests = {
        "hls.m3u8": "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:3\n#EXTINF:2.0,\n"
        f"file://{ts}\n#EXT-X-ENDLIST\n",
        "dash.mpd": '<?xml version="1.0"?>\n<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" '
        'type="static" mediaPresentationDuration="PT2S" minBufferTime="PT1S" '
        'profiles="urn:mpeg:dash:profile:isoff-on-demand:2011"><Period><AdaptationSet '
        'mimeType="audio/mp4"><Representation id="a" bandwidth="64000" codecs="mp4a.40.2" '
        f'audioSamplingRate="24000"><BaseURL>file://{m4a}</BaseURL></Representation>'
        "</AdaptationSet></Period></MPD>\n",
        "list.ffconcat": f"ffconcat version 1.0\nfile {m4a.name}\n",
    }
    paths = {"ts": ts, "m4a": m4a}
    for name, text in manifests.items():
        (folder / name).write_text(text)
        paths[name] = folder / name
    return paths


MANIFESTS = ("hls.m3u8", "dash.mpd", "list.ffconcat")


@pytest.mark.parametrize("name", MANIFESTS)
def test_a_manifest_is_refused_as_a_clip_by_path_and_by_bytes(secret, name):
    """M1. Before: the path decoded all three (2.0 s of the secret tone), the bytes the DASH one
    (its BaseURL is absolute)."""
    path = secret[name]
    for source in (str(path), path.read_bytes()):
        with pytest.raises(AudioDecodeError, match="text file"):
            decode_reference(source)


@pytest.mark.parametrize("name", MANIFESTS)
def test_ffmpeg_itself_opens_no_manifest(secret, name):
    """M1, the second layer: with the text check out of the way, ffmpeg's demuxer and protocol
    lists still refuse (before: it returned the secret tone's samples)."""
    with pytest.raises(AudioDecodeError):
        decode_module._run_ffmpeg(secret[name], 10.0, 10 * 24_000 * 4)


def test_clips_of_ffmpeg_s_containers_still_decode(secret, tmp_path):
    """The restriction keeps what a clip is: m4a, mpegts, webm, wma, aac, ac3 and more (the
    whole matrix of 51 formats the issue tried was run by hand; here one per demuxer kind)."""
    src = secret["ts"].parent / "src.wav"
    for name, codec in (
        ("a.webm", "libopus"),
        ("a.wma", "wmav2"),
        ("a.aac", "aac"),
        ("a.ac3", "ac3"),
        ("a.mka", "flac"),
        ("a.avi", "pcm_s16le"),
    ):
        path = tmp_path / name
        subprocess.run(
            [
                ffmpeg_executable(),
                "-v",
                "error",
                "-y",
                "-i",
                str(src),
                "-ar",
                "48000",
                "-c:a",
                codec,
                str(path),
            ],
            check=True,
        )
        assert decode_reference(str(path)).seconds == pytest.approx(2.0, abs=0.1), name
    for path in (secret["ts"], secret["m4a"]):
        assert decode_reference(path.read_bytes()).seconds == pytest.approx(2.0, abs=0.1)


def test_a_manifest_cannot_become_a_voice(served, secret):
    """M1 on our route: before, POST /v1/audio/voices with the DASH manifest was a 201."""
    url, _, _ = served
    for name in MANIFESTS:
        with secret[name].open("rb") as f:
            answer = httpx.post(
                f"{url}/v1/audio/voices",
                data={"name": f"m-{name[:4]}"},
                files={"file": (name, f, "audio/wav")},
                timeout=FAIL_AFTER_S,
            )
        assert answer.status_code == 400, (name, answer.status_code, answer.text[:300])
        assert "text file" in answer.json()["error"]["message"]


def test_process_recording_and_other_unused_gradio_routes_are_not_served(served, secret):
    """H1. Before: process_recording answered 200 with an MP4 of the manifest's local file and
    left a *_processed.mp4 in the cache."""
    url, _, cache = served
    with secret["dash.mpd"].open("rb") as f:
        answer = httpx.post(
            f"{url}/gradio_api/process_recording",
            files={"video": ("v.mpd", f, "video/mp4")},
            timeout=FAIL_AFTER_S,
        )
    assert answer.status_code == 404, answer.status_code
    assert not list(cache.rglob("*_processed.mp4"))
    for method, path in (
        ("POST", "/gradio_api/vibe-edit"),
        ("GET", "/gradio_api/vibe-code"),
        ("POST", "/gradio_api/component_server"),
        ("GET", "/gradio_api/runs"),
        ("GET", "/gradio_api/proxy=http://127.0.0.1/"),
        ("GET", "/gradio_api/openapi.json"),
        ("GET", "/monitoring"),
        ("POST", "/login"),
        ("GET", "/gradio_api/a-route-of-a-later-gradio"),
    ):
        refused = httpx.request(method, f"{url}{path}", timeout=FAIL_AFTER_S)
        assert refused.status_code == 404, (method, path, refused.status_code)


def test_the_routes_the_page_and_gradio_client_use_still_answer(served):
    """The allow-list's other side (the browser tests and test_hardening_inputs drive the page
    and gradio_client themselves)."""
    url, _, _ = served
    for path in (
        "/",
        "/config",
        "/gradio_api/info",
        "/theme.css",
        "/gradio_api/theme.css",
        "/gradio_api/app_id",
        "/gradio_api/queue/status",
        "/v1/models",
    ):
        answer = httpx.get(f"{url}{path}", timeout=FAIL_AFTER_S)
        assert answer.status_code == 200, (path, answer.status_code)
    uploaded = httpx.post(
        f"{url}/gradio_api/upload",
        timeout=FAIL_AFTER_S,
        files=[("files", ("c.wav", CLIP.read_bytes(), "audio/wav"))],
    )
    assert uploaded.status_code == 200
    served_back = httpx.get(f"{url}/gradio_api/file={uploaded.json()[0]}", timeout=FAIL_AFTER_S)
    assert served_back.content == CLIP.read_bytes()


# ---------------------------------------------------------------- uploads per file


def _parts(count: int) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (f"c{i}.wav", b"RIFF" + bytes(64), "audio/wav")) for i in range(count)]


def test_one_request_cannot_store_a_hundred_files(tmp_path_factory):
    """M6. Before: 200 and 100 files stored, counted as one upload of the 20 allowed."""
    folder = tmp_path_factory.mktemp("uploads")
    url, process, _ = start_app(folder, "--model", "espeak")
    try:
        answer = httpx.post(f"{url}/gradio_api/upload", files=_parts(100), timeout=FAIL_AFTER_S)
        assert answer.status_code == 413, answer.status_code
        assert "at most 4 in one upload" in answer.json()["detail"]
        assert len(list((folder / "gradio").rglob("c*.wav"))) == 0
        # each file counts: 4 + 4 + 4 + 4 + 4 = the 20 allowed, then 429
        limit = CachePolicy().uploads_per_window
        answers = [
            httpx.post(f"{url}/gradio_api/upload", files=_parts(4), timeout=FAIL_AFTER_S)
            for _ in range(limit // 4 - 1)
        ]
        assert [a.status_code for a in answers] == [200] * len(answers)
        over = httpx.post(f"{url}/gradio_api/upload", files=_parts(4), timeout=FAIL_AFTER_S)
        assert over.status_code == 429 and over.headers["retry-after"]
    finally:
        stop_app(process)


def test_a_request_body_past_the_byte_limit_is_refused_up_front(served):
    """M6, bytes per request: a declared Content-Length over the limit is a 413 before Gradio
    reads anything (before: Gradio read and stored it, bounded per file only)."""
    url, _, _ = served
    too_big = CachePolicy().max_upload_bytes + 1
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=FAIL_AFTER_S) as sock:
        sock.sendall(
            b"POST /gradio_api/upload HTTP/1.1\r\nHost: %s:%s\r\n"
            b"content-type: multipart/form-data; boundary=x\r\n"
            b"content-length: %d\r\n\r\n" % (host.encode(), port.encode(), too_big)
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 413")  # no body byte was sent


# ---------------------------------------------------------------- signals to the group


@pytest.mark.parametrize("response_format", ["mp3", "opus", "flac", "aac"])
def test_the_encoder_runs_outside_the_app_s_process_group(response_format):
    """M7, the mechanism. Before: ffmpeg was started in the app's process group, so SIGTERM or
    SIGINT to the group (systemd's stop, Ctrl-C) killed it while the app began its drain, and
    the next feed raised BrokenPipeError (reproduced by hand with tiny Qwen3, whose streams
    outlast the signal: the mp3 response was cut). Its own session: the group signal misses it."""
    got: list[bytes] = []
    encoder = FfmpegEncoder(got.append, response_format)
    try:
        child = encoder._proc.pid
        assert os.getpgid(child) != os.getpgrp() and os.getsid(child) != os.getsid(0)
        encoder.feed(np.zeros(24_000, np.float32))
        encoder.finish()
    finally:
        encoder.close()
    assert got  # still an encoder: bytes came out


def test_sigterm_to_the_process_group_lets_an_mp3_stream_finish(tmp_path):
    """M7 end to end, with the real app: a streamed mp3 in flight, SIGTERM to its process
    group, the stream ends whole and the app exits 0. Before: ffmpeg died of the signal and the
    response was cut (4 of 5 runs here under load; eSpeak can feed ffmpeg all of its audio
    before the signal lands, so the test above is the deterministic one)."""
    url, process, log_path = start_app(
        tmp_path, "--model", "espeak", "--shutdown-timeout", "60", start_new_session=True
    )
    text = "This is a long sentence that keeps the voice busy for a while. " * 60
    request = {"input": text, "voice": "alloy", "response_format": "mp3"}
    try:
        whole = httpx.post(f"{url}/v1/audio/speech", json=request, timeout=FAIL_AFTER_S).content
        with httpx.stream(
            "POST", f"{url}/v1/audio/speech", json=request, timeout=FAIL_AFTER_S
        ) as response:
            chunks = response.iter_bytes()
            received = next(chunks)  # under way, its ffmpeg running
            os.killpg(process.pid, signal.SIGTERM)  # systemd's stop, Ctrl-C's reach
            received += b"".join(chunks)
        assert process.wait(FAIL_AFTER_S) == 0, log_path.read_text()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
    assert "BrokenPipeError" not in log_path.read_text()
    # the same text in the same voice: the same audio; mp3 frames of 1152 samples at 24 kHz,
    # so the lengths agree within a frame or two of encoder start-up
    seconds = [sf.info(io.BytesIO(data)).duration for data in (whole, received)]
    assert seconds[0] > 10 and seconds[1] == pytest.approx(seconds[0], abs=0.1), seconds


# ---------------------------------------------------------------- anti-phase stereo


def test_an_anti_phase_stereo_clip_is_not_silent(write_clip, speech_like):
    """L4. Before: L = -R mixed to exact zeros, and the clip was refused as silent."""
    voice = speech_like(3.0, 24_000)
    path = write_clip("anti.wav", np.stack([voice, -voice], axis=1))
    audio, _ = prepare_reference(path, Limits())
    assert np.max(np.abs(audio)) == pytest.approx(np.max(np.abs(voice)), abs=1e-3)  # 16-bit
    arrayed, _ = prepare_reference((24_000, np.stack([voice, -voice], axis=1)), Limits())
    assert np.max(np.abs(arrayed)) == pytest.approx(np.max(np.abs(voice)), abs=1e-6)
    # a stereo clip with one silent channel still mixes to the mean, as before (-6 dB)
    half, _ = prepare_reference((24_000, np.stack([voice, 0 * voice], axis=1)), Limits())
    assert np.max(np.abs(half)) == pytest.approx(np.max(np.abs(voice)) / 2, abs=1e-6)
    silent = np.zeros((48_000, 2), np.float32)
    with pytest.raises(InputError, match="silent"):
        prepare_reference((24_000, silent), Limits())


def test_an_anti_phase_stereo_m4a_is_not_silent(tmp_path, speech_like):
    """L4 through ffmpeg (an m4a: libsndfile cannot read it). Before: ffmpeg's -ac 1 mix
    cancelled to near zeros, refused as silent. AAC is lossy: the kept channel is compared by
    its peak within 10 % (the encoder's error on a 0.5-peak voice is far below that)."""
    voice = speech_like(3.0, 24_000)
    wav, m4a = tmp_path / "anti.wav", tmp_path / "anti.m4a"
    sf.write(wav, np.stack([voice, -voice], axis=1), 24_000)
    subprocess.run(
        [ffmpeg_executable(), "-v", "error", "-y", "-i", str(wav), "-c:a", "aac", str(m4a)],
        check=True,
    )
    audio, _ = prepare_reference(m4a.read_bytes(), Limits())
    assert np.max(np.abs(audio)) == pytest.approx(np.max(np.abs(voice)), rel=0.1)
    truly_silent = tmp_path / "silent.m4a"
    sf.write(wav, np.zeros((48_000, 2), np.float32), 24_000)
    subprocess.run(
        [
            ffmpeg_executable(),
            "-v",
            "error",
            "-y",
            "-i",
            str(wav),
            "-c:a",
            "aac",
            str(truly_silent),
        ],
        check=True,
    )
    with pytest.raises(InputError, match="silent"):
        prepare_reference(truly_silent.read_bytes(), Limits())


# ---------------------------------------------------------------- the event guard reads as Gradio


def test_an_unknown_fn_index_in_gradio_s_coercible_forms_is_a_404(served):
    """L2. Before: "9999" and 9999.0 passed the guard (not an int to it), Gradio coerced them
    and its lookup raised KeyError: 500; a body over 1 MB passed unread: 500 too."""
    url, _, _ = served
    for index in ("9999", 9999.0):
        answer = httpx.post(
            f"{url}/gradio_api/queue/join",
            timeout=FAIL_AFTER_S,
            json={"fn_index": index, "data": [], "session_hash": "s1"},
        )
        assert answer.status_code == 404, (index, answer.status_code)
    padded = {"fn_index": 9999, "data": ["x" * (1 << 20)], "session_hash": "s1"}
    answer = httpx.post(f"{url}/gradio_api/queue/join", json=padded, timeout=FAIL_AFTER_S)
    assert answer.status_code == 413, answer.status_code


# ---------------------------------------------------------------- values echoed, cut


def test_a_huge_language_is_not_echoed_whole(served):
    """L5. Before: the 400 repeated all 100 000 characters."""
    url, _, _ = served
    body = {"input": "Hello.", "voice": "alloy", "language": "x" * 100_000}
    answer = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=FAIL_AFTER_S)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "language"
    message = answer.json()["error"]["message"]
    assert len(message) < 400 and "(100000 characters)" in message, message[:400]


# ---------------------------------------------------------------- a full disk


def _no_space(*_args, **_kwargs):  # noqa: ANN202
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("answers_first", [False, True])
def test_a_full_disk_during_an_upload_is_a_507(tmp_path, answers_first):
    """L3, uploads. Before: 500. Gradio's upload raises OSError(ENOSPC); mounted in our app
    (app.py's server), its own error middleware has already answered 500 when the exception
    reaches the guard (`answers_first`), launched by itself it has not. Checked by hand too:
    app.py with GRADIO_TEMP_DIR on a full 3 MB tmpfs, a 1 MB upload: 500 before, 507 now."""
    from starlette.testclient import TestClient

    from tts_core.server.disk_guard import DiskGuard, UploadGuard

    async def full_disk_gradio(scope, receive, send):  # noqa: ANN001, ANN202
        while (await receive()).get("more_body"):
            pass
        if answers_first:  # starlette's ServerErrorMiddleware: answer, then raise again
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"Internal Server Error"})
        _no_space()

    http = TestClient(
        UploadGuard(full_disk_gradio, DiskGuard(tmp_path)), raise_server_exceptions=False
    )
    answer = http.post("/gradio_api/upload", files=_parts(1))
    assert answer.status_code == 507, answer.status_code
    assert "disk is full" in answer.json()["detail"]


def test_another_gradio_failure_is_still_its_own_500(tmp_path):
    """The 500 held back for a full disk goes out as it was for any other failure."""
    from starlette.testclient import TestClient

    from tts_core.server.disk_guard import DiskGuard, UploadGuard

    async def failing_gradio(scope, receive, send):  # noqa: ANN001, ANN202
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"Gradio says no"})
        raise RuntimeError("a bug")

    http = TestClient(
        UploadGuard(failing_gradio, DiskGuard(tmp_path)), raise_server_exceptions=False
    )
    answer = http.post("/gradio_api/upload", files=_parts(1))
    assert answer.status_code == 500 and answer.text == "Gradio says no"


def test_a_full_temp_disk_while_decoding_a_voice_is_a_507(engine, tmp_path, secret, monkeypatch):
    """L3, an m4a voice (decoded through a temporary file). Before: 500."""
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from tts_core.server import ApiConfig, install_routes, open_voice_registry

    app = FastAPI()
    install_routes(app, engine, open_voice_registry(tmp_path / "voices"), ApiConfig())
    monkeypatch.setattr(decode_module.tempfile, "TemporaryDirectory", _no_space)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        answer = http.post(
            "/v1/audio/voices",
            data={"name": "m4a-voice"},
            files={"file": ("v.m4a", secret["m4a"].read_bytes(), "audio/mp4")},
        )
    assert answer.status_code == 507, (answer.status_code, answer.text[:300])
    assert answer.json()["error"]["code"] == "disk_full"


# ---------------------------------------------------------------- admitted before the clip


def test_a_full_line_refuses_a_named_voice_before_its_clip_is_read(engine, tmp_path, monkeypatch):
    """L6. Before: the saved voice's clip was read and resampled, then the 503."""
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from tts_core.server import ApiConfig, install_routes, open_voice_registry

    voices = open_voice_registry(tmp_path / "voices")
    voices.register("saved", str(CLIP), None)
    loads = []
    real_load = voices.load
    monkeypatch.setattr(voices, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    app = FastAPI()
    install_routes(app, engine, voices, ApiConfig())
    admission = engine.admission
    places = [admission.reserve() for _ in range(admission.slots + admission.queue_size)]
    body = {"input": "Hello.", "voice": "saved", "response_format": "pcm"}
    with TestClient(app, base_url="http://127.0.0.1") as http:
        refused = http.post("/v1/audio/speech", json=body)
        assert refused.status_code == 503 and refused.headers["retry-after"]
        page = http.post("/tts_stream/pcm", json={"text": "Hello.", "voice": "saved"})
        assert page.status_code == 503 and page.headers["retry-after"]  # the page's route too
        assert loads == []
        for place in places:
            place.release()
        spoken = http.post("/v1/audio/speech", json=body)
    assert spoken.status_code == 200 and len(spoken.content) > 0 and len(loads) == 1
    assert admission.running == admission.waiting == 0  # the held place was taken and given back
