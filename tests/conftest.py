"""Shared fixtures: the eSpeak engine, reference clips written in any format, a live app server."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
# numba's on-disk cache (librosa's cache=True functions, compiled on first use) is not safe for
# processes compiling into one directory at once: two pytest workers filling librosa's
# __pycache__ crashed one inside librosa.util.peak_pick (CI; reproduced here: 6 of 36 cold
# starts of three processes sharing a cache segfaulted, 0 of 36 with a directory each). So each
# test process gets its own, set before anything imports numba (its config reads it once).
NUMBA_CACHE = tempfile.mkdtemp(prefix="tts-core-numba-")
os.environ["NUMBA_CACHE_DIR"] = NUMBA_CACHE
atexit.register(shutil.rmtree, NUMBA_CACHE, ignore_errors=True)
ASSETS = ROOT / "assets"
SERVER_START_TIMEOUT_S = 120
# Every browser test drives one browser: Debian's chromium, /usr/bin/chromium (`make test`
# installs it as root: the Makefile's `browser` target), or the one $CHROMIUM_PATH names on a
# machine without it; never a browser Playwright downloaded (`playwright install`): every
# launch goes through `chromium_context`, which names this executable. Debian's build decodes
# AAC with the system FFmpeg, which the HLS player's test needs.
DEBIAN_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_PATH = os.environ.get("CHROMIUM_PATH", DEBIAN_CHROMIUM)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


def chromium_executable() -> str | None:
    """CHROMIUM_PATH if it is there (no search elsewhere: one browser for every test)."""
    return CHROMIUM_PATH if Path(CHROMIUM_PATH).is_file() else None


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if chromium_executable() is None:
        return f"Chromium not found at {CHROMIUM_PATH} (`make test` installs Debian's as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    return None


def require_browser() -> str:
    """The chromium executable; skips without it (or Playwright), or fails under
    REQUIRE_BROWSER=1 (CI)."""
    missing = browser_missing()
    if missing:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    return CHROMIUM_PATH


@contextmanager
def chromium_context(profile: Path, viewport: dict[str, int] | None = None) -> Iterator[Any]:
    """A Playwright BrowserContext of CHROMIUM_PATH (headless, a fresh profile in `profile`,
    so its pages share localStorage), waits bounded by BROWSER_HANG_MS (its start by
    BROWSER_START_HANG_MS). The one place any
    test starts a browser."""
    executable = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=viewport or {"width": 1280, "height": 1000},
            timeout=BROWSER_START_HANG_MS,  # not Playwright's 30 s default, a speed bound
        )
        context.set_default_timeout(BROWSER_HANG_MS)
        context.add_init_script(TOAST_RECORDER)  # every page records its toasts
        try:
            yield context
        finally:
            context.close()


def pytest_report_header(config) -> str:  # noqa: ANN001 - pytest's hook
    """Say which browser the browser tests drive."""
    if chromium_executable() is None:
        return f"browser tests: no chromium at {CHROMIUM_PATH}"
    try:
        version = subprocess.run(
            [CHROMIUM_PATH, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"version unknown: {exc}"
    return f"browser tests: {CHROMIUM_PATH} ({version})"


def one_torch_thread() -> Iterator[None]:
    """A session fixture's body for the tiny-model folders (tests/qwen3, voxcpm2, chatterbox):
    one intra-op thread while they run. Tiny models are per-op overhead; with other processes
    on a 2-core box, 2 threads spin-wait on each other (a 39-frame generate: 30 s vs 2 s). No
    bound assumes a thread count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# Playwright waits are hang detectors: a page on a loaded 2-core box (other work, the server
# and Chromium sharing the cores) may take minutes to render; a broken one never does. 120 s
# was exceeded by six waits (a page's load, its first selector) in a busy run at load 55-88
# (two `yes` and a second pytest beside the suite's servers and browsers), so 300 s: the
# guard only costs time when a page is broken.
BROWSER_HANG_MS = 300_000
# Starting a browser (a dozen processes, seconds of CPU) took over 120 s at load 28 too
BROWSER_START_HANG_MS = 300_000
# Every toast text a page showed (gr.Error and the like), recorded the moment it appears: a
# toast closes itself after its duration (10 s of the page's time), and a test process
# starved for longer than that (a loaded machine) may look for it only once it is gone
TOAST_RECORDER = """
window.__toasts = [];
new MutationObserver(() => {
  for (const node of document.querySelectorAll("[data-testid='toast-body']")) {
    const text = node.textContent.trim();
    if (text && !window.__toasts.includes(text)) window.__toasts.push(text);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def wait_for_toast(page, text: str) -> None:  # noqa: ANN001 - a Playwright Page
    """Until the page has shown a toast with `text` (TOAST_RECORDER), gone since or not."""
    page.wait_for_function(
        "(text) => window.__toasts.some((t) => t.includes(text))", arg=text, timeout=BROWSER_HANG_MS
    )


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


# Tests of Stop / cancel / disconnect: how soon a request ends after its cancel depends on the
# machine, what it did after the cancel does not. None of these constants is a speed claim.
HELD_AFTER_S = 1.0  # audio a held request gives at full speed: the default cadence's first two
# chunks (2 + 6 frames of 80 ms) and more
TRICKLE_S = 0.15  # then one piece (~74 ms of eSpeak audio) per TRICKLE_S until its cancel: the
# rest of a long text (600+ pieces) would take longer than HANG_S
HANG_S = 60.0  # how long a test waits for what a broken path never does


class HeldRun:
    """One request of a HeldBackend: `holding` once it trickles, `cancelled` once its cancel
    came while it trickled, `after_cancel` = pieces it was asked for once the cancel was set,
    `ended` once its stream was closed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.holding = threading.Event()
        self.cancelled = threading.Event()
        self.after_cancel = 0
        self.ended = threading.Event()


