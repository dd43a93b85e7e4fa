"""The production HTTP server: the page and the routes on one uvicorn server we configure.

Gradio's `launch()` runs uvicorn with no deadline for a request head, no cap on connections and
no graceful shutdown (SIGTERM ends the process at once). `serve()` mounts the same Blocks app
on a FastAPI app of ours and runs it with

* connections bounded (`connections.py`; the open-files limit raised to the hard limit first),
  WebSocket upgrades included (websockets' sans-I/O protocol, messages up to
  `speech_ws.MAX_MESSAGE_BYTES`, no per-message compression: PCM does not compress and the
  CPU is the model's);
* an unknown Gradio event answered with 404 (`gradio_guard.py`), the disk cache bounded
  (`disk_guard.py`), the API routes installed before the page;
* Gradio's endless heartbeat streams (one per open tab) bounded per client address
  (`StreamShare`: 429 past it);
* on SIGTERM or SIGINT: new requests get 503 + Retry-After, those in flight finish for up to
  `shutdown_timeout_s`, the rest are cancelled, voice writes end, then the server closes and
  `serve` returns (exit 0, `atexit` runs). A second SIGINT exits at once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import gradio as gr
import uvicorn
from fastapi import APIRouter, FastAPI
from starlette.middleware import Middleware

from ..engine import EngineSlot
from .connections import (
    ACCEPT_BACKLOG,
    ConnectionGuard,
    ConnectionLimits,
    address_key,
    connection_cap,
    guarded_protocol,
    guarded_ws_protocol,
    quiet_accept_errors,
    raise_open_files_limit,
)
from .disk_guard import send_json
from .gradio_guard import EventGuard
from .speech_ws import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

CLOSE_GRACE_S = 3.0  # after the drain: responses still being written get this long
DRAIN_POLL_S = 0.1
ENDLESS_ROUTES = ("/gradio_api/heartbeat/",)  # responses that stream until the client leaves
STREAMS_PER_ADDRESS = 16  # of them at once per client address: tabs of one household


class StreamShare:
    """ASGI middleware: at most `per_address` open responses on the `prefixes` routes per
    client address (connections.address_key); past it, 429 with Retry-After."""

    def __init__(
        self,
        app: Any,
        per_address: int = STREAMS_PER_ADDRESS,
        prefixes: tuple[str, ...] = ENDLESS_ROUTES,
    ) -> None:
        self.app, self.per_address, self.prefixes = app, per_address, prefixes
        self.open: dict[str, int] = {}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(self.prefixes):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        key = address_key(client[0] if client else None)
        if self.open.get(key, 0) >= self.per_address:
            detail = f"At most {self.per_address} such streams per client at once."
            await send_json(send, 429, detail, [(b"retry-after", b"15")])
            return
        self.open[key] = self.open.get(key, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open[key] -= 1
            if not self.open[key]:
                del self.open[key]


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 7860
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    shutdown_timeout_s: float = 10.0
    max_file_size: int | None = None  # bytes, for Gradio's uploads
    footer_links: tuple[str, ...] = ("api", "gradio")


def build_asgi_app(
    blocks: gr.Blocks,
    router: APIRouter,
    options: ServeOptions,
    middleware: tuple[Middleware, ...] = (),
) -> FastAPI:
    """FastAPI app: our routes first, then the page mounted at /, behind the guards."""
    guards = [Middleware(StreamShare), Middleware(EventGuard, blocks=blocks), *middleware]
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, middleware=guards)
    app.include_router(router)
    return gr.mount_gradio_app(
        app,
        blocks,
        path="/",
        server_name=options.host,
        server_port=options.port,
        max_file_size=options.max_file_size,
        footer_links=list(options.footer_links),
    )


class DrainingServer(uvicorn.Server):
    """uvicorn.Server whose first SIGTERM/SIGINT drains the engine before closing."""

    def __init__(
        self,
        config: uvicorn.Config,
        guard: ConnectionGuard,
        drain: Callable[[], None],
        on_started: Callable[[str], Any] | None = None,
    ) -> None:
        super().__init__(config)
        self.guard = guard
        self.drain, self._on_started = drain, on_started
        self._draining: threading.Thread | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        quiet_accept_errors(self.guard.notes)
        await super().startup(sockets)
        if self.started and self._on_started is not None:
            self._on_started(f"http://{self.config.host}:{self.config.port}")

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn re-raises a captured signal once it has stopped (the process then dies of
        # it: exit 143, no atexit); a drained shutdown is a clean exit, so none is recorded
        if self._draining is not None:
            if sig == signal.SIGINT:
                log.warning("second interrupt: exiting now")
                self.force_exit = True
            return
        log.info("%s: draining (new requests get 503), then exiting", signal.Signals(sig).name)
        self._draining = threading.Thread(
            target=self._drain_then_exit, name="tts-drain", daemon=True
        )
        self._draining.start()

    def _drain_then_exit(self) -> None:
        try:
            self.drain()
        except Exception:
            log.exception("draining failed; closing the server anyway")
        self.should_exit = True


def make_drain(
    slot: EngineSlot,
    responses_open: Callable[[], int],
    wait_for_writes: Callable[[float], bool],
    timeout_s: float,
) -> Callable[[], None]:
    """What a shutdown does before the server closes, while it still answers (503 to new
    requests): the engine's requests finish or are cancelled at the deadline, the responses
    still being sent get the rest of it, voice writes end."""

    def drain() -> None:
        deadline = time.monotonic() + timeout_s
        if slot.close(timeout_s):
            log.info("shutdown: every synthesis finished")
        while responses_open() and time.monotonic() < deadline:
            time.sleep(DRAIN_POLL_S)
        if responses_open():
            log.warning("shutdown: %d response(s) still open at the deadline", responses_open())
        if not wait_for_writes(CLOSE_GRACE_S):
            log.warning("shutdown: a voice write was still running; the store rolls it back")

    return drain


def server_config(
    app: Any, options: ServeOptions, guard: ConnectionGuard, lifespan: str = "on"
) -> uvicorn.Config:
    """uvicorn's configuration of our server: the guarded HTTP and WebSocket protocols."""
    return uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        http=guarded_protocol(guard),
        ws=guarded_ws_protocol(guard),
        ws_max_size=MAX_MESSAGE_BYTES,
        ws_per_message_deflate=False,
        lifespan=lifespan,
        backlog=ACCEPT_BACKLOG,
        timeout_keep_alive=int(max(1, options.connections.keep_alive_s)),
        timeout_graceful_shutdown=int(CLOSE_GRACE_S),
    )


