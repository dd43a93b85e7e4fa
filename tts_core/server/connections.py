"""Connection hygiene for the HTTP server: what Gradio's own `launch()` does not bound.

uvicorn closes an idle keep-alive connection, but not a fresh one that never sends a request,
nor one that trickles its head (slowloris) or body; and nothing caps open sockets, so a few
hundred idle connections exhaust the open-files limit. `guarded_protocol(guard)` is uvicorn's
h11 protocol with:

* a deadline for the request head (from the connection's first moment, or from the first byte
  of the next request on a kept-alive one), an idle deadline between body chunks and one for
  the whole body;
* a cap on open connections: past it, the oldest connection still waiting for a head is closed
  to make room; only when every connection is busy is the new one refused;
* a share of that cap per client address (an IPv6 /64 as one): past it, that address's own
  oldest idle connection makes room, or the new one is refused;
* a send timeout: a peer that stops reading (or a closed connection whose buffer does not
  drain) is aborted after `send_timeout_s`, not kept ESTABLISHED with its bytes queued;
* at most one log line a minute about any of this.

A WebSocket upgrade (`guarded_ws_protocol`) keeps its place under the cap: uvicorn swaps the
transport's protocol, so the count passes to the WebSocket protocol, which gives it back when
the connection is lost. An upgraded connection is busy, never closed to make room; the route
bounds its idle time; the send timeout applies.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import logging
import resource
import struct
import termios
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
# a browser opens ~6 connections to a site; 64 leaves room for a household or an office behind
# one address and keeps one client under a sixteenth of the default cap
DEFAULT_MAX_PER_ADDRESS = 64
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
    # a whole request body: 20 MB (an upload at --max-file-size 20mb) at 1 Mbit/s takes 160 s
    body_timeout_s: float = 300.0
    max_per_address: int = DEFAULT_MAX_PER_ADDRESS  # connections one client address may hold
    # peers not bound by that share: a reverse proxy speaks for many clients ("*": every peer;
    # an address or a network); http_server.serve takes them from FORWARDED_ALLOW_IPS
    share_exempt: tuple[str, ...] = ()
    send_timeout_s: float = 30.0  # longest a peer may leave our bytes unread (see the docstring)


def address_key(host: str | None) -> str:
    """Who a connection's address stands for: an IPv4 address, or an IPv6 address's /64 (one
    client's network); a name that is no IP address (a Unix socket): itself."""
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _networks(entries: tuple[str, ...]) -> Callable[[str], bool]:
    """address -> whether it is one of `entries` ("*", addresses, networks)."""
    if "*" in entries:
        return lambda _address: True
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            log.warning("connection share: %r is no address or network; ignored", entry)

    def exempt(address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("/")[0])
        except ValueError:
            return False
        return any(ip in network for network in networks)

    return exempt


def peer_key(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return address_key(peer[0] if isinstance(peer, tuple) and peer else None)


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
        self.per_address = max(1, min(limits.max_per_address, max_connections))
        self._exempt = _networks(limits.share_exempt)
        self.open = 0
        self.by_address: dict[str, int] = {}  # address_key -> its open connections
        self.waiting: OrderedDict[GuardedH11Protocol, None] = OrderedDict()  # oldest first
        self.notes = RateLimitedLog()

    def admit(self, protocol: GuardedH11Protocol, address: str = "") -> bool:
        """Count a new connection from `address` (address_key); False when it must be
        refused. Room is made by closing an idle connection: the address's own when it holds
        its share, else the oldest."""
        if self.by_address.get(address, 0) >= self.per_address and not self._exempt(address):
            own = next((p for p in self.waiting if getattr(p, "address", "") == address), None)
            if own is None:
                self.notes.event("refused: an address at its share of the cap (all busy)")
                return False
            del self.waiting[own]
            self.notes.event("closed an address's idle connection to admit its new one")
            own.close_idle()
        elif self.open >= self.max_connections:
            if not self.waiting:
                self.notes.event("refused at the connection cap (all busy)")
                return False
            oldest, _ = self.waiting.popitem(last=False)
            self.notes.event("closed an idle connection to admit a new one")
            oldest.close_idle()
        self.open += 1
        self.by_address[address] = self.by_address.get(address, 0) + 1
        return True

    def left(self, protocol: object, address: str = "") -> None:
        self.open -= 1
        held = self.by_address.get(address, 0) - 1
        if held > 0:
            self.by_address[address] = held
        else:
            self.by_address.pop(address, None)
        self.waiting.pop(protocol, None)  # type: ignore[call-overload]


class SendWatch:
    """Aborts a connection whose peer does not read: armed while the transport's writes are
    paused, and when it is closed with bytes still queued; it aborts after a whole `timeout_s`
    with no progress (a slow reader keeps taking bytes: our buffer plus the kernel's send
    queue shrinks from one check to the next). The protocol gets `watched` as its transport:
    the same transport, whose close() tells the watch."""

    def __init__(
        self, transport: asyncio.Transport, timeout_s: float, notes: RateLimitedLog
    ) -> None:
        if isinstance(transport, WatchedTransport):  # an upgrade: the h11 protocol's watch
            transport = transport.real  # was detached; this one takes over
        self.transport, self.timeout_s, self.notes = transport, timeout_s, notes
        self._timer: asyncio.TimerHandle | None = None
        self._lost = self._detached = False
        self._queued = 0  # the write buffer's size at the last check
        self.watched = WatchedTransport(transport, self)

    def paused(self) -> None:
        self._arm("a peer stopped reading")

    def resumed(self) -> None:
        if not self.transport.is_closing():
            self._disarm()

    def lost(self) -> None:
        self._lost = True
        self._disarm()

    def detach(self) -> None:
        """The transport passes to another protocol (with its own watch)."""
        self._disarm()
        self._detached = True

    def closed(self) -> None:
        if not self._lost and self.transport.get_write_buffer_size():
            self._arm("a closed connection's bytes were not read")

    def _arm(self, reason: str) -> None:
        if self._timer is None and not (self._lost or self._detached):
            self._queued = self._unsent()
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.timeout_s, self._check, reason)

    def _check(self, reason: str) -> None:
        """A send timeout passed: abort, unless the peer took some of our bytes meanwhile."""
        self._timer = None
        queued = self._unsent()
        if self._lost or not self.transport.get_write_buffer_size():
            return
        if queued < self._queued:  # progress: another timeout from here
            self._arm(reason)
            return
        self._abort(reason)

    def _unsent(self) -> int:
        """Bytes the peer has not taken: our write buffer's and the kernel's send queue."""
        return self.transport.get_write_buffer_size() + _kernel_send_queue(self.transport)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _abort(self, reason: str) -> None:
        self._timer = None
        if not self._lost:
            self.notes.event(f"aborted: {reason} for {self.timeout_s:g} s")
            self.transport.abort()


def _kernel_send_queue(transport: asyncio.BaseTransport) -> int:
    """The socket's bytes not yet acknowledged by the peer (Linux SIOCOUTQ); 0 where it
    cannot be read."""
    sock = transport.get_extra_info("socket")
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (AttributeError, OSError, ValueError):
        return 0
    return struct.unpack("i", answer)[0]


class WatchedTransport:
    """A transport whose close() arms its SendWatch (uvloop's transports cannot be patched);
    everything else is the transport's own."""

    def __init__(self, real: asyncio.Transport, watch: SendWatch) -> None:
        self.real, self._watch = real, watch

    def close(self) -> None:
        self.real.close()
        self._watch.closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class GuardedH11Protocol(H11Protocol):
    guard: ConnectionGuard  # set on the subclass made by guarded_protocol()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._body_due: float | None = None  # the loop time the current body must be in by
        self._upgraded = False  # a WebSocket protocol owns the transport now
        self.address = peer_key(transport)
        self._counted = self.guard.admit(self, self.address)
        if not self._counted:
            transport.write(_FULL_RESPONSE)
            transport.close()
            return
        self._watch = SendWatch(transport, self.guard.limits.send_timeout_s, self.guard.notes)
        super().connection_made(self._watch.watched)  # type: ignore[arg-type]
        self._await_request_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            return
        self._counted = False
        self._cancel_deadline()
        self._watch.lost()
        self.guard.left(self, self.address)
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._counted:
            self._watch.paused()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._counted:
            self._watch.resumed()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        super().data_received(data)
        if self._upgraded:  # h11 stopped at the upgrade request (SEND_BODY): no deadline
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:  # a body on its way: each chunk renews the idle deadline,
            self.guard.waiting.pop(self, None)  # up to the whole body's
            limits, now = self.guard.limits, self.loop.time()
            if self._body_due is None:
                self._body_due = now + limits.body_timeout_s
            if self._body_due - now <= limits.body_idle_timeout_s:
                self._arm(self._body_due - now, "request body too slow")
            else:
                self._arm(limits.body_idle_timeout_s, "request body stalled")
        elif state is not h11.IDLE:  # the request is in: the app has it from here
            self.guard.waiting.pop(self, None)
            self._body_due = None
            self._cancel_deadline()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # the head is in; the connection's place in the count passes to the WebSocket protocol
        self._cancel_deadline()
        self.guard.waiting.pop(self, None)
        self._watch.detach()
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
    giving the upgraded connection's place in `guard`'s count back when it is lost, and
    aborting a peer that does not read (SendWatch: a send waiting for the buffer to drain
    waits no longer than the send timeout)."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    def connection_made(self: Any, transport: asyncio.Transport) -> None:
        self.address = peer_key(transport)
        self._watch = SendWatch(transport, guard.limits.send_timeout_s, guard.notes)
        WebSocketsSansIOProtocol.connection_made(self, self._watch.watched)

    def connection_lost(self: Any, exc: Exception | None) -> None:
        self._watch.lost()
        if not getattr(self, "_released", False):
            self._released = True
            guard.left(self, self.address)
        WebSocketsSansIOProtocol.connection_lost(self, exc)

    def pause_writing(self: Any) -> None:
        WebSocketsSansIOProtocol.pause_writing(self)
        self._watch.paused()

    def resume_writing(self: Any) -> None:
        WebSocketsSansIOProtocol.resume_writing(self)
        self._watch.resumed()

    methods = {
        "connection_made": connection_made,
        "connection_lost": connection_lost,
        "pause_writing": pause_writing,
        "resume_writing": resume_writing,
    }
    return type("GuardedWebSocketProtocol", (WebSocketsSansIOProtocol,), methods)
