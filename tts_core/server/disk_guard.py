"""Bounded disk use for Gradio's cache: a byte cap, a file age limit and an upload rate per client.

Gradio 6 writes every upload and every result file into one folder, `cache_root(blocks)`, and its
own `delete_cache` bounds neither bytes nor how many files one client sends. Here:

* `CacheJanitor.sweep()` deletes files older than `max_age_s`, then the oldest until the rest
  fits in `max_bytes`; `start()` sweeps now, then every `sweep_every_s` on a daemon thread.
* `UploadGuard`, a pure ASGI middleware (streamed responses pass unbuffered), answers uploads
  past `uploads_per_window` per `window_s` from one client with 429 + Retry-After, counting
  files, not requests, and sweeps before the upload's answer ends, so the cap holds as soon as
  the client has it. The multipart body is counted as it streams: past `max_upload_bytes` or
  `max_files_per_upload` Gradio is told the client left and the client gets 413 or 429.

    app = FastAPI(middleware=[disk_guard_middleware(blocks, policy), ...])

The middleware starts the janitor on the ASGI lifespan's startup and stops it on shutdown;
pass no `delete_cache` to the Blocks. Only what Gradio writes is touched: files under a
content-hash folder of the root and upload leftovers (`tmp...`) directly in it, so a shared
GRADIO_TEMP_DIR's other files are neither counted nor deleted; the files the page put there
while it was built (example clips) are pinned.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, NamedTuple

import anyio
from starlette.middleware import Middleware

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MB = 1 << 20
# Gradio's upload route is `API_PREFIX + "/upload"` (gradio/route_utils.py, gradio/routes.py);
# matched at the end of the path so a mount prefix or root_path in front of it still counts
UPLOAD_ROUTE = re.compile(r"/gradio_api/upload/?$")
HASH_FOLDER = re.compile(r"[0-9a-f]{32,128}")  # Gradio's cache folders: sha256 hex digests
UPLOAD_LEFTOVER = re.compile(r"tmp[a-z0-9_]+")  # NamedTemporaryFile names of unfinished uploads
STOP_TIMEOUT_S = 5.0
NO_SPACE = "The server's disk is full; please try the upload again later."


@dataclass(frozen=True)
class CachePolicy:
    """Limits for Gradio's cache, sized for a public demo with 20 MB uploads (`--max-file-size`).

    * max_bytes 512 MB: ~25 uploads at the size limit or ~3 h of 24 kHz 16-bit results, a small
      share of a demo machine's disk (an HF Space has 50 GB); a flood evicts older files only.
    * max_age_s 15 min: a visit fits in it; voice clips are personal data and should not
      outlive it (saved voices live in the voice store, not here).
    * 20 uploads per client per 10 min: far above what a person does, while one address cannot
      churn the whole cache in a window (400 MB < 512 MB). Scripts should save a voice.
    * sweep_every_s 30 s: results can pass the cap by what the engine writes in 30 s between
      sweeps; a sweep only lists the folder.
    * max_clients 10 000: clients remembered at once (well under 1 MB); the least recent go.
    * max_files_per_upload 4: the page and gradio_client send one file per request.
    * max_upload_bytes 64 MB: one request's whole body, three files at the 20 MB
      `--max-file-size` (with none, this bounds a file too).
    """

    max_bytes: int = 512 * MB
    max_age_s: float = 15 * 60
    uploads_per_window: int = 20
    window_s: float = 10 * 60
    sweep_every_s: float = 30.0
    max_clients: int = 10_000
    max_files_per_upload: int = 4
    max_upload_bytes: int = 64 * MB

    def __post_init__(self) -> None:
        for name in (f.name for f in dataclasses.fields(self)):
            if not getattr(self, name) > 0:
                raise ValueError(f"CachePolicy.{name} must be > 0, got {getattr(self, name)!r}")


class CacheFile(NamedTuple):
    path: Path
    mtime: float
    size: int


@dataclass(frozen=True)
class SweepReport:
    removed: tuple[Path, ...]  # deleted by this sweep (or vanished while it ran)
    freed_bytes: int
    kept_files: int
    kept_bytes: int  # what the janitor counts after the sweep (<= max_bytes unless undeletable)


def gradio_owned(relative: PurePath) -> bool:
    """Whether a path relative to the cache root is one Gradio writes: inside a content-hash
    folder (uploads, results, copies) or an upload's temporary file directly in the root."""
    parts = relative.parts
    if len(parts) == 1:
        return UPLOAD_LEFTOVER.fullmatch(parts[0]) is not None
    return len(parts) > 1 and HASH_FOLDER.fullmatch(parts[0]) is not None


