"""Remake assets/screenshot.png, the README's picture of the page after one generation.

    .venv/bin/python tools/screenshot.py [--out assets/screenshot.png] [--chromium /usr/bin/chromium]

Starts `app.py --model espeak` (the offline voice: the same picture on any machine) on a free
localhost port with its own temporary voice store and Gradio cache, opens the page in headless
Chromium at 1280 x 800 (Debian's /usr/bin/chromium, as the browser tests), clicks Generate,
waits until the stats panel says the run is done, and saves the whole page (1280 wide, as tall
as the page). Everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1280, "height": 800}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
]
START_TIMEOUT_S = 180  # the app's start on a busy 2-core machine
RUN_TIMEOUT_MS = 120_000  # one eSpeak generation, page load included


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(workdir: Path) -> tuple[subprocess.Popen, str]:
    """`app.py --model espeak --wait-for-model` on a free port; (process, url) once it answers."""
    import httpx

    port = free_port()
    env = {
        **os.environ,
        "GRADIO_TEMP_DIR": str(workdir / "gradio"),
        "TTS_VOICES_DIR": str(workdir / "voices"),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    log = (workdir / "app.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "app.py"),
            "--model",
            "espeak",
            "--wait-for-model",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"app.py exited:\n{(workdir / 'app.log').read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/gradio_api/info", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"app.py did not answer within {START_TIMEOUT_S} s")


def capture(url: str, out: Path, chromium: str, profile: Path) -> None:
    """Load the page, Generate, wait for the stats panel's "Done", save the full page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=VIEWPORT,
        )
        context.set_default_timeout(RUN_TIMEOUT_MS)
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url)
            page.wait_for_function("() => window.__ttsLowLatency && window.__ttsStats")
            page.click("#generate")
            page.wait_for_function(
                "() => document.querySelector(\"#live-stats [data-s='state']\")"
                "?.textContent === 'Done'"
            )
            page.mouse.move(0, 0)  # no hover highlight in the picture
            page.wait_for_timeout(500)  # the plot's last redraw after "Done"
            page.screenshot(path=str(out), full_page=True)
        finally:
            context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshot.png")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tts-screenshot-") as tmp:
        workdir = Path(tmp)
        process, url = start_app(workdir)
        try:
            capture(url, args.out, args.chromium, workdir / "profile")
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
