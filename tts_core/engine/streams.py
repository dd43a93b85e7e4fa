"""A request on its way out: its events (StreamEvent), read through an EngineStream, or a
FedStream for a request whose text arrives in pieces (Engine.open_fed)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .admission import Ticket
from .backend import TextInlet


@dataclass
class StreamEvent:
    audio: np.ndarray  # (N,) float32 mono at engine.sample_rate; empty only on the final event
    index: int
    final: bool
    stats: dict[str, Any]


class EngineStream:
    """The events of one request. Closing it (or dropping it unread) gives its place in line
    back at once, even if it was never iterated: a generator that never started would not
    run its `finally`."""

    def __init__(self, events: Iterator[StreamEvent], ticket: Ticket) -> None:
        self._events = events
        self._ticket = ticket

    def __iter__(self) -> EngineStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()
        self._ticket.release()

    def __del__(self) -> None:
        self._ticket.release()


class FedStream(EngineStream):
    """The events of a request whose text arrives in pieces (Engine.open_fed). `feed` and
    `done` hand the text over without waiting (one feeder: any thread, or the event loop),
    while the events are iterated elsewhere (the request's waits for text are there)."""

    def __init__(self, events: Iterator[StreamEvent], ticket: Ticket, inlet: TextInlet) -> None:
        super().__init__(events, ticket)
        self._inlet = inlet

    @property
    def text(self) -> str:
        """The cleaned text received so far."""
        return self._inlet.text

    @property
    def forwarded(self) -> bool:
        """The backend reads the text as it arrives and has taken all of it so far."""
        return self._inlet.forwarded

    def feed(self, piece: str) -> None:
        """More text; InputError past the engine's text limit, or after `done`."""
        self._inlet.push(piece)

    def done(self) -> None:
        """The text is complete; InputError when nothing visible came."""
        self._inlet.finish()

    def cancel(self) -> None:
        """Stop the request (from any thread; the consumer still closes the stream)."""
        self._ticket.cancel.set()
