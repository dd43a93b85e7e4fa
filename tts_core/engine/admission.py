"""Admission: at most `slots` requests run and at most `queue_size` wait, first come first served.

Every surface (the page, gradio_client, the PCM route, /v1) reserves its place here before any
work is done for it, so the number of requests the process holds is bounded in one place and a
request beyond the bound is refused at once (`EngineBusy`) instead of piling up threads.
"""

from __future__ import annotations

import threading
from collections import deque

from .awaiting import Condition
from .errors import EngineBusy

POLL_S = 0.1  # how often a waiter looks at its cancel event
CLOSED_RETRY_AFTER_S = 10  # a closing server: another replica, or this one restarted


class Admission:
    def __init__(self, slots: int, queue_size: int) -> None:
        self.slots = max(1, int(slots))
        self.queue_size = max(0, int(queue_size))
        self._cond = Condition()  # a request on the event loop awaits its turn (awaiting.py)
        self._running = 0
        self._waiting: deque[Ticket] = deque()
        self._held: set[Ticket] = set()  # waiting or running
        self._closed: str | None = None  # why new requests are refused, once closed
        self._holds: dict[threading.Event, Ticket] = {}  # hold(): by the request's cancel event

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def reserve(self, cancel: threading.Event | None = None) -> Ticket:
        """A place in line, or EngineBusy when every slot runs and the line is full (or the
        line was closed). `cancel` is the request's own: `cancel_all` sets it. A place `hold`
        took for `cancel` is this one (taken once)."""
        with self._cond:
            held = self._holds.pop(cancel, None) if cancel is not None else None
            if held is not None and held.state == "waiting":
                return held
            if self._closed is not None:
                raise EngineBusy(self._closed, CLOSED_RETRY_AFTER_S)
            if self._running + len(self._waiting) >= self.slots + self.queue_size:
                raise EngineBusy(
                    f"The server is busy ({self._running} running, {len(self._waiting)} "
                    "waiting); please retry in a moment."
                )
            ticket = Ticket(self, cancel or threading.Event())
            self._waiting.append(ticket)
            self._held.add(ticket)
            return ticket

    def hold(self, cancel: threading.Event) -> Ticket:
        """A place taken now (EngineBusy as `reserve`) for the request that is later reserved
        with the same `cancel`: a route refuses a full line before the work a request needs
        first (reading a saved voice's clip took seconds under load, then a 503 anyway).
        `drop_hold(cancel)` gives back a place no request took."""
        ticket = self.reserve(cancel)
        with self._cond:
            self._holds[ticket.cancel] = ticket
        return ticket

    def drop_hold(self, cancel: threading.Event) -> None:
        with self._cond:
            held = self._holds.get(cancel)
        if held is not None:
            held.release()

    def close(self, reason: str) -> None:
        """Refuse every later request with `reason` (EngineBusy); those in line keep theirs."""
        with self._cond:
            self._closed = reason

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no request runs or waits (True), or `timeout` passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._held, timeout)

    def cancel_all(self) -> int:
        """Set the cancel event of every request in line or running; how many there were."""
        with self._cond:
            held = list(self._held)
        for ticket in held:
            ticket.cancel.set()
        return len(held)

    def _wait(self, ticket: Ticket, cancel: threading.Event) -> bool:
        with self._cond:
            while not (self._waiting[0] is ticket and self._running < self.slots):
                if cancel.is_set():
                    self._leave(ticket)
                    return False
                self._cond.wait(POLL_S)
            self._waiting.popleft()
            self._running += 1
            ticket.state = "running"
            self._cond.notify_all()  # the next in line may also fit
            return True

    def _leave(self, ticket: Ticket) -> None:
        """Under the lock: give back whatever `ticket` holds (idempotent)."""
        if ticket.state == "released":
            return
        if ticket.state == "waiting":
            self._waiting.remove(ticket)
        elif ticket.state == "running":
            self._running -= 1
        ticket.state = "released"
        self._held.discard(ticket)
        if self._holds.get(ticket.cancel) is ticket:
            del self._holds[ticket.cancel]
        self._cond.notify_all()

    def _release(self, ticket: Ticket) -> None:
        with self._cond:
            self._leave(ticket)


class Ticket:
    """One request's place: waiting, then running, then released (exactly once)."""

    def __init__(self, admission: Admission, cancel: threading.Event) -> None:
        self._admission = admission
        self.cancel = cancel
        self.state = "waiting"

    def wait_turn(self, cancel: threading.Event) -> bool:
        """Block until this request may run (True), or until `cancel` is set (False, released)."""
        return self._admission._wait(self, cancel)

    def release(self) -> None:
        self._admission._release(self)