def scan(
    root: Path, owned: Callable[[PurePath], bool], pinned: Collection[Path] = frozenset()
) -> list[CacheFile]:
    """Regular files under `root` that `owned` accepts and `pinned` does not hold. Symbolic
    links are neither followed nor listed (nothing outside `root` is ever reached); files or
    folders that vanish meanwhile are skipped."""
    found: list[CacheFile] = []
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    item = _cache_file(entry, root, owned, pinned, folders)
                    if item is not None:
                        found.append(item)
        except OSError:  # vanished, or not ours to read (a shared folder's foreign entries)
            continue
    return found


def _cache_file(
    entry: os.DirEntry,
    root: Path,
    owned: Callable[[PurePath], bool],
    pinned: Collection[Path],
    folders: list[Path],
) -> CacheFile | None:
    try:
        if entry.is_dir(follow_symlinks=False):
            folders.append(Path(entry.path))
            return None
        if not entry.is_file(follow_symlinks=False):  # a link, socket, fifo: never Gradio's
            return None
        path = Path(entry.path)
        if path in pinned or not owned(path.relative_to(root)):
            return None
        stat = entry.stat(follow_symlinks=False)
    except OSError:  # FileNotFoundError: deleted between listing and stat
        return None
    return CacheFile(path, stat.st_mtime, stat.st_size)


def remove_file(path: Path) -> bool:
    """Delete one file; True when it is gone (also when someone else deleted it first)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("could not delete cached file %s: %s", path, exc)
        return False
    return True


def remove_empty_folders(path: Path, root: Path) -> None:
    """Remove the folders above `path` that are now empty, up to `root` (kept). A folder that
    got a new file meanwhile stays (rmdir refuses it)."""
    folder = path.parent
    while folder != root and folder.is_relative_to(root):
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            pass  # already gone: its parent may be empty too
        except OSError:
            return  # not empty (a file arrived, or a sibling was kept)
        folder = folder.parent


class CacheJanitor:
    """Keeps `root` within `policy`'s age and byte limits (see the module docstring).

    `clock` gives the wall-clock time files are aged against (their mtime; Gradio touches a
    cached copy when it hands it out again); `pinned` files are never deleted nor counted;
    `on_sweep` is called with every sweep's report (from the sweeping thread)."""

    def __init__(
        self,
        root: str | os.PathLike,
        policy: CachePolicy | None = None,
        *,
        pinned: Iterable[str | os.PathLike] = (),
        owned: Callable[[PurePath], bool] = gradio_owned,
        clock: Callable[[], float] = time.time,
        on_sweep: Callable[[SweepReport], Any] | None = None,
    ) -> None:
        self.root = Path(root).resolve()  # scan() joins names to it: comparable with `pinned`
        self.policy = policy or CachePolicy()
        self.pinned = frozenset(Path(p).resolve() for p in pinned)
        self.owned, self.clock, self.on_sweep = owned, clock, on_sweep
        self._sweeping = threading.Lock()  # the periodic and the after-upload sweeps take turns
        self._state = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def sweep(self) -> SweepReport:
        """Delete expired files, then the oldest ones until the rest fits in max_bytes."""
        with self._sweeping:
            files = scan(self.root, self.owned, self.pinned)
            now = self.clock()
            expired = [f for f in files if now - f.mtime > self.policy.max_age_s]
            fresh = sorted(
                (f for f in files if now - f.mtime <= self.policy.max_age_s),
                key=lambda f: (f.mtime, str(f.path)),
            )
            removed = [f for f in expired if remove_file(f.path)]
            removed += self._enforce_byte_cap(fresh)
            for item in removed:
                remove_empty_folders(item.path, self.root)
            gone = {f.path for f in removed}
            kept = [f for f in fresh if f.path not in gone]
            report = SweepReport(
                tuple(f.path for f in removed),
                sum(f.size for f in removed),
                len(kept),
                sum(f.size for f in kept),
            )
        if removed:
            log.info(
                "cache: removed %d file(s), %.1f MB; %d file(s), %.1f MB kept",
                len(removed),
                report.freed_bytes / MB,
                report.kept_files,
                report.kept_bytes / MB,
            )
        if self.on_sweep is not None:
            self.on_sweep(report)
        return report

    def _enforce_byte_cap(self, oldest_first: list[CacheFile]) -> list[CacheFile]:
        total = sum(f.size for f in oldest_first)
        removed = []
        for item in oldest_first:
            if total <= self.policy.max_bytes:
                break
            if remove_file(item.path):  # one that cannot be deleted still counts: try the next
                total -= item.size
                removed.append(item)
        return removed

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Sweep now (what an earlier run left goes before the first request), then every
        `policy.sweep_every_s` on a daemon thread. A second start while running does nothing."""
        with self._state:
            if self._thread is not None:
                return
            self._stop = threading.Event()
            thread = threading.Thread(
                target=self._run, args=(self._stop,), name="cache-janitor", daemon=True
            )
            self._thread = thread
        self._sweep_logged()
        thread.start()  # (a stop() meanwhile has set its event: it ends at once)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the periodic sweep (waits for one in progress, up to `timeout`)."""
        with self._state:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.policy.sweep_every_s):
            self._sweep_logged()

    def _sweep_logged(self) -> None:
        try:
            self.sweep()
        except Exception:  # noqa: BLE001 - the thread must outlive one bad sweep
            log.exception("cache sweep failed")


