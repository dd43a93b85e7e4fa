"""OpenAI-compatible speech API: POST /v1/audio/speech, voices, models.

Request (JSON, OpenAI's `audio.speech.create` fields): model, input (<= 4096 characters),
voice (a name, or {"id": name}), response_format (wav | pcm | mp3 | opus | flac | aac; default
mp3 as OpenAI), speed (only 1.0), stream_format ("audio": the encoded bytes with chunked
transfer as they are generated; "sse": `speech.audio.delta` events with base64 audio, then
`speech.audio.done`), instructions (ignored). Extensions: stream (default true; false: the
whole file in one response with its Content-Length, and a WAV with its real sizes instead of
"until the end of the stream"), language, and the knobs by name
(tts_core.backends.request_knobs: seed, first_chunk_frames, chunk_frames; Qwen3-TTS's
temperature, top_k, top_p, repetition_penalty; VoxCPM2's cfg_value, inference_timesteps; and any
the served backend declares), each checked against its declaration (400 naming it); a knob of
another model than the served one is checked, then ignored. Audio keeps the model's native
rate (header X-Sample-Rate): `pcm` is raw 16-bit little-endian mono, 24 kHz for Qwen3-TTS as
OpenAI's, 48 kHz for VoxCPM2. GET /v1/models lists the served model's knobs as JSON Schema
properties (`info.knobs`).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import threading
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..audio import SAMPLE_RATE
from ..engine import Engine, SynthesisParams, SynthesisRequest
from ..engine.knobs import Knob, backend_knobs, knob_defaults, shared_knobs
from ..engine.validation import printable
from .audio_formats import CONTENT_TYPES, make_encoder
from .errors import ApiError
from .route_utils import (
    api_errors,
    read_json,
    request_values,
    served_engine,
    validation_to_api_error,
)
from .state import ServerState
from .streaming import chain_events, engine_errors, on_own_thread, open_streams, run_in_thread
from .text_split import split_text
from .voice_routes import add_voice_routes, load_voice
from .voices import NamedVoice

# the engine's field names -> this API's
API_PARAMS = {"text": "input", "reference": "voice", "reference_text": "voice"}

log = logging.getLogger(__name__)


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = "tts-1"
    input: str
    voice: str | dict[str, Any]
    response_format: Literal["wav", "pcm", "mp3", "opus", "flac", "aac"] = "mp3"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    stream: bool = True  # False: sent whole when done (exact sizes, Content-Length)
    instructions: str | None = None
    language: str = "auto"
    # and the knobs, by name: read from the same JSON object by request_values (route_utils)

    @field_validator("voice")
    @classmethod
    def _voice_name(cls, value: str | dict[str, Any]) -> str:
        name = value.get("id") if isinstance(value, dict) else value
        if not isinstance(name, str) or not name.strip():
            raise ValueError("voice must be a voice name or an object with an 'id'")
        return name.strip()


def make_openai_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/audio/speech")
    @api_errors
    async def speech(request: Request):  # noqa: ANN202 - StreamingResponse | JSONResponse
        state.config.access.check(request, api=True)
        payload = await read_json(request)
        body = parse_speech_body(payload, state.config.max_input_chars)
        params = SynthesisParams(body.language, **request_values(payload, state.slot))
        voice, clip = await load_voice(state, body.voice, state.api_viewer(request))
        engine = state.engine
        requests = build_requests(body, params, voice, clip, engine.config.limits.max_chars)
        cancel = threading.Event()
        with engine_errors(API_PARAMS):
            streams = await asyncio.to_thread(open_streams, engine, requests, cancel)
            # the first event before any byte: a request the model itself refuses (e.g. a
            # prompt longer than its cache) is then a 400, not a response cut off midway
            events = chain_events(streams, cancel)
            first = await on_own_thread(next, events, None)  # may wait in line: see there
        sse = body.stream_format == "sse"
        whole = not body.stream and not sse
        produce = _producer(first, events, body.response_format, sse, engine.sample_rate,
                            streamed=not whole)  # fmt: skip
        media = "text/event-stream" if sse else CONTENT_TYPES[body.response_format]
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no",
                   "X-Sample-Rate": str(engine.sample_rate)}  # fmt: skip
        if whole:
            content = await _whole(produce, cancel, request)
            return Response(content, media_type=media, headers=headers)
        return StreamingResponse(run_in_thread(produce, cancel), media_type=media, headers=headers)

    @router.get("/v1/models")
    @api_errors
    async def models(request: Request) -> JSONResponse:
        state.config.access.check(request, api=True)
        info = state.slot.info()  # while loading: its status alone
        status = info.pop("status")
        served = info.get("model", status["model"])
        names = [*state.config.model_names, served]
        data = [{"id": n, "object": "model", "owned_by": "tts_core", "served_model": served,
                 "status": status} for n in names]  # fmt: skip
        engine = served_engine(state.slot)
        if engine is not None:  # the knobs this model reads, besides the language
            defaults = knob_defaults(engine.backend)
            info["knobs"] = {knob.name: knob.json_schema(defaults.get(knob.name))
                             for knob in (*_shared_knobs(engine),
                                          *backend_knobs(engine.backend))}  # fmt: skip
        data[-1]["info"] = info
        return JSONResponse({"object": "list", "data": data})

    add_voice_routes(router, state)
    return router


def parse_speech_body(payload: object, max_input_chars: int) -> SpeechBody:
    try:
        body = SpeechBody.model_validate(payload)
    except ValidationError as exc:
        raise validation_to_api_error(exc) from None
    if not printable(body.input):  # blank, or only control / zero-width characters
        raise ApiError(400, "input must not be empty.", "input", "invalid_value")
    if len(body.input) > max_input_chars:
        raise ApiError(413, f"input is {len(body.input)} characters long; the limit is "
                       f"{max_input_chars}.", "input", "input_too_long")  # fmt: skip
    if body.speed != 1.0:
        raise ApiError(400, "Only speed 1.0 is supported by this server.", "speed",
                       "unsupported_value")  # fmt: skip
    return body


def build_requests(
    body: SpeechBody, params: SynthesisParams, voice: NamedVoice, clip: np.ndarray, max_chars: int
) -> list[SynthesisRequest]:
    """One engine request per piece of the (cleaned) input, each with `params`; the clip was
    read once, into memory."""
    return [
        SynthesisRequest(piece, (SAMPLE_RATE, clip), voice.transcript, params)
        for piece in split_text(body.input, max_chars)
    ]


def _shared_knobs(engine: Engine) -> tuple[Knob, ...]:
    return shared_knobs(engine.config.limits.max_chunk_frames)


DISCONNECT_POLL_S = 0.5  # how often a whole response's client is checked while it is made


async def _whole(produce, cancel: threading.Event, request: Request) -> bytes:  # noqa: ANN001
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


def _producer(first, events, response_format: str, sse: bool, rate: int, streamed: bool = True):  # noqa: ANN202, ANN001
    """The worker-thread body: `first` (already taken, or None) then the rest of the engine's
    `events` generator -> encoder -> emitted bytes (or SSE events); closes `events` at the end,
    which gives the engine's slot back at once."""

    def produce(emit, cancel: threading.Event) -> None:  # noqa: ANN001
        sink = (lambda data: emit(_sse("speech.audio.delta", audio=_b64(data)))) if sse else emit
        encoder = make_encoder(response_format, sink, rate, streamed=streamed)
        stats: dict = {}
        try:
            for event in itertools.chain([first] if first is not None else [], events):
                encoder.feed(event.audio)
                stats = event.stats
            if cancel.is_set():
                return
            encoder.finish()
            if sse:
                emit(_sse("speech.audio.done", stats=stats))
        except Exception as exc:
            if not sse:
                raise
            log.exception("speech stream failed")
            emit(_sse("error", error={"message": str(exc), "type": "server_error"}))
        finally:
            events.close()
            encoder.close()

    return produce


def _sse(kind: str, **fields: Any) -> bytes:
    return f"data: {json.dumps({'type': kind, **fields})}\n\n".encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
