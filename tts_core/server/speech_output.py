"""POST /v1/audio/speech's response: the engine's events -> the encoder -> bytes, streamed or
whole (a client gone meanwhile cancels), or vLLM-Omni's SSE events (speech.audio.delta, then
speech.audio.done with OpenAI's usage, or speech.audio.error); all on the event loop."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import Request

from .audio_formats import make_encoder
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
    event loop (streaming.events_of), and an ffmpeg encoder's output, which its reader thread
    hands over, too. Closing this early sets `cancel` and closes `events` (the engine's slot
    back at once)."""
    loop = asyncio.get_running_loop()
    out: asyncio.Queue = asyncio.Queue()

    def put(data: object) -> None:  # from the loop, or from an ffmpeg encoder's reader
        loop.call_soon_threadsafe(out.put_nowait, data)

    def put_delta(data: bytes) -> None:
        put(_sse("speech.audio.delta", audio=_b64(data), response_format=response_format))

    async def encode() -> None:
        encoder = make_encoder(response_format, put_delta if sse else put, rate, streamed=streamed)
        stats: dict = {}
        samples = 0
        try:
            if first is not None:
                encoder.feed(first.audio)
                stats, samples = first.stats, first.audio.size
            async with aclosing(events_of(events, cancel)) as awaited:
                async for event in awaited:
                    encoder.feed(event.audio)
                    stats, samples = event.stats, samples + event.audio.size
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
        finally:
            encoder.close()
            put(_END)

    work = asyncio.ensure_future(encode())
    try:
        while (data := await out.get()) is not _END:
            yield data
        await work  # its error, after its last bytes
    finally:
        cancel.set()  # normal end: a no-op; early end: stops the synthesis
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
        events.close()  # when `encode` never started: the engine's slot back now


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
