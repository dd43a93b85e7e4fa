"""Up at once, model in the background: the slot, its progress, and what requests get meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from conftest import HANG_S
from test_openai_api import make_api, serve

from tts_core.backends import explain_load_failure, load_backend
from tts_core.engine import BackendError, Engine, EngineSlot, ModelLoading
from tts_core.engine.loading import DOWNLOADING, FAILED, LOADING, READY
from tts_core.models.download import download_finished, progress_bar, reporting_to

SPEECH = {"input": "Hello there.", "voice": "coral", "response_format": "wav"}


def test_slot_answers_loading_until_the_engine_is_set(espeak_backend):
    slot = EngineSlot("some/model")
    with pytest.raises(ModelLoading, match="still loading") as caught:
        _ = slot.engine
    assert caught.value.retry_after_s > 0 and slot.info() == {"status": slot.progress.as_json()}
    slot.report(DOWNLOADING, done=600e6, total=2400e6)
    assert slot.progress.fraction == pytest.approx(0.25)
    with pytest.raises(ModelLoading, match=r"downloading 0.60 of 2.40 GB \(25 %\)"):
        _ = slot.engine
    slot.report(LOADING)
    assert slot.progress.describe() == "loading the model into memory"
    engine = Engine(espeak_backend)
    slot.set(engine)
    assert slot.engine is engine and slot.info()["status"]["status"] == READY
    slot.report(DOWNLOADING, done=1, total=2)  # a late report cannot undo "ready"
    assert slot.progress.phase == READY


def test_background_load_hands_over_the_engine_or_its_failure(espeak_backend):
    loading, gate = threading.Event(), threading.Event()

    def build(report):  # noqa: ANN001, ANN202
        report(LOADING)
        loading.set()
        gate.wait(HANG_S)
        return Engine(espeak_backend)

    slot = EngineSlot("espeak")
    thread = slot.load(build)
    assert loading.wait(HANG_S)  # the load is under way and held at the gate
    assert not slot.ready and slot.progress.phase == LOADING
    gate.set()
    thread.join(HANG_S)
    assert slot.wait(HANG_S).backend is espeak_backend

    def broken(report):  # noqa: ANN001, ANN202
        raise OSError("disk on fire")

    failed = EngineSlot("x")
    failed.load(broken).join(HANG_S)
    assert failed.progress.phase == FAILED
    with pytest.raises(BackendError, match="could not be loaded .*disk on fire"):
        _ = failed.engine
    with pytest.raises(OSError):  # --wait-for-model: the error stops the start
        EngineSlot("x").load(broken, background=False)


def test_hub_download_progress_reaches_the_slot():
    """huggingface_hub opens its bars through the tqdm class we pass (2.x: one aggregated
    byte bar whose total grows per file, plus a file-count bar); the slot hears the bytes."""
    from huggingface_hub.utils.tqdm import _create_progress_bar

    slot = EngineSlot("org/model")
    with reporting_to(slot.report):
        bar_class = progress_bar()
        files = _create_progress_bar(cls=bar_class, log_level=30, name="f", total=3)
        data = _create_progress_bar(cls=bar_class, log_level=30, name="b", total=0, unit="B")
        data.total = 4000
        data.refresh()
        data.update(1000)
        files.update(1)
        assert (slot.progress.phase, slot.progress.done, slot.progress.unit) == (
            DOWNLOADING,
            1000,
            "B",
        )
        assert slot.progress.fraction == pytest.approx(0.25)
        download_finished()
    assert slot.progress.phase == LOADING
    assert progress_bar() is None  # no listener: huggingface_hub's own bar, unchanged


def test_a_missing_model_falls_back_with_a_plain_notice(tmp_path):
    backend, notice = load_backend(str(tmp_path / "nowhere"))
    assert backend.name == "espeak"
    assert "was not found" in notice.summary and "eSpeak NG" in notice.summary
    assert "To get the real voice" in notice.summary and "Error" not in notice.summary
    assert notice.details.startswith("FileNotFoundError: checkpoint folder not found")
    engine = Engine(backend, notice=notice)
    assert engine.info()["notice"] == notice.summary
    assert engine.info()["notice_details"] == notice.details
    with pytest.raises(FileNotFoundError):
        load_backend(str(tmp_path / "nowhere"), allow_fallback=False)


def test_no_network_is_explained_in_plain_words():
    error = FileNotFoundError(
        "'Qwen/X' is not a local folder and could not be downloaded from "
        "the Hub (no network connection to the Hub, and no copy in the "
        "local cache): ConnectError: [Errno -2] Name or service not known"
    )
    notice = explain_load_failure("Qwen/X", error)
    assert "cannot reach the Hugging Face Hub" in notice.summary
    assert "--model /path/to/a/downloaded/checkpoint" in notice.summary
    assert "Errno" not in notice.summary and "Errno" in notice.details


def test_api_while_loading_is_503_with_retry_after_then_serves(espeak_backend, tmp_path):
    slot = EngineSlot("org/model")
    slot.report(DOWNLOADING, done=1e9, total=4e9)
    with serve(make_api(slot, tmp_path)) as url:
        models = httpx.get(f"{url}/v1/models", timeout=HANG_S).json()["data"]
        status = models[-1]["status"]
        assert models[-1]["id"] == "org/model" and status["status"] == DOWNLOADING
        assert status["progress"] == pytest.approx(0.25) and status["download_size"] == 4e9
        for path, body in (("/v1/audio/speech", SPEECH), ("/tts_stream/pcm", {"text": "Hi."})):
            response = httpx.post(f"{url}{path}", json=body, timeout=HANG_S)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "5"
            assert response.json()["error"]["code"] == "model_loading"
            assert "downloading 1.00 of 4.00 GB (25 %)" in response.json()["error"]["message"]
        assert httpx.get(f"{url}/v1/audio/voices", timeout=HANG_S).status_code == 200
        slot.set(Engine(espeak_backend))
        assert httpx.post(f"{url}/v1/audio/speech", json=SPEECH, timeout=HANG_S).status_code == 200
        ready = httpx.get(f"{url}/v1/models", timeout=HANG_S).json()["data"][-1]
        assert ready["status"]["status"] == READY and ready["info"]["sample_rate"] == 24_000


def test_api_after_a_failed_load_says_why(tmp_path):
    slot = EngineSlot("org/model")
    slot.fail("OSError: disk on fire")
    with serve(make_api(slot, tmp_path)) as url:
        response = httpx.post(f"{url}/v1/audio/speech", json=SPEECH, timeout=HANG_S)
        assert response.status_code == 500 and "disk on fire" in response.text
        assert httpx.get(f"{url}/v1/models", timeout=HANG_S).json()["data"][-1]["status"]["error"]


def test_errors_shown_to_visitors_carry_no_server_paths():
    from tts_core.engine.errors import redact_paths

    error = OSError("[Errno 28] No space left: '/home/alice/.cache/huggingface/hub/blobs/abc'")
    assert redact_paths(str(error)) == "[Errno 28] No space left: '…/abc'"
    kept = "'Qwen/Qwen3-TTS-12Hz-0.6B-Base' failed, see https://huggingface.co/docs"
    assert redact_paths(kept) == kept  # repo ids and URLs are not paths
    slot = EngineSlot("x")

    def broken(report):  # noqa: ANN001, ANN202
        raise error

    slot.load(broken).join(HANG_S)
    assert "alice" not in slot.progress.error and "…/abc" in slot.progress.error


def test_status_names_the_offline_voice_while_it_starts_after_a_failed_load(monkeypatch):
    """Regression: after "falling back to the offline eSpeak voice", the status said "loading
    the model into memory" for the lost model while eSpeak warmed up."""
    import tts_core.backends as backends
    from tts_core.ui.formatting import status_html

    slot = EngineSlot("Qwen/Qwen3-TTS-12Hz-0.6B-Base")
    seen = []

    def espeak_starting():  # noqa: ANN202 - what the status says while eSpeak warms up
        seen.append((slot.progress.as_json(), status_html(slot.info())))
        return "espeak backend"

    def no_network(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        slot.report(LOADING)
        raise OSError("no network")

    monkeypatch.setattr(backends, "_neural", no_network)
    monkeypatch.setattr(backends, "_espeak", espeak_starting)
    backend, notice = load_backend(slot.progress.model, report=slot.report)
    assert backend == "espeak backend" and notice is not None
    ((status, line),) = seen
    assert status["status"] == "falling_back"
    assert "starting the offline eSpeak voice" in status["message"]
    assert "loading the model into memory" not in line and "offline eSpeak voice" in line


EXITS_DURING_A_LOAD = """
import threading, torch
from tts_core.engine import EngineSlot
from tts_core.engine.loading import LOADING

inside = threading.Event()

def build(report):  # a load of many torch steps, each ~0.1-1 s on 2 cores, reported between
    weights = torch.randn(1500, 1500)
    for step in range(10_000):
        report(LOADING, done=step)
        inside.set()
        weights = torch.tanh(weights @ weights)
    print("loaded", flush=True)

EngineSlot("some/model").load(build)
inside.wait()
print("exiting", flush=True)
"""


def test_a_script_that_exits_while_the_model_loads_exits_cleanly():
    """Regression: the background load, a daemon thread, was cut off at interpreter exit inside
    a torch op, which aborts the process ("terminate called without an active exception", -6:
    Ctrl+C during a load, a script that ended early). Now the load stops at its next step and
    is joined at exit: status 0, and the load did not run to its end."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", EXITS_DURING_A_LOAD],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only: the exit waits for one matrix product
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["exiting"], done.stdout
