"""Aggregate audio/s of `app.py ARGS`: `python -m tts_core.scale.bench [app.py args]`.

Starts the app on a free port, times until GET /v1/models says ready (start-up), warms it
with one request, then sends `--clients` (8) seeded /v1 requests at once cloning the fixture
clip, and prints one JSON line: start-up s, audio s, wall s, audio s per wall s, replicas.
Compare shapes on the same machine in a row (`--replicas 1`, `--replicas 2`, none); replicas
start with this process's torch thread count (tts_core/scale/replica.py), so OMP_NUM_THREADS
sets both shapes alike.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "tests" / "fixtures" / "ref_clip_24k.wav"
CLIENTS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, app: subprocess.Popen) -> dict:
    """The served model's info once /v1/models says ready; SystemExit if the app died."""
    while True:
        try:
            model = httpx.get(f"{url}/v1/models", timeout=5).json()["data"][-1]
            if model["status"]["status"] == "ready":
                return model["info"]
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        if app.poll() is not None:
            raise SystemExit(f"app.py exited with {app.returncode}")
        time.sleep(0.5)


def speak(url: str, index: int) -> float:
    """Seconds of audio of one seeded, whole (not streamed) request."""
    clip = "data:audio/wav;base64," + base64.b64encode(CLIP.read_bytes()).decode()
    body = {
        "input": f"Request number {index} for the replicas.",
        "ref_audio": clip,
        "seed": 100 + index,
        "response_format": "pcm",
        "stream": False,
    }
    answer = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=600)
    answer.raise_for_status()
    rate = int(answer.headers["x-sample-rate"])
    return len(answer.content) / 2 / rate  # 16-bit mono


def main(args: list[str]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="tts-bench-") as tmp:
        env = {
            **os.environ,
            "GRADIO_ANALYTICS_ENABLED": "False",
            "TTS_VOICES_DIR": tmp,
            "GRADIO_TEMP_DIR": f"{tmp}/gradio",
        }
        started = time.monotonic()
        app = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), *args], cwd=ROOT, env=env
        )
        try:
            info = wait_ready(url, app)
            startup = time.monotonic() - started
            speak(url, CLIENTS)  # warm: first-request costs stay out of the timing
            began = time.monotonic()
            with ThreadPoolExecutor(CLIENTS) as pool:
                audio = sum(pool.map(lambda i: speak(url, i), range(CLIENTS)))
            wall = time.monotonic() - began
        finally:
            app.terminate()
            app.wait(60)
    print(
        json.dumps(
            {
                "args": args,
                "startup_s": round(startup, 1),
                "audio_s": round(audio, 2),
                "wall_s": round(wall, 2),
                "audio_per_s": round(audio / wall, 2),
                "replicas": info.get("replicas"),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
