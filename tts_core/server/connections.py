"""Connection hygiene for the HTTP server: what Gradio's own `launch()` does not bound.

uvicorn closes an idle keep-alive connection, but not a fresh one that never sends a request,
nor one that trickles its request head (slowloris) or its body a byte at a time; and nothing
caps how many sockets stay open, so a few hundred idle connections exhaust the open-files
limit and the server stops answering anyone. `guarded_protocol(guard)` is uvicorn's h11
protocol with:

* a deadline for the whole request head, counted from the connection's first moment (or from
  the first byte of the next request on a kept-alive connection);
* an idle deadline between body chunks while a request body is still arriving;
* a cap on open connections: past it, the oldest connection still waiting for a request head
  is closed to make room (a visitor's real request keeps its socket); only when every
  connection is busy with a request is the new one refused;
* at most one log line a minute about any of this, however many connections it closes.

A WebSocket upgrade (`guarded_ws_protocol`: uvicorn's websockets sans-I/O protocol) keeps its
place under the cap: the head deadline ends with the upgrade request, the count passes to the
WebSocket protocol, which gives it back when the connection is lost (uvicorn swaps the
transport's protocol, so the h11 protocol never hears of the close). An upgraded connection is
busy, never closed to make room; the route bounds its idle time.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

# asyncio accepts up to `backlog` sockets in one loop pass before any of them reaches the guard,
# and the ones the guard closes free their descriptor a pass later: up to ~3 x ACCEPT_BACKLOG
# sockets past the cap at once, plus the process's own files (~12 at idle: logs, pipes, model)
ACCEPT_BACKLOG = 64
FD_RESERVE = 256  # >= 3 x ACCEPT_BACKLOG + the process's own descriptors, with room to spare
DEFAULT_MAX_CONNECTIONS = 1000
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 16\r\n\r\nRequest timeout\n"
)
_FULL_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 5\r\nconnection: close\r\ncontent-length: 25\r\n\r\n"
    b"Too many open connections"
)


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0  # the whole request head (a browser sends it at once)
    body_idle_timeout_s: float = 30.0  # longest pause between chunks of a request body
    keep_alive_s: float = 5.0  # an idle connection between requests
    max_connections: int = DEFAULT_MAX_CONNECTIONS


def raise_open_files_limit() -> int:
    """Raise this process's soft open-files limit to the hard one; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. a sandbox that forbids it
            log.warning("could not raise the open-files limit %d -> %d: %s", soft, hard, exc)
    return soft


def quiet_accept_errors(notes: RateLimitedLog) -> None:
    """asyncio logs every failed accept() (EMFILE: up to `backlog` lines a loop pass, tens of
    thousands a minute); on the running loop, such errors go to `notes` instead."""
    loop = asyncio.get_running_loop()

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if "accept" in str(context.get("message", "")):
            notes.event(f"accept() failed: {context.get('exception')}")
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def connection_cap(wanted: int, open_files_limit: int) -> int:
    """At most `wanted` connections, and never so many that sockets take the descriptors the
    process needs for anything else."""
    return max(1, min(wanted, open_files_limit - FD_RESERVE))


class RateLimitedLog:
    """One warning per `period_s` at most, with how many events it stands for."""

    def __init__(self, period_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.period_s, self.clock = period_s, clock
        self._last: float | None = None
        self._pending: dict[str, int] = {}

    def event(self, what: str) -> None:
        self._pending[what] = self._pending.get(what, 0) + 1
        now = self.clock()
        if self._last is not None and now - self._last < self.period_s:
            return
        self._last = now
        summary = ", ".join(f"{n} x {kind}" for kind, n in self._pending.items())
        self._pending.clear()
        log.warning("connection guard: %s (at most one such line a minute)", summary)


class ConnectionGuard:
    """The state the protocol instances of one server share (one event loop: no locks)."""

    def __init__(self, limits: ConnectionLimits, max_connections: int) -> None:
        self.limits = limits
        self.max_connections = max_connections
        self.open = 0
        self.waiting: OrderedDict[GuardedH11Protocol, None] = OrderedDict()  # oldest first
        self.notes = RateLimitedLog()

    def admit(self, protocol: GuardedH11Protocol) -> bool:
        """Count a new connection; False when it must be refused."""
        if self.open >= self.max_connections:
            if not self.waiting:
                self.notes.event("refused at the connection cap (all busy)")
                return False
            oldest, _ = self.waiting.popitem(last=False)
            self.notes.event("closed an idle connection to admit a new one")
            oldest.close_idle()
        self.open += 1
        return True

    def left(self, protocol: GuardedH11Protocol) -> None:
        self.open -= 1
        self.waiting.pop(protocol, None)


class GuardedH11Protocol(H11Protocol):
    guard: ConnectionGuard  # set on the subclass made by guarded_protocol()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._upgraded = False  # a WebSocket protocol owns the transport now
        self._counted = self.guard.admit(self)
        if not self._counted:
            transport.write(_FULL_RESPONSE)
            transport.close()
            return
        super().connection_made(transport)
        self._await_request_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            return
        self._counted = False
        self._cancel_deadline()
        self.guard.left(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        super().data_received(data)
        if self._upgraded:  # h11 stopped at the upgrade request (SEND_BODY): no deadline
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:  # a body on its way: each chunk renews the idle deadline
            self.guard.waiting.pop(self, None)
            self._arm(self.guard.limits.body_idle_timeout_s, "request body stalled")
        elif state is not h11.IDLE:  # the request is in: the app has it from here
            self.guard.waiting.pop(self, None)
            self._cancel_deadline()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # the head is in; the connection's place in the count passes to the WebSocket protocol
        self._cancel_deadline()
        self.guard.waiting.pop(self, None)
        self._counted, self._upgraded = False, True
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms uvicorn's keep-alive timer
        if not self.transport.is_closing():
            self.guard.waiting[self] = None
            self._cancel_deadline()  # the head deadline restarts with the next request's bytes

    def _unset_keepalive_if_required(self) -> None:
        had_keep_alive = self.timeout_keep_alive_task is not None
        super()._unset_keepalive_if_required()
        if had_keep_alive and self.transport is not None and not self.transport.is_closing():
            self._await_request_head()  # the next request's first bytes: its head is due

    def _await_request_head(self) -> None:
        self.guard.waiting[self] = None
        if self._deadline is None:
            self._arm(self.guard.limits.header_timeout_s, "request head too slow")

    def _arm(self, seconds: float, reason: str) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(seconds, self._time_out, reason)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _time_out(self, reason: str) -> None:
        self._deadline = None
        self.guard.notes.event(f"closed: {reason}")
        self.close_idle()

    def close_idle(self) -> None:
        """Close a connection that is not being answered (no response started on it)."""
        if self.transport is None or self.transport.is_closing() or self._upgraded:
            return
        if self.conn.our_state is h11.IDLE:
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """uvicorn's `Config(http=...)` class for one server, bound to its guard."""
    return type("GuardedH11ProtocolForServer", (GuardedH11Protocol,), {"guard": guard})


def guarded_ws_protocol(guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """uvicorn's `Config(ws=...)` class for one server: the websockets sans-I/O protocol,
    giving the upgraded connection's place in `guard`'s count back when it is lost."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    def connection_lost(self: Any, exc: Exception | None) -> None:
        if not getattr(self, "_released", False):
            self._released = True
            guard.left(self)
        WebSocketsSansIOProtocol.connection_lost(self, exc)

    return type("GuardedWebSocketProtocol", (WebSocketsSansIOProtocol,),
                {"connection_lost": connection_lost})  # fmt: skip