def proxies_share(limits: ConnectionLimits, forwarded_allow_ips: str) -> ConnectionLimits:
    """The trusted reverse proxies (uvicorn's FORWARDED_ALLOW_IPS, set for a proxy as the
    README says) speak for many clients: not bound by one address's share of connections."""
    proxies = tuple(p.strip() for p in forwarded_allow_ips.split(",") if p.strip())
    return dataclasses.replace(limits, share_exempt=proxies) if proxies else limits


def serve(
    blocks: gr.Blocks,
    router: APIRouter,
    slot: EngineSlot,
    options: ServeOptions,
    wait_for_writes: Callable[[float], bool] = lambda _timeout: True,
    middleware: tuple[Middleware, ...] = (),
    on_started: Callable[[str], Any] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain (see the module docstring) and return."""
    limits = proxies_share(options.connections, os.environ.get("FORWARDED_ALLOW_IPS", ""))
    cap = connection_cap(limits.max_connections, raise_open_files_limit())
    guard = ConnectionGuard(limits, cap)
    app = build_asgi_app(blocks, router, options, middleware)
    config = server_config(app, options, guard)
    server = DrainingServer(config, guard, lambda: None, on_started)
    server.drain = make_drain(
        slot, lambda: len(server.server_state.tasks), wait_for_writes, options.shutdown_timeout_s
    )
    log.info("serving on http://%s:%d (at most %d connections)", options.host, options.port, cap)
    server.run()