class UploadLimiter:
    """At most `limit` admitted uploads per client in any `window_s` (a sliding window).

    Clients are kept in order of their last admitted upload, so those idle for a whole window
    are forgotten from the front in O(1) each, and at most `max_clients` are remembered."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window_s, self.max_clients = limit, window_s, max_clients
        self.clock = clock
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()  # admit() is called from the event loop; tests may not

    def __len__(self) -> int:
        return len(self._clients)

    def admit(self, client: str) -> float | None:
        """None when `client` may upload now (counted), else the seconds until it may."""
        with self._lock:
            now = self.clock()
            self._forget_idle(now)
            times = self._clients.get(client)
            if times is None:
                times = self._clients[client] = deque()
                if len(self._clients) > self.max_clients:
                    self._clients.popitem(last=False)  # the least recently active client
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if len(times) >= self.limit:
                return times[0] + self.window_s - now
            times.append(now)
            self._clients.move_to_end(client)
            return None

    def _forget_idle(self, now: float) -> None:
        while self._clients:
            client, times = next(iter(self._clients.items()))
            if times and times[-1] > now - self.window_s:
                return  # the front is the least recently admitted: everyone after is newer
            del self._clients[client]


class DiskGuard:
    """A janitor and an upload limiter for one cache root; `middleware()` puts them on an app."""

    def __init__(
        self,
        root: str | os.PathLike,
        policy: CachePolicy | None = None,
        *,
        pinned: Iterable[str | os.PathLike] = (),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        on_sweep: Callable[[SweepReport], Any] | None = None,
    ) -> None:
        self.policy = policy or CachePolicy()
        self.janitor = CacheJanitor(
            root, self.policy, pinned=pinned, clock=clock, on_sweep=on_sweep
        )
        self.limiter = UploadLimiter(
            self.policy.uploads_per_window, self.policy.window_s, self.policy.max_clients, monotonic
        )

    @classmethod
    def for_blocks(cls, blocks: Any, policy: CachePolicy | None = None) -> DiskGuard:
        """The guard of a built page: its cache root, its own files pinned (call it before the
        page serves), and Gradio's bookkeeping of deleted files dropped after each sweep."""
        return cls(
            cache_root(blocks),
            policy,
            pinned=page_files(blocks),
            on_sweep=lambda report: forget_removed(blocks, report),
        )

    def middleware(self) -> Middleware:
        return Middleware(UploadGuard, guard=self)

    def start(self) -> None:
        self.janitor.start()

    def stop(self) -> None:
        self.janitor.stop()


def disk_guard_middleware(blocks: Any, policy: CachePolicy | None = None) -> Middleware:
    """`DiskGuard.for_blocks(blocks, policy).middleware()`: the whole guard of a served page,
    started and stopped with the server's lifespan."""
    return DiskGuard.for_blocks(blocks, policy).middleware()


