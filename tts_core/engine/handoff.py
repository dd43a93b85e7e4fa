"""The one bridge from a producer thread to its consumer: items in order, then the end or the
producer's error, raised on the consumer's side.

Used by the page's stream handle (waits with a timeout), the HTTP bodies (an asyncio consumer,
woken through `call_soon_threadsafe`, no polling) and the batch scheduler's per-request outbox.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Handoff:
    """One producer, one consumer. `get` raises StopIteration after the end, and re-raises
    the error the producer ended with."""

    def __init__(self) -> None:
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._finished = False  # consumer side: the end (or error) was taken
        self._wake: Callable[[], None] | None = None  # set by an asyncio consumer

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
        item = self._items.get(timeout=timeout)
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

    async def drain(self) -> AsyncIterator[Any]:
        """The items on the running event loop, each as soon as it is put."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:  # the loop closed (server shutdown): no one is listening
                pass

        self._wake = wake
        while True:
            ready.clear()  # before looking: a put after this look sets it again
            try:
                item = self.get(timeout=0)
            except queue.Empty:
                await ready.wait()
                continue
            except StopIteration:
                return
            yield item


def run_on_thread(
    produce: Callable[[Callable[[Any], None]], None], name: str, handoff: Handoff | None = None
) -> Handoff:
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
