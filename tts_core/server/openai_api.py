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

vLLM-Omni's fields, so that its clients work unchanged: `ref_audio` (the clip itself, a base64
data URL "data:audio/wav;base64,..."; a URL is never fetched, so no request makes this server
reach elsewhere; decoded with the limits of an uploaded voice) speaks with that clip instead of
a saved `voice` (then optional, and ignored when both are sent); `ref_text` its transcript;
`x_vector_only_mode` true leaves the transcript out (the voice from the clip alone, also for a
saved voice); `task_type` "Base" (voice cloning, what this server does; any other is a 400).
As in vLLM-Omni, `stream: true` without a `stream_format` streams SSE events: each an `event:`
line and a `data:` line, `speech.audio.delta` {audio, response_format}, then
`speech.audio.done` {usage: output_tokens = codec frames made, input tokens not counted (0);
stats: ours}, or `speech.audio.error` {error: {message, type, param, code}} instead of done.
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
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from ..audio import SAMPLE_RATE
from ..audio.decode import AudioDecodeError, DataUrlTooLarge, base64_length, decode_data_url
from ..engine import Engine, InputError, Limits, SynthesisParams, SynthesisRequest
from ..engine.knobs import Knob, backend_knobs, knob_defaults, shared_knobs
from ..engine.validation import prepare_reference, printable
from .audio_formats import CONTENT_TYPES, make_encoder
from .errors import ApiError
from .route_utils import (
    MAX_JSON_BYTES,
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
from .voices import Viewer

# the engine's field names -> this API's
API_PARAMS = {"text": "input", "reference": "voice", "reference_text": "voice"}
REF_PARAMS = {"text": "input", "reference": "ref_audio", "reference_text": "ref_text"}
TASK_TYPES = ("Base",)  # vLLM-Omni's voice cloning; CustomVoice / VoiceDesign: other checkpoints

log = logging.getLogger(__name__)


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = "tts-1"
    input: str
    voice: str | dict[str, Any] | None = None  # may be left out when ref_audio is given
    response_format: Literal["wav", "pcm", "mp3", "opus", "flac", "aac"] = "mp3"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    stream: bool = True  # False: sent whole when done (exact sizes, Content-Length)
    instructions: str | None = None
    language: str = "auto"
    # vLLM-Omni's voice cloning fields (see the module's docstring)
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    task_type: str | None = None
    # and the knobs, by name: read from the same JSON object by request_values (route_utils)

    @model_validator(mode="before")
    @classmethod
    def _stream_means_sse(cls, data: Any) -> Any:
        """vLLM-Omni: `stream: true` with no (or a null) stream_format asks for SSE events."""
        if isinstance(data, dict) and data.get("stream_format") is None:
            data = {k: v for k, v in data.items() if k != "stream_format"}
            if data.get("stream") is True:
                data["stream_format"] = "sse"
        return data

    @field_validator("voice")
    @classmethod
    def _voice_name(cls, value: str | dict[str, Any] | None) -> str | None:
        if value is None:
            return None
        name = value.get("id") if isinstance(value, dict) else value
        if not isinstance(name, str) or not name.strip():
            raise ValueError("voice must be a voice name or an object with an 'id'")
        return name.strip()

    @field_validator("task_type")
    @classmethod
    def _task_type(cls, value: str | None) -> str | None:
        if value is not None and value not in TASK_TYPES:
            raise ValueError(f"'{value}' is not served here: this server clones voices "
                             "(task_type 'Base', with ref_audio or a saved voice)")  # fmt: skip
        return value


def make_openai_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/audio/speech")
    @api_errors
    async def speech(request: Request):  # noqa: ANN202 - StreamingResponse | JSONResponse
        state.config.access.check(request, api=True)
        limit = MAX_JSON_BYTES + base64_length(state.config.max_upload_bytes)  # + a ref_audio
        payload = await read_json(request, limit)
        body = parse_speech_body(payload, state.config.max_input_chars)
        params = SynthesisParams(body.language, **request_values(payload, state.slot))
        engine = state.engine
        limits = engine.config.limits
        clip, transcript, names = await speech_reference(state, body, state.api_viewer(request),
                                                         limits)  # fmt: skip
        requests = build_requests(body.input, params, clip, transcript, limits.max_chars)
        cancel = threading.Event()
        with engine_errors(names):
            streams = await asyncio.to_thread(open_streams, engine, requests, cancel)
            # the first event before any byte: a request the model itself refuses (e.g. a
            # prompt longer than its cache) is then a 400, not a response cut off midway
            events = chain_events(streams, cancel)
            first = await on_own_thread(next, events, None)  # may wait in line: see there
        sse = body.stream_format == "sse"
        whole = not body.stream and not sse
        produce = _producer(first, events, body.response_format, sse, engine.sample_rate,
                            engine.backend.frame_samples, streamed=not whole)  # fmt: skip
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
        replicas = getattr(engine.backend, "replicas", None) if engine is not None else None
        if replicas is not None:  # --replicas: their states, and the requests each answered
            info["replicas"] = await asyncio.to_thread(replicas)
        data[-1]["info"] = info
        return JSONResponse({"object": "list", "data": data})

    add_voice_routes(router, state)
    from .speech_ws import add_speech_stream_route  # it imports this module: here, not above

    add_speech_stream_route(router, state)  # WebSocket /v1/audio/speech/stream (text in pieces)
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
    if body.voice is None and body.ref_audio is None:
        raise ApiError(400, "voice: give a voice name, or the clip to clone as ref_audio.",
                       "voice", "invalid_value")  # fmt: skip
    if body.ref_text is not None and body.ref_audio is None:
        raise ApiError(400, "ref_text is the transcript of ref_audio: send the clip with it.",
                       "ref_text", "invalid_value")  # fmt: skip
    return body


async def speech_reference(
    state: ServerState, body: SpeechBody, viewer: Viewer, limits: Limits
) -> tuple[np.ndarray, str | None, dict[str, str]]:
    """(clip: (N,) float32 at SAMPLE_RATE, transcript, the API's names of the engine's fields
    for errors): `ref_audio` + `ref_text` when given, else the saved voice `voice` names (404
    when unknown). `x_vector_only_mode` leaves the transcript out."""
    if body.ref_audio is not None:
        with_text = body.ref_text is not None and not body.x_vector_only_mode
        clip = await asyncio.to_thread(decode_ref_audio, body.ref_audio,
                                       state.config.max_upload_bytes, limits, with_text)  # fmt: skip
        transcript, names = body.ref_text, REF_PARAMS
    else:
        voice, clip = await load_voice(state, body.voice, viewer)
        transcript, names = voice.transcript, API_PARAMS
    return clip, (None if body.x_vector_only_mode else transcript), names


def decode_ref_audio(value: str, max_bytes: int, limits: Limits, with_text: bool) -> np.ndarray:
    """A ref_audio data URL -> its clip, checked as an uploaded voice is (size, format,
    length; too long with a transcript: refused, without: cut): 400 / 413 naming ref_audio."""
    try:
        data = decode_data_url(value, max_bytes)
        clip, _notices = prepare_reference(data, limits, with_text)
    except DataUrlTooLarge as exc:
        raise ApiError(413, f"ref_audio: {exc}", "ref_audio", "file_too_large") from None
    except AudioDecodeError as exc:
        raise ApiError(400, f"ref_audio: {exc}", "ref_audio", "invalid_value") from None
    except InputError as exc:
        raise ApiError(400, str(exc), "ref_audio", "invalid_value") from None
    assert clip is not None  # decode_data_url refuses an empty clip
    return clip


def build_requests(
    text: str, params: SynthesisParams, clip: np.ndarray, transcript: str | None, max_chars: int
) -> list[SynthesisRequest]:
    """One engine request per piece of the (cleaned) input, each with `params`; the clip was
    read once, into memory."""
    return [
        SynthesisRequest(piece, (SAMPLE_RATE, clip), transcript, params)
        for piece in split_text(text, max_chars)
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


def _producer(first, events, response_format: str, sse: bool, rate: int, frame_samples: int,  # noqa: ANN202, ANN001
              streamed: bool = True):  # fmt: skip
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