class StalledBackend:
    """A backend (the real eSpeak one, in the tests) whose streams make nothing until
    `release` is set or their cancel comes: a synthesis stuck in the model."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self._inner = inner
        self.started, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        self.started.set()
        while not (self.release.is_set() or cancel.is_set()):
            self.release.wait(0.01)
        yield from ()


class HeldBackend:
    """A backend (the real eSpeak one, in the tests) whose requests for `held` texts slow down
    after HELD_AFTER_S of audio to one piece per TRICKLE_S, until their cancel comes.

    Such a request does not end by itself while a test waits (HANG_S), so the test counts what
    happened after the cancel instead of timing how soon the request ended: a busy machine
    cannot make it fail and a fast one cannot hide a broken path. The engine looks at the
    cancel after every piece, so a correct path asks for one piece at most after it (the one
    it was waiting for). The pieces keep coming (slowly) because Gradio stops a streaming job
    only when its handler yields. `release` (at the end of a test) lets every request go on at
    full speed."""

    def __init__(self, inner, held=lambda text: True) -> None:  # noqa: ANN001
        self._inner = inner
        self._held = held
        self._released = threading.Event()
        self.runs: list[HeldRun] = []

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)

    def release(self) -> None:
        self._released.set()

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        run = HeldRun(text)
        self.runs.append(run)
        full_speed = int(HELD_AFTER_S * getattr(self._inner, "sample_rate", 24_000))
        held, produced = self._held(text), 0
        pieces = self._inner.stream(text, voice, params, cancel)
        try:
            for piece in pieces:
                run.after_cancel += cancel.is_set()
                yield piece
                produced += piece.audio.size
                if held and produced >= full_speed and not self._released.is_set():
                    run.holding.set()
                    if cancel.wait(TRICKLE_S):
                        run.cancelled.set()
                        held = False
        finally:
            pieces.close()
            run.ended.set()

    def wait_holding(self, since: int = 0, timeout: float = HANG_S) -> HeldRun:
        """The first request from runs[since] on that trickles, once it does."""
        deadline = time.monotonic() + timeout
        while not (held := [run for run in self.runs[since:] if run.holding.is_set()]):
            assert time.monotonic() < deadline, "no request reached its hold point"
            time.sleep(0.01)
        return held[0]


class GatedBackend:
    """A backend (the real eSpeak one, in the tests) whose requests stop after their first
    `after_s` of audio (HELD_AFTER_S: the default cadence's first chunks) until `gate` is set
    or their cancel comes: "generation is behind" or "the response is still being made" when
    the test says so, however fast or slow the machine."""

    def __init__(self, inner, after_s: float = HELD_AFTER_S) -> None:  # noqa: ANN001
        self._inner = inner
        self._after = int(after_s * getattr(inner, "sample_rate", 24_000))
        self.gate = threading.Event()

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        produced, pieces = 0, self._inner.stream(text, voice, params, cancel)
        try:
            for piece in pieces:
                while produced >= self._after and not (self.gate.is_set() or cancel.is_set()):
                    self.gate.wait(0.01)
                yield piece
                produced += piece.audio.size
        finally:
            pieces.close()


@pytest.fixture()
def held_backend(espeak_backend):
    """HeldBackend over the real eSpeak backend, holding every request; released at the end."""
    backend = HeldBackend(espeak_backend)
    yield backend
    backend.release()


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
    process = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, **popen
    )
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


def page_controls_shown(url: str) -> dict[str, bool]:
    """The page's controls by label -> shown (visible itself and inside visible groups; the
    API-only endpoints' hidden inputs carry their knob's label too), from the served /config."""
    import httpx

    config = httpx.get(f"{url}/config", timeout=30).json()
    by_id = {c["id"]: c for c in config["components"]}
    parents: dict[int, int] = {}

    def walk(node: dict) -> None:
        for child in node.get("children", []):
            parents[child["id"]] = node["id"]
            walk(child)

    walk(config["layout"])

    def shown(node: int) -> bool:
        while node in by_id:
            if by_id[node]["props"].get("visible", True) is False:
                return False
            node = parents.get(node)
        return True

    found: dict[str, bool] = {}  # a label of several components: shown if one of them is
    for i, c in by_id.items():
        if label := c["props"].get("label"):
            found[label] = found.get(label, False) or shown(i)
    return found


@pytest.fixture(name="free_port")
def free_port_fixture() -> int:
    return free_port()


@pytest.fixture(scope="session")
def launch_app(tmp_path_factory):
    """launch_app(*app args) -> (url, log path): `python app.py ...` on a free localhost port,
    stopped at the end of the session."""
    processes = []

    def launch(*extra: str, wait_for_model: bool = True) -> tuple[str, Path]:
        url, process, log_path = start_app(
            tmp_path_factory.mktemp("app"), *extra, wait_for_model=wait_for_model
        )
        processes.append(process)
        return url, log_path

    yield launch
    for process in processes:
        stop_app(process)


@pytest.fixture(scope="session")
def app_server(launch_app):
    """The real app (`python app.py --model espeak`): (url, log path)."""
    return launch_app("--model", "espeak", "--max-file-size", "2mb")


# ---------------------------------------------------------------------------- the fast tier
# `make test-fast` (`pytest -m fast`): the inner loop's tier, under 2 minutes on 2 idle cores.
# A test is in it when its file is listed here, it is not marked slow, and its id does not start
# with an entry of NOT_FAST (the few long tests of a listed file). With `-m fast` alone, the
# files not listed are not even imported (their collection would cost ~12 s of the budget).
FAST_FILES = (
    # serving, engine, admission, validation: fakes and the eSpeak engine
    "test_serving_engine.py",
    "test_serving_loop.py",
    "test_serving_alone.py",
    "test_serving_submit.py",
    "test_engine.py",
    "test_admission.py",
    "test_validation.py",
    "test_cancel_and_sampling_guards.py",
    "test_joiner.py",
    "test_model_thread.py",
    "test_knobs.py",
    "test_layers_batch_invariance.py",
    # the server's and the page's checks of what they are sent
    "test_hardening_inputs.py",
    "test_server_hardening.py",
    "test_page_handlers.py",
    "test_page_fit.py",
    "test_voice_registry.py",
    "test_voice_quotas.py",
    "test_disk_guard.py",
    "test_voice_store_crash.py",
    "test_reference_limits.py",
    "test_openai_api.py",
    # audio utilities (not test_audio_analysis.py: librosa's numba compile, ~12 s of CPU a
    # process), the container's rules, the docs' paths and options
    "test_audio_formats.py",
    "test_native_rate.py",
    "test_builtin_voices.py",
    "test_espeak_lib.py",
    "test_container.py",
    "test_docs_paths.py",
    "test_readme_options.py",
    "test_one_registration.py",
    "test_fast_tier.py",
    # the tiny checkpoints' quick parity tests and the 8-bit layer
    "qwen3/test_end_to_end_parity.py",
    "qwen3/test_talker.py",
    "qwen3/test_prompt.py",
    "qwen3/test_sampling.py",
    "qwen3/test_codec_decoder.py",
    "qwen3/test_int8.py",
    "chatterbox/test_components.py",
    "chatterbox/test_generate.py",
    "voxcpm2/test_model_parity.py",
    "voxcpm2/test_vae_parity.py",
)
NOT_FAST = (
    "test_cancel_and_sampling_guards.py::test_model_stops_within_one_frame_of_should_stop",
    "test_container.py::test_the_kernels_prebuilt",  # compiles every kernel
    "test_server_hardening.py::test_pcm_route_is_admitted_through_the_engines_line",
    "test_one_registration.py::test_v1_lists_the_knob",
    "test_layers_batch_invariance.py::test_attention_rows_apart_gives_each_row_what_it_gets_alone[8]",
    "test_layers_batch_invariance.py::test_stack_rows_apart_gives_each_row_what_it_gets_alone[8]",
    "qwen3/test_codec_decoder.py::test_released_geometry",  # builds the released-size decoder
    "qwen3/test_int8.py::test_accuracy_on_the_tiny_checkpoints",  # whole-model int8 runs
    "qwen3/test_int8.py::test_quantized_model_speaks",
    "qwen3/test_int8.py::test_load_model_switch",
    "qwen3/test_int8.py::test_auto_keeps_the_float_model",
)
TESTS = Path(__file__).resolve().parent


def tier_name(path: Path) -> str:
    """A test file's name in FAST_FILES: its path under tests/ ("qwen3/test_int8.py")."""
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)


def in_fast_tier(path: Path) -> bool:
    return tier_name(path) in FAST_FILES


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:  # noqa: ANN001
    """With `-m fast`, a test file outside the tier is not imported."""
    fast_only = config.getoption("markexpr", "") == "fast"
    is_test_file = collection_path.suffix == ".py" and collection_path.name.startswith("test_")
    if fast_only and is_test_file and not in_fast_tier(collection_path):
        return True
    return None


def is_fast(item: pytest.Item) -> bool:
    node = f"{tier_name(item.path)}::{item.name}"
    listed = in_fast_tier(item.path) and not any(node.startswith(e) for e in NOT_FAST)
    return listed and item.get_closest_marker("slow") is None


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marks
def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    for item in items:
        if is_fast(item):
            item.add_marker(pytest.mark.fast)
