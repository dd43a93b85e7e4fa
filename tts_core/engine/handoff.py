"""The one bridge from a producer thread to its consumer (the page's stream handle, each
request's outbox of the engine loop): items in order, then the end or the producer's error,
raised on the consumer's side. A consumer under `run_awaiting` (awaiting.py: an HTTP or
WebSocket request on the event loop) awaits an item instead of blocking: the producer's `put`
wakes it through `call_soon_threadsafe`, no polling.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .awaiting import await_here, awaiting_loop, waker, woken_within

_END = object()
Producer = Callable[[Callable[[Any], None]], None]  # produce(put): puts its items, then returns


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Handoff:
    """One producer, one consumer. `get` raises StopIteration after the end, and re-raises
    the error the producer ended with."""

    def __init__(self) -> None:
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._finished = False  # consumer side: the end (or error) was taken
        self._wake: Callable[[], None] | None = None  # set by a consumer on the event loop

    # ------------------------------------------------------------------ producer side
    def put(self, item: Any) -> None:
        self._items.put(item)
        if self._wake is not None:
            self._wake()

    def end(self, error: BaseException | None = None) -> None:
        """No more items; `error` is raised to the consumer after the ones already put."""
        if error is not None:
            self.put(_Failure(error))
        self.put(_END)

    # ------------------------------------------------------------------ consumer side
    def get(self, timeout: float | None = None) -> Any:
        """The next item; raises queue.Empty when none came within `timeout`."""
        if self._finished:
            raise StopIteration
        if awaiting_loop() is None:
            item = self._items.get(timeout=timeout)
        else:
            item = self._await_item(timeout)
        if item is _END or isinstance(item, _Failure):
            self._finished = True
            if item is _END:
                raise StopIteration
            raise item.error
        return item

    @property
    def finished(self) -> bool:
        return self._finished

    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                yield self.get()
            except StopIteration:
                return

    def _await_item(self, timeout: float | None) -> Any:
        """The next item, awaited on the event loop (queue.Empty after `timeout`)."""
        try:
            return self._items.get_nowait()
        except queue.Empty:
            pass
        woken, self._wake = waker(awaiting_loop())
        try:  # looked at again: a put before the wake was set did not call it
            return self._items.get_nowait()
        except queue.Empty:
            if not await_here(woken_within(woken, timeout)):
                raise
        finally:
            self._wake = None
        return self._items.get_nowait()


def run_on_thread(produce: Producer, name: str, handoff: Handoff | None = None) -> Handoff:
    """Start `produce(put)` on a daemon thread; its items, end and error go to the handoff."""
    handoff = handoff or Handoff()

    def work() -> None:
        try:
            produce(handoff.put)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the consumer's side
            handoff.end(exc)
        else:
            handoff.end()

    threading.Thread(target=work, name=name, daemon=True).start()
    return handoff


def pump(make_items: Callable[[], Iterator[Any]], stop: threading.Event) -> Producer:
    """A producer for `run_on_thread`: the items of `make_items()` (made on its thread) put one
    by one until their end or `stop` (checked after each), then closed."""

    def produce(put: Callable[[Any], None]) -> None:
        items = make_items()
        try:
            for item in items:
                put(item)
                if stop.is_set():
                    return
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    return produce


def off_the_loop(make_items: Callable[[], Iterator[Any]], name: str) -> Iterator[Any]:
    """The items of `make_items()`. Under run_awaiting (awaiting.py), for code that may block
    the event loop, advanced on a thread of its own (one per call) and each awaited; once this
    is closed that thread stops after the item in hand. Elsewhere, advanced here."""
    if awaiting_loop() is None:
        yield from make_items()
        return
    stop = threading.Event()
    try:
        yield from run_on_thread(pump(make_items, stop), name)
    finally:
        stop.set()
