"""POST /v1/audio/speech's response: the engine's events -> the encoder -> bytes, streamed or
whole (a client gone meanwhile cancels), or vLLM-Omni's SSE events (speech.audio.delta, then
speech.audio.done with OpenAI's usage, or speech.audio.error)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import threading
from typing import Any

from fastapi import Request

from .audio_formats import make_encoder

log = logging.getLogger("tts_core.server.openai_api")  # the route's log, as before the split
DISCONNECT_POLL_S = 0.5  # how often a whole response's client is checked while it is made


async def whole_body(produce, cancel: threading.Event, request: Request) -> bytes:  # noqa: ANN001
    """Run `produce` on a worker thread into one buffer; a client that goes away meanwhile
    cancels the synthesis (as a streamed one does)."""
    pieces: list[bytes] = []
    work = asyncio.ensure_future(asyncio.to_thread(produce, pieces.append, cancel))
    while not work.done():
        await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
        if not work.done() and await request.is_disconnected():
            cancel.set()
    await work
    return b"".join(pieces)


def make_producer(first, events, response_format: str, sse: bool, rate: int,  # noqa: ANN202, ANN001
                  frame_samples: int, streamed: bool = True):  # fmt: skip
    """The worker-thread body: `first` (already taken, or None) then the rest of the engine's
    `events` generator -> encoder -> emitted bytes (or SSE events); closes `events` at the end,
    which gives the engine's slot back at once."""

    def produce(emit, cancel: threading.Event) -> None:  # noqa: ANN001
        sink = (lambda data: emit(_sse("speech.audio.delta", audio=_b64(data),
                                       response_format=response_format))) if sse else emit  # fmt: skip
        encoder = make_encoder(response_format, sink, rate, streamed=streamed)
        stats: dict = {}
        samples = 0
        try:
            for event in itertools.chain([first] if first is not None else [], events):
                encoder.feed(event.audio)
                stats, samples = event.stats, samples + event.audio.size
            if cancel.is_set():
                return
            encoder.finish()
            if sse:
                emit(_sse("speech.audio.done", usage=_usage(samples, frame_samples), stats=stats))
        except Exception as exc:
            if not sse:
                raise
            log.exception("speech stream failed")
            error = {"message": str(exc), "type": "server_error", "param": None, "code": 500}
            emit(_sse("speech.audio.error", error=error))
        finally:
            events.close()
            encoder.close()

    return produce


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
