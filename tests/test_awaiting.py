"""engine/awaiting.py: the engine's blocking code run on an event loop, each wait awaited.

Each test runs blocking-style code under `run_awaiting` and checks that it ran on the loop's
own thread, that its waits let the loop run other work meanwhile (the proof: a second task on
the same loop makes the progress the first waits for), and that results, errors and cancels
cross the switch. Bounded by events: every wait ends on what another task or thread does.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future

import pytest

from tts_core.engine.awaiting import Condition, iterate_awaiting, run_awaiting, wait_future
from tts_core.engine.handoff import Handoff


def run(coroutine):  # noqa: ANN001, ANN201
    return asyncio.run(coroutine)


def test_a_handoff_item_is_awaited_and_put_by_another_task_of_the_same_loop():
    """A blocking `get` on the loop's thread would never return here: the put comes from
    another task of the same loop, which runs only while the first awaits."""
    handoff = Handoff()

    async def main() -> tuple[object, int, int]:
        async def producer() -> None:
            handoff.put("chunk")
            handoff.end()

        getting = asyncio.ensure_future(
            run_awaiting(lambda: (handoff.get(), threading.get_ident()))
        )
        await asyncio.sleep(0)  # the getter is waiting now
        await producer()
        item, ident = await getting
        return item, ident, threading.get_ident()

    item, ident, loop_ident = run(main())
    assert item == "chunk" and ident == loop_ident


def test_a_handoff_from_another_thread_wakes_the_loop_and_ends_with_the_producers_error():
    handoff = Handoff()
    go = threading.Event()

    def produce() -> None:
        go.wait()
        handoff.put(1)
        handoff.end(ValueError("the model failed"))

    threading.Thread(target=produce, daemon=True).start()

    async def main() -> list[object]:
        got: list[object] = []

        def consume() -> None:
            go.set()  # from inside the wait's greenlet: the producer starts now
            for item in handoff:
                got.append(item)

        with pytest.raises(ValueError, match="the model failed"):
            await run_awaiting(consume)
        return got

    assert run(main()) == [1]


def test_an_awaited_get_times_out_as_a_blocking_one():
    async def main() -> None:
        await run_awaiting(Handoff().get, 0.0)

    with pytest.raises(queue.Empty):
        run(main())


def test_a_future_of_another_thread_is_awaited():
    future: Future = Future()

    async def main() -> object:
        waiting = asyncio.ensure_future(run_awaiting(wait_future, future))
        await asyncio.sleep(0)
        threading.Thread(target=future.set_result, args=("voice",), daemon=True).start()
        return await waiting

    assert run(main()) == "voice"


def test_a_condition_wait_releases_its_lock_and_is_notified_by_another_task():
    """Two waiters on the loop's one thread and a notifier task: a wait that kept the lock,
    or blocked the thread, would never let the notifier in."""
    cond = Condition()
    state = {"open": False}

    def wait_open() -> bool:
        with cond:
            while not state["open"]:
                cond.wait(None)
            return True

    async def main() -> list[bool]:
        waiters = [asyncio.ensure_future(run_awaiting(wait_open)) for _ in range(2)]
        await asyncio.sleep(0)
        with cond:  # not held by the waiting greenlets
            state["open"] = True
            cond.notify_all()
        return await asyncio.gather(*waiters)

    assert run(main()) == [True, True]


def test_a_condition_wait_times_out():
    cond = Condition()

    def wait() -> bool:
        with cond:
            return cond.wait(0.0)

    async def main() -> bool:
        return await run_awaiting(wait)

    assert run(main()) is False


def test_a_cancel_is_raised_where_the_code_waits_and_its_cleanup_runs():
    handoff = Handoff()
    cleaned = []

    def wait_forever() -> None:
        try:
            handoff.get()
        finally:
            cleaned.append(True)

    async def main() -> None:
        task = asyncio.ensure_future(run_awaiting(wait_forever))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert cleaned == [True]


def test_a_generator_is_iterated_on_the_loop_and_closed_early():
    handoff = Handoff()
    closed = []

    def items():  # noqa: ANN202
        try:
            while True:
                yield handoff.get(), threading.get_ident()
        finally:
            closed.append(True)

    async def main() -> list[tuple[str, int]]:
        got = []
        for piece in ("a", "b"):
            handoff.put(piece)
        stream = iterate_awaiting(items())
        async for item in stream:
            got.append(item)
            if len(got) == 2:
                break
        await stream.aclose()
        return [(item, ident == threading.get_ident()) for item, ident in got]

    assert run(main()) == [("a", True), ("b", True)]
    assert closed == [True]


def test_off_the_loop_the_same_code_blocks_as_before():
    """On a plain thread (the page's handlers, model.stream) nothing is awaited."""
    handoff, cond = Handoff(), Condition()
    threading.Timer(0.0, lambda: (handoff.put("x"), handoff.end())).start()
    assert list(handoff) == ["x"]
    with cond:
        assert cond.wait(0.0) is False