def cache_root(blocks: Any) -> Path:
    """The folder Gradio 6 writes a Blocks' uploads and result files into: the components'
    `GRADIO_CACHE` and the app's upload folder are both `gradio.utils.get_upload_folder()`
    ($GRADIO_TEMP_DIR, else `<system temp>/gradio`)."""
    folder = getattr(blocks, "GRADIO_CACHE", None)
    if not folder:
        from gradio.utils import get_upload_folder

        folder = get_upload_folder()
    return Path(folder).resolve()


def page_files(blocks: Any) -> frozenset[Path]:
    """Files a Blocks has put in the cache so far, uploads aside: called before it serves,
    those it wrote while being built (gr.Examples' clips, default values), whose paths it
    keeps handing out; plus those Gradio itself marks `keep_in_cache`."""
    uploads = getattr(blocks, "upload_file_set", None)
    names: set[str] = set()
    for files in getattr(blocks, "temp_file_sets", ()):
        if files is not uploads:
            names.update(list(files))  # list(): one atomic copy of a set other threads add to
    for block in list(getattr(blocks, "blocks", {}).values()):
        names.update(list(getattr(block, "keep_in_cache", ())))
    return frozenset(Path(name).resolve() for name in names)


def forget_removed(blocks: Any, report: SweepReport) -> None:
    """Drop deleted files from Gradio's per-Blocks sets of created files (`temp_file_sets`,
    uploads included), as its own `delete_cache` sweep does: they grow by one path per upload
    and per result otherwise, for as long as the server runs."""
    if not report.removed:
        return
    for files in list(getattr(blocks, "temp_file_sets", ())):
        missing = [name for name in list(files) if not os.path.lexists(name)]
        files.difference_update(missing)


