"""One request stepped by its own consumer: the engine with one row on the caller's thread
(`model.stream` / `model.generate` of every model). No thread is started; the engine is made
at the first `next()` and dropped, with the request's caches, when the request ends or its
generator is closed."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from .batch import BatchEngine
from .sequence import Sequence, Status


class InlineOutbox:
    """The outbox of a request stepped by its own consumer (`run_alone`): what the step hands
    out waits here until the consumer's generator yields it; no thread, no lock."""

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.ended = False
        self.error: BaseException | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)

    def end(self, error: BaseException | None = None) -> None:
        self.ended, self.error = True, error


def run_alone(make_engine: Callable[[], BatchEngine], seq: Sequence) -> Iterator[Any]:
    """What `seq` (made with an InlineOutbox) hands out, stepped on the thread that iterates by
    `make_engine()` (one row, `isolate_failures=False`: its errors raised here), made at the
    first `next()`. Ends without a final item when the request was stopped; closing the
    generator frees its caches at once."""
    if not isinstance(seq.outbox, InlineOutbox):
        raise TypeError("run_alone needs a request made with outbox=InlineOutbox()")
    return _stepped_alone(make_engine, seq)


def _stepped_alone(make_engine: Callable[[], BatchEngine], seq: Sequence) -> Iterator[Any]:
    engine = make_engine()
    engine.add(seq)
    outbox: InlineOutbox = seq.outbox
    try:
        while True:
            engine.step()
            if seq.status is Status.WAITING:  # cannot happen: the engine is made for it
                raise RuntimeError("a private engine did not admit its own request")
            while outbox.items:
                yield outbox.items.popleft()
                seq.restart_clock()
            if outbox.ended:
                if outbox.error is not None:
                    raise outbox.error
                return
    finally:
        engine._finish_all()
