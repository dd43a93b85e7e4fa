"""What the engine keeps of every request, whatever the model: its place in the engine, its
frame limit, chunk cadence and pending frames, how it is stopped and where its chunks go. A
model's own row (`Qwen3Sequence`, `VoxSequence`, ...) subclasses `Sequence` with its prompt,
sampling state, cache and decoder state. The stepping thread (the loop's, or the caller's for
`model.stream`) owns every field except `cancelled` and the outbox, the consumer's.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from typing import Any

from ..audio.cadence import Cadence
from ..engine.handoff import Handoff


class Status(enum.Enum):
    WAITING = "waiting"  # in line for a row (and whatever else admission gives it)
    PREFILL = "prefill"  # its prompt goes through the model, a chunk at a time
    DECODING = "decoding"  # one frame per engine step
    DONE = "done"


class Sequence:
    def __init__(
        self,
        cadence: Cadence,
        should_stop: Callable[[], bool],
        limit: int,
        limit_reason: str,
        *,
        audio: bool = True,
        outbox: Any = None,
    ) -> None:
        """cadence: when a chunk is due; limit: frames at most, then the
        request ends with `limit_reason`; audio False: the outbox gets lists of frames, not
        decoded chunks; outbox None: a Handoff to a consumer on another thread (or on the
        event loop, which awaits each chunk: engine/awaiting.py)."""
        self.cadence = cadence
        self.should_stop = should_stop
        self.audio = audio
        self.limit, self.limit_reason = limit, limit_reason
        self.status = Status.WAITING
        self.cancelled = threading.Event()
        self.outbox = Handoff() if outbox is None else outbox  # chunks, then end or error
        self.submitted = time.perf_counter()
        self.frames = 0  # frames emitted
        self.pending: list[Any] = []  # frames of the chunk being gathered
        self.chunk_batch = 0  # most rows stepped together for the pending frames
        self.chunk_started = self.submitted

    @property
    def stopped(self) -> bool:
        return self.cancelled.is_set() or self.should_stop()

    def add_frame(self, frame: Any, batch: int) -> None:
        self.frames += 1
        self.pending.append(frame)
        self.chunk_batch = max(self.chunk_batch, batch)

    @property
    def input_ready(self) -> bool:
        """Can this row take its next decode step? (False: it waits for more input, e.g. text
        still to come, and keeps its place, cache and state.) Cheap: the loop asks it while
        deciding whether to sleep."""
        return True

    @property
    def at_limit(self) -> bool:
        return self.frames == self.limit

    @property
    def before_first_chunk(self) -> bool:
        """No chunk delivered yet: every frame made so far is still pending."""
        return self.frames == len(self.pending)

    @property
    def chunk_due(self) -> bool:
        chunks_out = 0 if self.before_first_chunk else 1  # (any later one alike)
        return self.cadence.due(len(self.pending), chunks_out) or self.at_limit

    def take_chunk(self) -> tuple[list[Any], float, int]:
        """(frames, seconds since the previous chunk, batch size) and start the next chunk."""
        now = time.perf_counter()
        taken = (self.pending, now - self.chunk_started, max(self.chunk_batch, 1))
        self.pending, self.chunk_batch, self.chunk_started = [], 0, now
        return taken

    def restart_clock(self) -> None:
        """The next chunk's time counts from now (the consumer stepping this request inline
        took its chunk and has handed control back: its own time is not compute)."""
        if not self.pending:
            self.chunk_started = time.perf_counter()
