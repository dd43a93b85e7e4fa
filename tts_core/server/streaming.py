"""The engine's events on the event loop, for the HTTP and WebSocket routes.

A route runs the engine's blocking calls and iterates its events under `run_awaiting`
(engine/awaiting.py): on the event loop's own thread, each wait for the model thread awaited.
So a request touches the event loop and the model thread, and no worker thread of its own.
When the response ends early (the client disconnected: Starlette cancels the body iterator) the
cancel event is set, which stops the engine and its backend within one backend buffer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager

from ..engine import Engine, EngineBusy, InputError, StreamEvent, SynthesisRequest
from ..engine.awaiting import iterate_awaiting
from .errors import ApiError
from .route_utils import busy_error

log = logging.getLogger(__name__)


async def events_of(
    events: Iterator[StreamEvent], cancel: threading.Event | None = None
) -> AsyncIterator[StreamEvent]:
    """`events` (chain_events's) on the event loop; closing this early (or an error) closes
    them and sets `cancel`."""
    ended = False
    try:
        async with aclosing(iterate_awaiting(events)) as awaited:
            async for event in awaited:
                yield event
        ended = True
    finally:
        if not ended and cancel is not None:  # closed early, or an error: stop the synthesis
            cancel.set()


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
