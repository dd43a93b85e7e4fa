"""OpenAI-compatible speech API: POST /v1/audio/speech and GET /v1/models (the voice routes:
voice_routes.py; the text-stream WebSocket: speech_ws.py). The request's fields, formats, knobs,
vLLM-Omni's cloning fields and SSE events: docs/api.md and README.md beside this file; the
body and its checks are speech_body.py's, the response's bytes and events speech_output.py's.
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
    build_requests,
    parse_speech_body,
    speech_reference,
    speech_task,
)
from .speech_output import speech_bytes, whole_body
from .speech_ws import add_speech_stream_route
from .state import ServerState
from .streaming import chain_events, engine_errors, open_streams
from .voice_routes import add_voice_routes


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
            # a seed's bytes follow the torch thread count (float sums)
            info["torch_threads"] = _torch_threads(engine)
            replicas = getattr(engine.backend, "replicas", None)
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
