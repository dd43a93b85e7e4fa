"""Gradio's cache stays bounded (tts_core/server/disk_guard.py): files expire by age, the oldest
go first past the byte cap, each client's uploads are rate-limited, on a real launched page too.

Time is a clock the tests move (file ages against `clock`, upload windows against `monotonic`);
nothing here sleeps to let time pass."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import threading
import time
from pathlib import Path

import gradio as gr
import httpx
import pytest
from conftest import ASSETS, HANG_S, free_port
from fastapi import FastAPI
from gradio_client import Client
from starlette.testclient import TestClient

from tts_core.server import VoiceRegistry
from tts_core.server.disk_guard import (
    MB,
    CacheJanitor,
    CachePolicy,
    DiskGuard,
    SweepReport,
    UploadGuard,
    UploadLimiter,
    disk_guard_middleware,
)
from tts_core.ui import build_demo

NOW = 1_000_000.0  # the tests' wall clock for file ages
AGE = 600.0  # max_age_s in the unit tests


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def put(root: Path, name: str, size: int, mtime: float, folder: str | None = None) -> Path:
    """A file where Gradio puts one: <root>/<sha256 hex>/<name>, last modified at `mtime`."""
    folder = folder if folder is not None else hashlib.sha256(name.encode()).hexdigest()
    path = root / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    os.utime(path, (mtime, mtime))
    return path


def on_disk(root: Path) -> int:
    """Bytes of every regular file under root (links not followed): what the disk holds."""
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def janitor(root: Path, clock: Clock | None = None, **policy: float) -> CacheJanitor:
    settings = {"max_bytes": 10 * MB, "max_age_s": AGE, **policy}
    return CacheJanitor(root, CachePolicy(**settings), clock=clock or Clock())


# --- sweep -------------------------------------------------------------------------------------


def test_sweep_deletes_files_older_than_max_age_and_their_emptied_folders(tmp_path):
    old = put(tmp_path, "old.wav", 10, NOW - AGE - 1)
    fresh = put(tmp_path, "fresh.wav", 10, NOW - AGE + 1)
    shared = "ab" * 32
    old_sibling = put(tmp_path, "a.wav", 10, NOW - AGE - 1, folder=shared)
    young_sibling = put(tmp_path, "b.wav", 10, NOW, folder=shared)

    report = janitor(tmp_path).sweep()

    assert set(report.removed) == {old, old_sibling}
    assert not old.exists() and not old.parent.exists()  # its folder emptied: removed
    assert fresh.exists() and young_sibling.exists()  # a folder with a file left stays
    assert (report.freed_bytes, report.kept_files, report.kept_bytes) == (20, 2, 20)
    assert tmp_path.is_dir()  # the root itself is never removed, even when emptied
    janitor(tmp_path, Clock(NOW + 10 * AGE)).sweep()
    assert list(tmp_path.iterdir()) == []


def test_sweep_past_the_byte_cap_deletes_the_oldest_first(tmp_path):
    files = [put(tmp_path, f"f{i}.wav", 100, NOW - 50 + 10 * i) for i in range(5)]  # f4 newest

    report = janitor(tmp_path, max_bytes=250).sweep()

    assert [p.exists() for p in files] == [False, False, False, True, True]
    assert report.removed == tuple(files[:3])  # oldest first
    assert report.kept_bytes == on_disk(tmp_path) == 200


def test_sweep_touches_only_what_gradio_writes(tmp_path):
    """A GRADIO_TEMP_DIR shared with other programs: their files are neither deleted nor
    counted; an unfinished upload's temporary file (Gradio's `tmp...`) is."""
    old = NOW - 10 * AGE
    foreign = [
        tmp_path / "notes.txt",
        tmp_path / "other-app" / "data.bin",
        tmp_path / "vibe_edit_history" / "x.json",
        tmp_path / "abc" / "short-hash.wav",
    ]
    for path in foreign:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * 1000)
        os.utime(path, (old, old))
    leftover = tmp_path / "tmpk2x_8abc"  # NamedTemporaryFile of a client that left mid-upload
    leftover.write_bytes(b"\0" * 1000)
    os.utime(leftover, (old, old))

    report = janitor(tmp_path, max_bytes=1).sweep()

    assert report.removed == (leftover,)
    assert all(path.exists() for path in foreign)
    assert report.kept_bytes == 0


def test_sweep_never_follows_symlinks_out_of_the_root(tmp_path):
    root, outside = tmp_path / "cache", tmp_path / "outside"
    target = put(outside, "precious.wav", 1000, NOW - 10 * AGE, folder="cd" * 32)
    root.mkdir()
    (root / ("ef" * 32)).symlink_to(target.parent, target_is_directory=True)  # a linked folder
    linked_file = root / ("12" * 32) / "link.wav"
    linked_file.parent.mkdir()
    linked_file.symlink_to(target)  # and a linked file

    report = janitor(root, max_bytes=1).sweep()

    assert target.exists() and target.stat().st_size == 1000
    assert report.removed == () and report.kept_bytes == 0  # links are not counted either
    assert linked_file.is_symlink()


def test_sweep_tolerates_files_and_folders_vanishing_meanwhile(tmp_path, monkeypatch):
    """Another sweep or Gradio deletes what this sweep listed, and a new file arrives in a
    folder this sweep empties: no error, and the new file (and its folder) stay."""
    gone_first = put(tmp_path, "raced.wav", 10, NOW - 10 * AGE)
    folder_gone = put(tmp_path, "folder.wav", 10, NOW - 10 * AGE)
    refilled = put(tmp_path, "refilled.wav", 10, NOW - 10 * AGE)
    listed_then_gone = put(tmp_path, "listed.wav", 10, NOW - 10 * AGE)
    newcomer = refilled.parent / "newcomer.wav"
    real_unlink = os.unlink

    def racing_unlink(path, *args, **kwargs):  # noqa: ANN001, ANN202
        path = Path(path)
        if path == gone_first:
            real_unlink(path)  # someone else was faster: ours raises FileNotFoundError
        elif path == folder_gone:
            real_unlink(path)  # the whole folder went
            os.rmdir(path.parent)
        elif path == refilled:
            newcomer.write_bytes(b"new")  # Gradio writes the same content again meanwhile
        return real_unlink(path, *args, **kwargs)

    def owned(relative) -> bool:  # noqa: ANN001 - called while listing: the file goes after
        if relative.name == listed_then_gone.name:
            listed_then_gone.unlink(missing_ok=True)
        return True

    monkeypatch.setattr(os, "unlink", racing_unlink)
    sweeper = janitor(tmp_path)
    sweeper.owned = owned
    report = sweeper.sweep()
    monkeypatch.undo()

    assert set(report.removed) == {gone_first, folder_gone, refilled}
    assert not gone_first.exists() and not folder_gone.parent.exists()
    assert newcomer.read_bytes() == b"new"  # its folder was not removed under it
    assert not listed_then_gone.exists()


def test_pinned_files_are_never_deleted_nor_counted(tmp_path):
    example = put(tmp_path, "example.wav", 500, NOW - 10 * AGE)
    upload = put(tmp_path, "upload.wav", 100, NOW)
    sweeper = CacheJanitor(
        tmp_path, CachePolicy(max_bytes=150, max_age_s=AGE), clock=Clock(), pinned=[str(example)]
    )

    report = sweeper.sweep()

    assert example.exists() and upload.exists()
    assert report.kept_bytes == 100


def test_start_sweeps_at_once_then_periodically_until_stopped(tmp_path):
    stale = put(tmp_path, "stale.wav", 10, NOW - 10 * AGE)
    reports, third = [], threading.Event()

    def on_sweep(report) -> None:  # noqa: ANN001
        reports.append(report)
        if len(reports) >= 3:
            third.set()

    sweeper = CacheJanitor(
        tmp_path, CachePolicy(max_age_s=AGE, sweep_every_s=0.01), clock=Clock(), on_sweep=on_sweep
    )
    sweeper.start()
    try:
        assert not stale.exists() and reports  # before start() returned
        later = put(tmp_path, "later.wav", 10, NOW - 10 * AGE)
        assert third.wait(HANG_S), "the periodic sweep did not run"
        assert not later.exists()
        assert sweeper.running
        sweeper.start()  # a second start while running: still one thread
        assert sum(t.name == "cache-janitor" for t in threading.enumerate()) == 1
    finally:
        sweeper.stop()
    assert not sweeper.running
    assert all(t.name != "cache-janitor" for t in threading.enumerate())


# --- upload limits: the middleware on a stand-in for Gradio's app ------------------------------


class FakeGradio:
    """Pure ASGI app: POST .../gradio_api/upload writes an `upload_bytes` file into the cache
    (mtime from `clock`, one second per upload) and answers its path; anything else: 200."""

    def __init__(self, root: Path, clock: Clock, upload_bytes: int = 100) -> None:
        self.root, self.clock, self.upload_bytes = root, clock, upload_bytes
        self.count = itertools.count()
        self.uploads: list[Path] = []

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        while (await receive()).get("more_body"):
            pass
        body = b"ok"
        if scope["path"].endswith("/gradio_api/upload") and scope["method"] == "POST":
            self.clock.now += 1
            path = put(
                self.root, f"upload{next(self.count)}.wav", self.upload_bytes, self.clock.now
            )
            self.uploads.append(path)
            body = json.dumps([str(path)]).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def guarded(tmp_path: Path, **policy: float) -> tuple[DiskGuard, FakeGradio, Clock, Clock]:
    wall, mono = Clock(), Clock(0.0)
    guard = DiskGuard(tmp_path, CachePolicy(**policy), clock=wall, monotonic=mono)
    return guard, FakeGradio(tmp_path, wall), wall, mono


def client(guard: DiskGuard, app: FakeGradio, host: str) -> TestClient:
    return TestClient(UploadGuard(app, guard), client=(host, 50000))


def upload(http: TestClient, path: str = "/gradio_api/upload") -> httpx.Response:
    return http.post(path, files={"files": ("clip.wav", b"RIFF....", "audio/wav")})


def test_a_client_past_its_uploads_gets_429_and_another_client_is_unaffected(tmp_path):
    guard, app, _, mono = guarded(tmp_path, uploads_per_window=3, window_s=600)
    alice, bob = client(guard, app, "10.0.0.1"), client(guard, app, "10.0.0.2")

    assert [upload(alice).status_code for _ in range(3)] == [200, 200, 200]
    refused = upload(alice)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "600"
    assert "at most 3 every 10 minutes" in refused.json()["detail"]
    assert len(app.uploads) == 3  # the refused upload never reached Gradio

    assert upload(bob).status_code == 200

    mono.now = 599.5  # the window slides: Alice's first upload counts until t = 600
    assert upload(alice).headers["retry-after"] == "1"
    mono.now = 600.0  # all three made at t = 0 have left the window
    assert [upload(alice).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_the_window_slides_per_upload(tmp_path):
    guard, app, _, mono = guarded(tmp_path, uploads_per_window=3, window_s=600)
    alice = client(guard, app, "10.0.0.1")
    for t in (0, 100, 200):
        mono.now = t
        assert upload(alice).status_code == 200
    mono.now = 650  # the upload at 0 left the window, those at 100 and 200 did not
    assert upload(alice).status_code == 200
    mono.now = 660
    refused = upload(alice)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "40"  # 100+600-660


def test_only_posts_to_the_upload_route_count_also_under_a_mount_prefix(tmp_path):
    guard, app, _, _ = guarded(tmp_path, uploads_per_window=1)
    http = client(guard, app, "10.0.0.1")
    for _ in range(5):  # other routes and methods are never limited
        assert http.post("/gradio_api/queue/join", json={}).status_code == 200
        assert http.get("/gradio_api/upload").status_code == 200
        assert http.post("/gradio_api/upload_progress").status_code == 200
    assert upload(http, "/demo/gradio_api/upload").status_code == 200  # mounted at /demo
    assert upload(http, "/gradio_api/upload/").status_code == 429  # the same client's count


def test_each_answered_upload_leaves_the_cache_within_the_byte_cap(tmp_path):
    guard, app, _, _ = guarded(tmp_path, max_bytes=250, uploads_per_window=100)
    http = client(guard, app, "10.0.0.1")
    for _ in range(6):
        answer = upload(http)
        assert answer.status_code == 200
        assert on_disk(tmp_path) <= 250  # already when the client has its answer
        assert Path(answer.json()[0]).exists()  # the newest file is kept
    assert [p.exists() for p in app.uploads] == [False] * 4 + [True] * 2


def test_the_lifespan_starts_and_stops_the_janitor(tmp_path):
    stale = put(tmp_path, "stale.wav", 10, NOW - 10 * AGE)
    guard, app, _, _ = guarded(tmp_path, max_age_s=AGE)
    with client(guard, app, "10.0.0.1"):  # runs the lifespan's startup, then its shutdown
        assert guard.janitor.running
        assert not stale.exists()
    assert not guard.janitor.running


def test_responses_pass_through_unbuffered(tmp_path):
    """Each message of a streamed response reaches the client before the app sends the next
    (a BaseHTTPMiddleware-style wrapper would hold them)."""
    guard, _, _, _ = guarded(tmp_path)
    seen: list[bytes] = []

    async def streaming(scope, receive, send) -> None:  # noqa: ANN001
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": b"%d" % i, "more_body": True})
            assert seen[-1] == b"%d" % i  # already delivered
        await send({"type": "http.response.body", "body": b""})

    async def send(message) -> None:  # noqa: ANN001
        if message["type"] == "http.response.body":
            seen.append(message["body"])

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    for path in ("/tts_stream/pcm", "/gradio_api/upload"):
        seen.clear()
        scope = {"type": "http", "method": "POST", "path": path, "client": ("10.0.0.1", 1)}
        asyncio.run(UploadGuard(streaming, guard)(scope, receive, send))
        assert seen == [b"0", b"1", b"2", b""]


def test_the_limiter_forgets_idle_clients_and_remembers_a_bounded_number():
    mono = Clock(0.0)
    limiter = UploadLimiter(limit=2, window_s=600, max_clients=100, clock=mono)
    for i in range(1000):
        assert limiter.admit(f"10.0.{i // 256}.{i % 256}") is None
    assert len(limiter) == 100  # the least recently active were dropped
    mono.now = 601  # every one of them idle for a whole window
    assert limiter.admit("10.9.9.9") is None
    assert len(limiter) == 1


# --- a real launched page ----------------------------------------------------------------------


def launch(demo) -> str:  # noqa: ANN001
    _, url, _ = demo.launch(
        server_name="127.0.0.1", server_port=free_port(), quiet=True, prevent_thread_lock=True
    )
    return url.rstrip("/")


def test_a_launched_page_keeps_uploads_under_the_cap_and_limits_each_client(
    engine, tmp_path, monkeypatch
):
    root = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(root))
    demo = build_demo(engine, VoiceRegistry(tmp_path / "voices"))
    demo.tts_cache_policy = CachePolicy(max_bytes=8 * MB, uploads_per_window=4)
    url = launch(demo)
    try:
        paths = []
        for i in range(4):  # 12 MB sent, 8 MB allowed
            clip = os.urandom(3 * MB)  # distinct content: a folder each
            answer = httpx.post(
                f"{url}/gradio_api/upload",
                timeout=60,
                files={"files": (f"clip{i}.wav", clip, "audio/wav")},
            )
            assert answer.status_code == 200, answer.text[:300]
            paths.append(Path(answer.json()[0]))
            assert paths[-1].is_file() and paths[-1].is_relative_to(root)
            assert on_disk(root) <= 8 * MB
        assert [p.exists() for p in paths] == [False, False, True, True]
        refused = httpx.post(
            f"{url}/gradio_api/upload",
            timeout=60,
            files={"files": ("clip.wav", b"RIFF", "audio/wav")},
        )
        assert refused.status_code == 429, refused.text[:300]
        assert 0 < int(refused.headers["retry-after"]) <= 600
    finally:
        demo.close()
    assert not demo.tts_disk_guard.janitor.running


def test_a_launched_page_expires_api_results_and_keeps_its_example_clips(
    engine, tmp_path, monkeypatch
):
    root = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(root))
    demo = build_demo(engine, VoiceRegistry(tmp_path / "voices"), assets=ASSETS)
    with demo:  # a clip of the page's own (its examples name built-in voices since issue 36)
        gr.Audio(str(ASSETS / "voices" / "alloy.wav"), visible=False)
    demo.queue()
    examples = [p for p in root.rglob("*.wav")]  # copied into the cache while it was built
    assert examples
    stale = put(root, "left-by-an-earlier-run.wav", 1000, time.time() - 3600)
    url = launch(demo)
    try:
        assert not stale.exists()  # the sweep at start
        guard = demo.tts_disk_guard
        assert guard.janitor.running
        client = Client(url, verbose=False, download_files=False)
        result, stats = client.predict("Hello.", "english", None, "", api_name="/synthesize_full")
        assert stats["done"]
        wav = Path(result["path"])
        assert wav.is_file() and wav.is_relative_to(root)
        # only this test's sweeps from here on: a periodic one running once time has passed
        # could take the file first (seen on a loaded machine), leaving the report empty
        guard.janitor.stop()
        reports = SweepCounter(guard.janitor)
        uploaded = httpx.post(
            f"{url}/gradio_api/upload",
            timeout=60,
            files={"files": ("clip.wav", b"RIFF", "audio/wav")},
        ).json()[0]
        assert uploaded in demo.upload_file_set  # Gradio's record of created files
        # the upload's second sweep runs after its response: seen in CI to land after the
        # clock change below and take the files first; wait for both of its sweeps
        reports.wait_for(2)

        assert wav not in guard.janitor.sweep().removed  # fresh: kept
        guard.janitor.clock = lambda: time.time() + guard.policy.max_age_s + 1  # time passes
        report = guard.janitor.sweep()

        assert wav in report.removed and not wav.exists() and not wav.parent.exists()
        assert not Path(uploaded).exists()
        assert uploaded not in demo.upload_file_set  # forgotten too: that set stays bounded
        assert all(p.exists() for p in examples)  # the page keeps handing these out
        served = httpx.get(f"{url}/gradio_api/file={examples[0]}", timeout=30)
        assert served.status_code == 200 and served.content == examples[0].read_bytes()
    finally:
        demo.close()
    assert not demo.tts_disk_guard.janitor.running


def test_disk_guard_middleware_serves_a_mounted_page(engine, tmp_path, monkeypatch):
    """The same guard on our own FastAPI app with the page mounted (the production path)."""
    root = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(root))
    demo = build_demo(engine, VoiceRegistry(tmp_path / "voices"))
    policy = CachePolicy(uploads_per_window=2)
    app = FastAPI(middleware=[disk_guard_middleware(demo, policy)])
    app = gr.mount_gradio_app(app, demo, path="/demo")
    with TestClient(app, client=("10.0.0.7", 1)) as http:
        codes = [upload(http, "/demo/gradio_api/upload").status_code for _ in range(3)]
    assert codes == [200, 200, 429]


class SweepCounter:
    """Counts a janitor's finished sweeps (its on_sweep is called after each one's deletions)."""

    def __init__(self, janitor: CacheJanitor) -> None:
        self.count, self._done = 0, threading.Condition()
        self._inner = janitor.on_sweep
        janitor.on_sweep = self._seen

    def _seen(self, report: SweepReport) -> None:
        if self._inner is not None:
            self._inner(report)
        with self._done:
            self.count += 1
            self._done.notify_all()

    def wait_for(self, count: int) -> None:
        with self._done:  # the timeout only guards against a hang: the event decides
            assert self._done.wait_for(lambda: self.count >= count, timeout=HANG_S), self.count


@pytest.fixture(autouse=True)
def _no_janitor_left_running():
    yield
    running = [t for t in threading.enumerate() if t.name == "cache-janitor"]
    assert not running, "a test left a janitor thread running"
