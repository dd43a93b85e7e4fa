"""Shared fixtures: the eSpeak engine, reference clips written in any format, a live app server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
SERVER_START_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def espeak_backend():
    from tts_core.backends.espeak import EspeakBackend

    backend = EspeakBackend()
    backend.warm_up()
    return backend


@pytest.fixture()
def engine(espeak_backend):
    from tts_core.engine import Engine

    return Engine(espeak_backend)


def speech_like(seconds: float, rate: int, f0: float = 140.0, amplitude: float = 0.5) -> np.ndarray:
    """A voiced, syllable-modulated harmonic signal: enough like speech for pitch/rate analysis."""
    t = np.arange(int(seconds * rate)) / rate
    harmonics = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    syllables = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))  # 4 syllables per second
    signal = harmonics * syllables
    return (amplitude * signal / np.max(np.abs(signal))).astype(np.float32)


@pytest.fixture(name="speech_like")
def speech_like_fixture():
    return speech_like


@pytest.fixture()
def write_clip(tmp_path):
    """write_clip(name, audio (N,) or (N, C), rate, subtype) -> path of a real audio file."""

    def write(name: str, audio: np.ndarray, rate: int = 24_000, subtype: str = "PCM_16") -> str:
        path = tmp_path / name
        sf.write(path, audio, rate, subtype=subtype)
        return str(path)

    return write


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_server(url: str, process: subprocess.Popen, log_path: Path) -> None:
    import httpx

    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"app exited early:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/gradio_api/info", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"app did not start in {SERVER_START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}"
    )


def start_app(
    tmp_dir: Path, *extra: str, wait_for_model: bool = True, **popen: Any
) -> tuple[str, subprocess.Popen, Path]:
    """app.py on a free port, answering once the page is up (and, with `wait_for_model`, the
    model loaded: `--wait-for-model`, so a test's first request never meets the loading 503)."""
    port = free_port()
    log_path = tmp_dir / f"app-{port}.log"
    env = {
        **os.environ,
        "GRADIO_TEMP_DIR": str(tmp_dir / "gradio"),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "TTS_VOICES_DIR": str(tmp_dir / "voices"),  # never the user's own voice store
    }
    cmd = [sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(port), *extra]
    cmd += ["--wait-for-model"] if wait_for_model else []
    log = open(log_path, "w")  # noqa: SIM115 - closed when the process ends
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                               **popen)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(url, process, log_path)
    except Exception:
        process.kill()
        raise
    return url, process, log_path


def stop_app(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(name="free_port")
def free_port_fixture() -> int:
    return free_port()


@pytest.fixture(scope="session")
def launch_app(tmp_path_factory):
    """launch_app(*app args) -> (url, log path): `python app.py ...` on a free localhost port,
    stopped at the end of the session."""
    processes = []

    def launch(*extra: str, wait_for_model: bool = True) -> tuple[str, Path]:
        url, process, log_path = start_app(tmp_path_factory.mktemp("app"), *extra,
                                           wait_for_model=wait_for_model)  # fmt: skip
        processes.append(process)
        return url, log_path

    yield launch
    for process in processes:
        stop_app(process)


@pytest.fixture(scope="session")
def app_server(launch_app):
    """The real app (`python app.py --model espeak`): (url, log path)."""
    return launch_app("--model", "espeak", "--max-file-size", "2mb")
