"""Runs an engine stream on its own thread so a consumer can wait with a timeout and cancel.

The UI needs both: it must notice "no new chunk for 150 ms" (to push a tiny zero chunk that
makes Gradio publish the previous one), and a Stop/disconnect must end the synthesis even
while the backend is busy computing the next chunk.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from .engine import Engine
from .handoff import Producer, pump, run_on_thread
from .requests import SynthesisRequest
from .streams import StreamEvent


class StreamHandle:
    def __init__(self, engine: Engine, request: SynthesisRequest) -> None:
        self.cancel_event = threading.Event()
        events = engine.stream(request, self.cancel_event)  # validates here: may raise InputError
        self._handoff = run_on_thread(self._pump(events), "tts-stream")

    def _pump(self, events: Iterator[StreamEvent]) -> Producer:
        """The events until their end or a cancel, then closed (the engine's slot back)."""
        return pump(lambda: events, self.cancel_event)

    def next_event(self, timeout: float | None = None) -> StreamEvent | None:
        """The next event; None if none came within `timeout`; StopIteration at the end."""
        try:
            return self._handoff.get(timeout)
        except queue.Empty:
            return None

    def __iter__(self) -> Iterator[StreamEvent]:
        return iter(self._handoff)

    def cancel(self) -> None:
        """Ask the synthesis to stop (its thread ends within one backend buffer)."""
        self.cancel_event.set()
