"""Runs an engine stream on its own thread so a consumer can wait with a timeout and cancel.

The UI needs both: it must notice "no new chunk for 150 ms" (to push a tiny zero chunk that
makes Gradio publish the previous one), and a Stop/disconnect must end the synthesis even
while the backend is busy computing the next chunk.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from .engine import Engine, StreamEvent, SynthesisRequest

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class StreamHandle:
    def __init__(self, engine: Engine, request: SynthesisRequest) -> None:
        self.cancel_event = threading.Event()
        events = engine.stream(request, self.cancel_event)  # validates here: may raise InputError
        self._queue: queue.Queue = queue.Queue()
        self._finished = False
        self._thread = threading.Thread(
            target=self._pump, args=(events,), name="tts-stream", daemon=True
        )
        self._thread.start()

    def _pump(self, events: Iterator[StreamEvent]) -> None:
        try:
            for event in events:
                self._queue.put(event)
                if self.cancel_event.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            self._queue.put(_Failure(exc))
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
            self._queue.put(_END)

    def next_event(self, timeout: float | None = None) -> StreamEvent | None:
        """The next event; None if none came within `timeout`; StopIteration at the end."""
        if self._finished:
            raise StopIteration
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self._finished = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._finished = True
            raise item.error
        return item

    def __iter__(self) -> Iterator[StreamEvent]:
        while True:
            try:
                event = self.next_event()
            except StopIteration:
                return
            if event is not None:
                yield event

    def cancel(self, wait_s: float = 0.0) -> None:
        """Ask the synthesis to stop; optionally wait for its thread to end."""
        self.cancel_event.set()
        if wait_s > 0:
            self._thread.join(wait_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()