class UploadGuard:
    """Pure ASGI middleware (see the module docstring); `guard` holds the limits."""

    def __init__(self, app: ASGIApp, guard: DiskGuard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._with_lifespan(receive), send)
            return
        if not is_upload(scope):
            await self.app(scope, receive, send)
            return
        client, policy = client_host(scope), self.guard.policy
        wait_s = self.guard.limiter.admit(client)
        if wait_s is not None:
            await send_too_many(send, wait_s, policy)
            return
        declared = _content_length(scope)
        if declared is not None and declared > policy.max_upload_bytes:
            await send_json(send, 413, _too_large(policy))
            return
        budget = UploadBudget(scope, policy, lambda: self.guard.limiter.admit(client))
        try:
            try:
                await self.app(
                    scope, budget.receive(receive), budget.send(self._sweep_before_last_body(send))
                )
            except OSError as exc:
                if budget.response_started or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    await budget.release_held()
                    raise
                budget.refusal = lambda send: send_json(send, 507, NO_SPACE)  # not a 500
            except Exception:
                if budget.refusal is None:
                    await budget.release_held()
                    raise  # Gradio's own failure; a cut body's ClientDisconnect is expected
            if budget.refusal is not None and not budget.response_started:
                await budget.refusal(send)
            else:
                await budget.release_held()  # a 500 Gradio answered without raising
        finally:
            # again once Gradio is done: it moves a file after the response when the temp
            # folder is on another file system, and a client that left mid-upload leaves a
            # partial file behind
            with anyio.CancelScope(shield=True):
                await self._sweep()

    def _with_lifespan(self, receive: Receive) -> Receive:
        """receive() that starts the janitor on startup and stops it on shutdown."""

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await anyio.to_thread.run_sync(self.guard.start)
            elif message["type"] == "lifespan.shutdown":
                await anyio.to_thread.run_sync(self.guard.stop)
            return message

        return watched

    def _sweep_before_last_body(self, send: Send) -> Send:
        """send() that sweeps before the end of a successful upload's response reaches the
        client: once it has its answer, the byte cap holds."""
        status = 0

        async def swept(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif (
                message["type"] == "http.response.body"
                and not message.get("more_body")
                and 200 <= status < 300
            ):
                await self._sweep()
            await send(message)

        return swept

    async def _sweep(self) -> None:
        try:
            await anyio.to_thread.run_sync(self.guard.janitor.sweep)
        except Exception:  # noqa: BLE001 - the upload itself succeeded; the period retries
            log.exception("cache sweep after an upload failed")


def is_upload(scope: Scope) -> bool:
    return (
        scope["type"] == "http"
        and scope["method"] == "POST"
        and bool(UPLOAD_ROUTE.search(scope["path"]))
    )


def client_host(scope: Scope) -> str:
    """The client's address as the server saw it (behind a reverse proxy: the proxy's, unless
    the server is told to trust its X-Forwarded-For, e.g. uvicorn's --forwarded-allow-ips)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def send_too_many(send: Send, wait_s: float, policy: CachePolicy) -> None:
    retry = max(1, math.ceil(wait_s))
    detail = (
        f"Too many uploads: at most {policy.uploads_per_window} every "
        f"{_duration(policy.window_s)} from one address, each file counted. "
        f"Retry in {retry} s."
    )
    await send_json(send, 429, detail, [(b"retry-after", str(retry).encode())])


async def send_json(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _too_large(policy: CachePolicy) -> str:
    return f"Upload too large: at most {policy.max_upload_bytes / MB:g} MB in one request."


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses it before the app runs
    return None


def _boundary(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            found = re.search(rb'boundary="?([^";,\s]+)', value)
            return found.group(1) if found else None
    return None


class UploadBudget:
    """Counts an upload's bytes and multipart parts as Gradio reads them. Past a limit, Gradio's
    next receive() says the client left, whatever Gradio answers is dropped, and `refusal`
    holds our answer. Each part after the first is one more upload for `admit_file` (the
    limiter; None when admitted, else the seconds to wait)."""

    def __init__(
        self, scope: Scope, policy: CachePolicy, admit_file: Callable[[], float | None]
    ) -> None:
        self.policy, self.admit_file = policy, admit_file
        boundary = _boundary(scope)
        # a part starts at "--boundary" + CRLF (the closing delimiter is "--boundary--")
        self.marker = b"--" + boundary + b"\r\n" if boundary else None
        self.tail, self.parts, self.bytes = b"", 0, 0
        self.refusal: Callable[[Send], Awaitable[None]] | None = None
        self.response_started = False
        self.held: list[Message] = []  # a 500 being answered (see send())
        self._downstream: Send | None = None

    def receive(self, receive: Receive) -> Receive:
        async def counted() -> Message:
            if self.refusal is not None:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                self._count(message.get("body", b""))
                if self.refusal is not None:
                    return {"type": "http.disconnect"}
            return message

        return counted

    def send(self, send: Send) -> Send:
        """send() that drops Gradio's answer to a body we cut, and holds a 500 back: a mounted
        Gradio answers its own exceptions before they reach us, and a full disk is a 507."""
        self._downstream = send

        async def unless_refused(message: Message) -> None:
            if self.refusal is not None:
                return  # Gradio's answer to a body we cut
            if message["type"] == "http.response.start" and message["status"] == 500:
                self.held.append(message)
                return
            if self.held:
                self.held.append(message)
                return
            if message["type"] == "http.response.start":
                self.response_started = True
            await send(message)

        return unless_refused

    async def release_held(self) -> None:
        """Send a held 500 after all (the failure was not a full disk)."""
        held, self.held = self.held, []
        if held and self.refusal is None:
            self.response_started = True
            for message in held:
                await self._downstream(message)

    def _count(self, chunk: bytes) -> None:
        self.bytes += len(chunk)
        if self.bytes > self.policy.max_upload_bytes:
            self._refuse(413, _too_large(self.policy))
            return
        if self.marker is None:
            return
        data = self.tail + chunk
        self.tail = data[-(len(self.marker) - 1) :]  # a marker split across chunks: counted next
        for _ in range(data.count(self.marker)):
            self._new_part()
            if self.refusal is not None:
                return

    def _new_part(self) -> None:
        self.parts += 1
        if self.parts > self.policy.max_files_per_upload:
            detail = f"Too many files: at most {self.policy.max_files_per_upload} in one upload."
            self._refuse(413, detail)
        elif self.parts > 1 and (wait_s := self.admit_file()) is not None:
            self.refusal = lambda send: send_too_many(send, wait_s, self.policy)

    def _refuse(self, status: int, detail: str) -> None:
        self.refusal = lambda send: send_json(send, status, detail)


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} s"
