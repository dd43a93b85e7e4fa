"""OpenAI-compatible speech API: POST /v1/audio/speech, voices, models.

Request (JSON, OpenAI's `audio.speech.create` fields): model, input (<= 4096 characters),
voice (a name, or {"id": name}), response_format (wav | pcm | mp3 | opus | flac | aac; default
mp3 as OpenAI), speed (only 1.0), stream_format ("audio": the encoded bytes with chunked
transfer as they are generated; "sse": `speech.audio.delta` events with base64 audio, then
`speech.audio.done`), instructions (a Qwen3-TTS CustomVoice model: how to speak; VoiceDesign:
the voice's description; ignored by voice cloning). Extensions: stream (false: the whole file in
one response with its Content-Length, and a WAV with its real sizes instead of "until the end
of the stream"; true, or an explicit stream_format: streamed; not given: a WAV is sent whole
so that a saved file is valid, every other format streams), language, and the knobs by name
(tts_core.backends.request_knobs: seed, first_chunk_frames, chunk_frames; Qwen3-TTS's
temperature, top_k, top_p, repetition_penalty; VoxCPM2's cfg_value, inference_timesteps; and any
the served backend declares), each checked against its declaration (400 naming it); a knob of
another model than the served one is checked, then ignored; a shared one the served model
does not read (Chatterbox's first_chunk_frames, chunk_frames) is a 400 naming it. Audio keeps
the model's native rate (header X-Sample-Rate): `pcm` is raw 16-bit little-endian mono, 24 kHz
for Qwen3-TTS as OpenAI's, 48 kHz for VoxCPM2. GET /v1/models lists the knobs the served model
reads as JSON Schema properties (`info.knobs`) and the torch threads it runs with
(`info.torch_threads`: a seed gives the same bytes at the same thread count; --replicas start
theirs with this process's).

vLLM-Omni's fields, so that its clients work unchanged: `ref_audio` (the clip itself, a base64
data URL "data:audio/wav;base64,..."; a URL is never fetched, so no request makes this server
reach elsewhere; decoded with the limits of an uploaded voice) speaks with that clip instead of
a saved `voice` (then optional, and ignored when both are sent); `ref_text` its transcript;
`x_vector_only_mode` true leaves the transcript out (the voice from the clip alone, also for a
saved voice); `task_type`: "Base" (voice cloning), "CustomVoice" (`voice` = a preset name of
the served CustomVoice checkpoint, `instructions` optional: a 400 on the 0.6B, whose official
code drops them) or "VoiceDesign" (`instructions` = the description); left out, a reference
(ref_audio or a saved voice) means Base and anything else CustomVoice, on a CustomVoice or
VoiceDesign server (VoiceDesign must be named); a task other than the served checkpoint's is a
400 naming both (speech_body.speech_task). These checkpoints' rows use the streaming-text
prompt layout (non_streaming_mode False: the earliest first audio).
As in vLLM-Omni, `stream: true` without a `stream_format` streams SSE events: each an `event:`
line and a `data:` line, `speech.audio.delta` {audio, response_format}, then
`speech.audio.done` {usage: output_tokens = codec frames made, input tokens not counted (0);
stats: ours}, or `speech.audio.error` {error: {message, type, param, code}} instead of done.

Here: the routes. The request's body, checks and voice are speech_body.py's, the response's
bytes and events speech_output.py's (their names importable from here too).
"""

from __future__ import annotations

import asyncio
import threading

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..audio.decode import base64_length
from ..engine import Engine, SynthesisParams
from ..engine.awaiting import run_awaiting
from ..engine.knobs import knob_defaults, served_knobs
from ..engine.requests import seeded
from .audio_formats import CONTENT_TYPES
from .route_utils import MAX_JSON_BYTES, api_errors, read_json, request_values, served_engine
from .speech_body import (
    API_PARAMS,
    REF_PARAMS,
    TASK_TYPES,
    SpeechBody,
    build_requests,
    decode_ref_audio,
    parse_speech_body,
    speech_reference,
    speech_task,
)
from .speech_output import DISCONNECT_POLL_S, speech_bytes, whole_body
from .speech_ws import add_speech_stream_route
from .state import ServerState
from .streaming import chain_events, engine_errors, open_streams
from .voice_routes import add_voice_routes

