"""POST /v1/audio/speech's response: the engine's events -> the encoder -> bytes, streamed or
whole (a client gone meanwhile cancels), or vLLM-Omni's SSE events (speech.audio.delta, then
speech.audio.done with OpenAI's usage, or speech.audio.error); all on the event loop."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from typing import Any

from fastapi import Request

from .audio_formats import THREADED_FORMATS, Encoder, make_encoder
from .streaming import events_of

log = logging.getLogger("tts_core.server.openai_api")  # the route's log, as before the split
DISCONNECT_POLL_S = 0.5  # how often a whole response's client is checked while it is made
_END = object()


async def whole_body(
    body: AsyncIterator[bytes], cancel: threading.Event, request: Request
) -> bytes:
    """`body` gathered into one buffer; a client that goes away meanwhile cancels the
    synthesis (as a streamed one does)."""
    pieces: list[bytes] = []

    async def gather() -> None:
        async for data in body:
            pieces.append(data)

    work = asyncio.ensure_future(gather())
    try:
        while not work.done():
            await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
            if not work.done() and await request.is_disconnected():
                cancel.set()
        await work
    finally:
        if not work.done():  # this route was cancelled: stop the body too
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
    return b"".join(pieces)


async def speech_bytes(
    first,
    events,
    response_format: str,
    sse: bool,
    rate: int,  # noqa: ANN001
    frame_samples: int,
    cancel: threading.Event,
    streamed: bool = True,
) -> AsyncIterator[bytes]:
    """`first` (already taken, or None) then the rest of the engine's `events` -> encoder ->
    bytes (or SSE events), each as soon as it exists: the engine's events are awaited on the
    event loop (streaming.events_of). PCM and WAV are encoded here, an event's bytes yielded
    before the next event is awaited: the model thread's hand-off is the one wake-up a chunk
    costs the loop (a task and a queue between them cost two loop passes and a cross-thread
    wake-up more a chunk). An ffmpeg encoder's bytes, which its reader thread hands over, come
    through a queue. Closing this early sets `cancel` and closes `events` (the engine's slot
    back at once)."""

    def encoding(put: Callable[[bytes], None]) -> tuple[Encoder, AsyncIterator[None]]:
        """An encoder whose output goes to `put`, and the steps that feed it (_encode)."""
        encoder = make_encoder(
            response_format, _sink(put, sse, response_format), rate, streamed=streamed
        )
        return encoder, _encode(first, events, encoder, put, sse, frame_samples, cancel)

    pieces = (_threaded if response_format in THREADED_FORMATS else _inline)(encoding)
    try:
        async with aclosing(pieces):
            async for data in pieces:
                yield data
    finally:
        cancel.set()  # normal end: a no-op; early end: stops the synthesis
        events.close()  # when nothing was awaited yet: the engine's slot back now


Encoding = Callable[[Callable[[bytes], None]], tuple[Encoder, AsyncIterator[None]]]


async def _inline(encoding: Encoding) -> AsyncIterator[bytes]:
    """speech_bytes of an encoder that runs on the loop: its bytes after each event."""
    pending: list[bytes] = []
    encoder, steps = encoding(pending.append)
    try:
        async with aclosing(steps):
            async for _ in steps:
                while pending:
                    yield pending.pop(0)
    finally:
        encoder.close()
    for data in pending:  # the end: a WAV's header, SSE's done or error
        yield data


async def _threaded(encoding: Encoding) -> AsyncIterator[bytes]:
    """speech_bytes of an ffmpeg encoder: its bytes as its reader thread hands them over,
    while a task of their own feeds it the events."""
    loop = asyncio.get_running_loop()
    out: asyncio.Queue = asyncio.Queue()

    def put(data: object) -> None:  # from the loop, or from the encoder's reader thread
        loop.call_soon_threadsafe(out.put_nowait, data)

    async def encode() -> None:
        encoder, steps = encoding(put)
        try:
            async with aclosing(steps):
                async for _ in steps:
                    pass
        finally:
            encoder.close()
            put(_END)

    work = asyncio.ensure_future(encode())
    try:
        while (data := await out.get()) is not _END:
            yield data
        await work  # its error, after its last bytes
    finally:
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)


def _sink(put: Callable[[bytes], None], sse: bool, response_format: str) -> Callable:
    """The encoder's output as it goes out: the bytes, or SSE's delta events of them."""
    if not sse:
        return put
    return lambda data: put(
        _sse("speech.audio.delta", audio=_b64(data), response_format=response_format)
    )


async def _encode(
    first,  # noqa: ANN001 - a StreamEvent or None
    events: Iterator[Any],
    encoder: Encoder,
    put: Callable[[bytes], None],
    sse: bool,
    frame_samples: int,
    cancel: threading.Event,
) -> AsyncIterator[None]:
    """Feed `first` and every event to `encoder` (its bytes to its sink), a step after each;
    then its end (and SSE's done); an error is raised, or with SSE `put` as its event."""
    stats: dict = {}
    samples = 0
    try:
        if first is not None:
            encoder.feed(first.audio)
            stats, samples = first.stats, first.audio.size
            yield
        async with aclosing(events_of(events, cancel)) as awaited:
            async for event in awaited:
                encoder.feed(event.audio)
                stats, samples = event.stats, samples + event.audio.size
                yield
        if cancel.is_set():
            return
        encoder.finish()
        if sse:
            put(_sse("speech.audio.done", usage=_usage(samples, frame_samples), stats=stats))
    except Exception as exc:
        if not sse:
            raise
        log.exception("speech stream failed")
        error = {"message": str(exc), "type": "server_error", "param": None, "code": 500}
        put(_sse("speech.audio.error", error=error))


def _sse(kind: str, **fields: Any) -> bytes:
    """One event as vLLM-Omni sends it: its name on an `event:` line, then the JSON."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


def _usage(samples: int, frame_samples: int) -> dict[str, int]:
    """OpenAI's usage of speech.audio.done: the codec frames made (the last one partly heard
    counts whole); the input is not tokenized here, so its tokens are not counted (0)."""
    frames = -(-samples // max(1, frame_samples))
    return {"input_tokens": 0, "output_tokens": frames, "total_tokens": frames}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
