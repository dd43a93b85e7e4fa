"""Bridge from the (blocking) engine to an async HTTP response body.

A worker thread runs the synthesis and hands each piece of output to the event loop through
the engine's Handoff, so bytes go out the moment they exist (no polling). When the response
ends early (the client disconnected: Starlette cancels the body iterator) the cancel event is
set, which stops the engine and its backend within one backend buffer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, contextmanager

from ..engine import Engine, EngineBusy, InputError, StreamEvent, SynthesisRequest
from ..engine.handoff import run_on_thread
from .errors import ApiError
from .route_utils import busy_error

log = logging.getLogger(__name__)

Emit = Callable[[object], None]


async def run_in_thread(
    produce: Callable[[Emit, threading.Event], None], cancel: threading.Event
) -> AsyncIterator[object]:
    """Yield what `produce(emit, cancel)` emits on its worker thread, as it is emitted.

    Raises the worker's exception after its last item. Closing or cancelling this iterator
    sets `cancel` (and returns without waiting for the worker, which stops on its own).
    """
    handoff = run_on_thread(lambda put: produce(put, cancel), "tts-http-stream")
    try:
        async for item in handoff.drain():
            yield item
    finally:
        cancel.set()  # normal end: no-op for the finished worker; early end: stop synthesis


async def on_own_thread(fn: Callable[..., object], *args: object) -> object:
    """`await fn(*args)` run on a thread of its own. For calls that may wait for a place in the
    engine's line: on asyncio's shared pool (cpu + 4 threads) such waits can take every thread
    while the request at the head of the line, whose call is queued behind them, never runs."""
    handoff = run_on_thread(lambda put: put(fn(*args)), "tts-first-event")
    async with aclosing(handoff.drain()) as results:
        async for result in results:
            return result
    raise RuntimeError("on_own_thread: the worker ended without a result")  # not reached


def open_streams(
    engine: Engine, requests: list[SynthesisRequest], cancel: threading.Event
) -> list[Iterator[StreamEvent]]:
    """Take a place in line and validate every request now (EngineBusy, InputError); nothing
    runs until iterated. On an error the places already taken are given back."""
    streams: list[Iterator[StreamEvent]] = []
    try:
        for request in requests:
            streams.append(engine.stream(request, cancel))
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    return streams


@contextmanager
def engine_errors(params: dict[str, str] | None = None) -> Iterator[None]:
    """InputError -> 400 naming the field (engine names mapped through `params`);
    EngineBusy -> 503 with Retry-After."""
    try:
        yield
    except InputError as exc:
        param = (params or {}).get(exc.param, exc.param)
        raise ApiError(400, str(exc), param, "invalid_value") from None
    except EngineBusy as exc:
        raise busy_error(exc) from None


def chain_events(
    streams: list[Iterator[StreamEvent]], cancel: threading.Event
) -> Iterator[StreamEvent]:
    """The events of several streams in a row (a long text cut in pieces); stops on cancel."""
    try:
        for stream in streams:
            for event in stream:
                yield event
                if cancel.is_set():
                    return
    finally:
        for stream in streams:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # runs the engine's cleanup (releases its slot) at once