# the request side (speech_body.py) and the response side (speech_output.py), importable from
# here as before the split
__all__ = [
    "API_PARAMS",
    "DISCONNECT_POLL_S",
    "REF_PARAMS",
    "TASK_TYPES",
    "SpeechBody",
    "build_requests",
    "decode_ref_audio",
    "make_openai_router",
    "parse_speech_body",
    "speech_reference",
]


def make_openai_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/audio/speech")
    @api_errors
    async def speech(request: Request):  # noqa: ANN202 - StreamingResponse | JSONResponse
        state.config.access.check(request, api=True)
        limit = MAX_JSON_BYTES + base64_length(state.config.max_upload_bytes)  # + a ref_audio
        payload = await read_json(request, limit)
        body = parse_speech_body(payload, state.config.max_input_chars)
        # seeded before the input is cut into requests: its pieces share the one seed
        params = seeded(SynthesisParams(body.language, **request_values(payload, state.slot)))
        engine = state.engine
        limits = engine.config.limits
        model_voice = speech_task(body, engine.backend)  # 400 for another checkpoint's task
        cancel = threading.Event()
        with engine_errors():  # a place in line before the clip is read: full, a 503 at once
            engine.admission.hold(cancel)
        try:
            clip, transcript, names = None, None, API_PARAMS  # the model's own voice
            if model_voice is None:
                viewer = state.api_viewer(request)
                clip, transcript, names = await speech_reference(state, body, viewer, limits)
            requests = build_requests(
                body.input, params, clip, transcript, limits.max_chars, model_voice
            )
            with engine_errors(names):  # on the event loop, the voice awaited (awaiting.py)
                streams = await run_awaiting(open_streams, engine, requests, cancel)
        finally:
            engine.admission.drop_hold(cancel)  # its first request took it, unless it failed
        with engine_errors(names):
            # the first event before any byte: a request the model itself refuses (e.g. a
            # prompt longer than its cache) is then a 400, not a response cut off midway
            events = chain_events(streams, cancel)
            first = await run_awaiting(next, events, None)  # its turn in line awaited too
        sse = body.stream_format == "sse"
        whole = body.sent_whole()
        content = speech_bytes(
            first,
            events,
            body.response_format,
            sse,
            engine.sample_rate,
            engine.backend.frame_samples,
            cancel,
            streamed=not whole,
        )
        media = "text/event-stream" if sse else CONTENT_TYPES[body.response_format]
        headers = {
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "X-Sample-Rate": str(engine.sample_rate),
            "X-Seed": str(params.seed),
        }
        if whole:
            data = await whole_body(content, cancel, request)
            return Response(data, media_type=media, headers=headers)
        return StreamingResponse(content, media_type=media, headers=headers)

    @router.get("/v1/models")
    @api_errors
    async def models(request: Request) -> JSONResponse:
        state.config.access.check(request, api=True)
        info = state.slot.info()  # while loading: its status alone
        status = info.pop("status")
        served = info.get("model", status["model"])
        names = [*state.config.model_names, served]
        data = [
            {
                "id": n,
                "object": "model",
                "owned_by": "tts_core",
                "served_model": served,
                "status": status,
            }
            for n in names
        ]
        engine = served_engine(state.slot)
        if engine is not None:  # the knobs this model reads, besides the language
            defaults = knob_defaults(engine.backend)
            info["knobs"] = {
                knob.name: knob.json_schema(defaults.get(knob.name))
                for knob in served_knobs(engine.backend, engine.config.limits.max_chunk_frames)
            }
        if engine is not None:  # a seed's bytes follow the torch thread count (float sums)
            info["torch_threads"] = _torch_threads(engine)
        replicas = getattr(engine.backend, "replicas", None) if engine is not None else None
        if replicas is not None:  # --replicas: their states, and the requests each answered
            info["replicas"] = await asyncio.to_thread(replicas)
        data[-1]["info"] = info
        return JSONResponse({"object": "list", "data": data})

    add_voice_routes(router, state)
    add_speech_stream_route(router, state)  # WebSocket /v1/audio/speech/stream (text in pieces)
    return router


def _torch_threads(engine: Engine) -> int:
    """The torch threads the model runs with: its replicas' (--replicas), else this process's."""
    import torch

    return getattr(engine.backend, "torch_threads", None) or torch.get_num_threads()
