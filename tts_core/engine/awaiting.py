"""The engine's blocking code run on an asyncio event loop, each of its waits awaited there.

A request's pipeline (its place in line, its voice, the backend's stream, the events) is plain
blocking Python, and every wait in it goes through one of three primitives: a concurrent
Future (`wait_future`: the model thread's `EngineLoop.call`), a Handoff item (a request's
outbox), a `Condition` (admission, text in pieces). `run_awaiting(fn)` runs `fn` in a greenlet
on the event loop's own thread; when the code inside reaches one of those waits, the greenlet
switches back to the loop, which awaits it (the producer sets an asyncio future through
`call_soon_threadsafe`) and then switches back in. So a request touches two threads: the event
loop and the model thread whose output it awaits. No worker thread per request, and each of
its generators is advanced on the loop's thread alone. The same code on a plain thread (the
page's Gradio handlers, `model.stream`) blocks as before.

Never switch out while holding a lock: every greenlet of the loop runs on the loop's one thread,
which a lock taken in one of them would hold for all of them. The three waits release theirs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import greenlet

T = TypeVar("T")
_DONE = object()


class _Awaiting(greenlet.greenlet):
    """A greenlet whose waits the event loop `loop` awaits (run_awaiting)."""

    def __init__(self, run: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(run)
        self.loop = loop


class _Wait:
    """What a greenlet hands its driver: the awaitable to await before it goes on."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


def awaiting_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop that awaits this code's waits; None on a plain thread (waits block)."""
    current = greenlet.getcurrent()
    return current.loop if isinstance(current, _Awaiting) else None


def await_here(awaitable: Awaitable[T]) -> T:
    """`awaitable`'s result, awaited by the event loop (only under run_awaiting)."""
    current = greenlet.getcurrent()
    assert isinstance(current, _Awaiting), "await_here outside run_awaiting"
    return current.parent.switch(_Wait(awaitable))


async def run_awaiting(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` run on this event loop's thread, its waits awaited: its result,
    or its exception. A cancel of the awaiting task is raised inside `fn` at its wait."""
    task = _Awaiting(lambda: fn(*args, **kwargs), asyncio.get_running_loop())
    asked = task.switch()
    while not task.dead:
        try:
            value = await asked.awaitable
        except BaseException as error:  # noqa: BLE001 - raised inside, where it waited
            asked = task.throw(error)
        else:
            asked = task.switch(value)
    return asked


async def iterate_awaiting(items: Iterator[T]) -> AsyncIterator[T]:
    """The items of a blocking iterator, each `next` under run_awaiting; closing this closes
    it (its cleanup may wait too)."""
    try:
        while (item := await run_awaiting(next, items, _DONE)) is not _DONE:
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            await run_awaiting(close)


def wait_future(future: Future) -> Any:
    """`future.result()`, awaited when this runs under run_awaiting."""
    loop = awaiting_loop()
    if loop is None:
        return future.result()
    return await_here(asyncio.wrap_future(future, loop=loop))


def waker(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Future, Callable[[], None]]:
    """(an asyncio future on `loop`, a function any thread calls to set it)."""
    woken = loop.create_future()

    def set_woken() -> None:
        if not woken.done():
            woken.set_result(True)

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(set_woken)
        except RuntimeError:  # the loop closed (server shutdown): no one is waiting
            pass

    return woken, wake


async def woken_within(woken: asyncio.Future, timeout: float | None) -> bool:
    """True once `woken` is set; False when `timeout` passed first."""
    try:
        await asyncio.wait_for(woken, timeout)
    except TimeoutError:
        return False
    return True


class Condition(threading.Condition):
    """A threading.Condition whose `wait`, under run_awaiting, is awaited on the event loop
    (the lock released meanwhile, as a thread's wait does). Every notify wakes every awaiting
    waiter: they re-check their predicate, as a condition's waiters must anyway."""

    def __init__(self, lock: Any = None) -> None:
        super().__init__(lock)
        self._wakes: list[Callable[[], None]] = []

    def wait(self, timeout: float | None = None) -> bool:
        loop = awaiting_loop()
        if loop is None:
            return super().wait(timeout)
        woken, wake = waker(loop)
        self._wakes.append(wake)
        saved = self._release_save()  # type: ignore[attr-defined]
        try:
            return await_here(woken_within(woken, timeout))
        finally:
            self._acquire_restore(saved)  # type: ignore[attr-defined]
            self._wakes.remove(wake)

    def notify(self, n: int = 1) -> None:
        super().notify(n)
        for wake in self._wakes:
            wake()
