"""One long-lived thread for every computation of a served model.

A CPU build of torch runs its ops on OpenMP teams; a team belongs to the thread that made it and
lives as long as that thread. With two live teams in a process (more OpenMP threads than cores),
libgomp stops spinning between parallel regions and every region then pays a sleep and a
wake-up: on a 2-core box a 0.6B Qwen3 stream took ~1.7x as long per frame once another thread
had run a single parallel op, even with that thread idle since. So a backend runs its model on
one thread, whichever thread asks: Qwen3's batch scheduler loop is that thread (Scheduler.call),
other backends use a ModelThread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_DONE = object()


class ModelThread:
    def __init__(self, name: str) -> None:
        self._ident: int | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name,
                                            initializer=self._remember_thread)  # fmt: skip

    def _remember_thread(self) -> None:
        self._ident = threading.get_ident()

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the model thread; its result, or its exception, here.
        Called from the model thread itself (e.g. a generator closed there), it runs inline."""
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        return self._executor.submit(fn, *args, **kwargs).result()

    def iterate(self, items: Iterator[T]) -> Iterator[T]:
        """`items` advanced on the model thread one item per call (other calls may run
        between two items); closing this iterator closes `items` there too."""
        try:
            while (item := self.call(next, items, _DONE)) is not _DONE:
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                self.call(close)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def run_on_passing_thread(fn: Callable[[], T]) -> T:
    """fn() on a new thread that then ends, its result (or exception) here: work done once,
    such as building caches, whose OpenMP team should not outlive it."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = fn()
        except BaseException as error:  # noqa: BLE001 - raised below, on the caller's thread
            box["error"] = error

    thread = threading.Thread(target=work, name="tts-passing")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
