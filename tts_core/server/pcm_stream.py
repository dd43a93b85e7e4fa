"""POST /tts_stream/pcm: the page's low-latency player reads raw PCM as it is generated.

Request JSON: the page's fields (README.md beside this file); `reference` is accepted only
under Gradio's upload folder or the app's assets. Errors found before the response starts are
a 400 with the OpenAI error JSON. Response: application/octet-stream of frames, each an 8-byte
header (uint32 LE type, uint32 LE payload length) and the payload:
    1 PCM   int16 LE mono samples at the model's rate, header X-Sample-Rate (one chunk)
    2 STATS JSON: the engine's stats after that chunk (the last one has "done": true)
    3 ERROR JSON {"message": ...}: the synthesis failed after the response started
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ..audio import SAMPLE_RATE
from ..engine import BackendError, EngineBusy, InputError, SynthesisParams, SynthesisRequest
from ..engine.awaiting import run_awaiting
from ..engine.knobs import served_knobs
from ..engine.requests import ModelVoice
from ..engine.streams import StreamEvent
from .audio_formats import pcm16_bytes
from .errors import ApiError
from .route_utils import api_errors, read_json, request_values
from .state import ServerState
from .streaming import chain_events, engine_errors, events_of, open_streams
from .text_split import done_at_the_end, split_request
from .voice_routes import load_voice

FRAME_PCM, FRAME_STATS, FRAME_ERROR = 1, 2, 3
log = logging.getLogger(__name__)


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<II", kind, len(payload)) + payload


def make_pcm_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post(state.config.pcm_route)
    @api_errors
    async def pcm_stream(request: Request) -> StreamingResponse:
        state.config.access.check(request, api=False)  # the page's own route: no API key
        payload = await read_json(request)
        if not isinstance(payload, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        engine, cancel = state.engine, threading.Event()
        with engine_errors():  # a place in line before a saved voice's clip is read
            engine.admission.hold(cancel)
        try:
            synthesis = await page_request(state, payload)
            with engine_errors():
                # the deployment's one text limit (as /v1 and the Gradio API), in pieces the
                # engine takes (text_split.py)
                pieces = split_request(
                    synthesis, state.config.max_input_chars, engine.config.limits.max_chars
                )
                # on the event loop, a voice made on the model thread awaited (awaiting.py)
                streams = await run_awaiting(open_streams, engine, pieces, cancel)
        finally:
            engine.admission.drop_hold(cancel)  # the request took it, unless it failed
        headers = {
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "X-Sample-Rate": str(state.engine.sample_rate),
        }
        body = _frames(chain_events(streams, cancel), len(streams), cancel)
        return StreamingResponse(body, media_type="application/octet-stream", headers=headers)

    return router


async def page_request(state: ServerState, payload: dict) -> SynthesisRequest:
    """The page's JSON -> a SynthesisRequest (knob values checked now, the rest by the engine).
    On a checkpoint that makes its own voices (Qwen3-TTS CustomVoice / VoiceDesign) the voice
    is `speaker` and `instructions` (ModelVoice); the clip fields are not read."""
    language = str(payload.get("language") or "auto")
    # the page sends its hidden controls too: only the served model's knobs are set
    values = SynthesisParams(language, **request_values(payload, state.slot))
    params = values.only(served_knobs(state.engine.backend))
    with engine_errors():
        spec = model_voice_of(
            getattr(state.engine.backend, "task_type", "Base"),
            payload.get("speaker"),
            payload.get("instructions"),
        )
    if spec is not None:
        return SynthesisRequest(payload.get("text", ""), params=params, model_voice=spec)
    reference_text = payload.get("reference_text") or None
    voice_name = payload.get("voice")
    if voice_name:
        viewer = state.page_viewer(payload.get("owner_key"))  # the browser's key
        voice, clip = await load_voice(state, str(voice_name), viewer)
        return SynthesisRequest(
            payload.get("text", ""), (SAMPLE_RATE, clip), voice.transcript, params
        )
    reference = trusted_reference(payload.get("reference"), state.upload_roots)
    return SynthesisRequest(payload.get("text", ""), reference, reference_text, params)


def model_voice_of(task_type: str, speaker: object, instructions: object) -> ModelVoice | None:
    """The page's `speaker` / `instructions` as the served checkpoint reads them: None on a Base
    (cloning) model, where a value in them is an InputError; else a ModelVoice (the engine
    checks it: a preset the checkpoint lacks, instructions a 0.6B refuses, ...)."""
    if task_type == "Base":
        if speaker or instructions:  # not dropped silently: this model would not read them
            raise InputError(
                "This checkpoint clones voices from a clip: speaker and "
                "instructions are for a Qwen3-TTS CustomVoice or VoiceDesign "
                "checkpoint.",
                "speaker" if speaker else "instructions",
            )
        return None
    speaker = str(speaker).strip() if speaker and task_type == "CustomVoice" else None
    instruct = str(instructions).strip() if instructions else None
    return ModelVoice(speaker=speaker or None, instruct=instruct or None)


def trusted_reference(value: object, roots: tuple[Path, ...]) -> str | None:
    """A server-side path the page sent, accepted only inside one of `roots`."""
    if isinstance(value, dict):
        value = value.get("path")
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ApiError(400, "reference must be a file path.", "reference", "invalid_value")
    try:
        path = Path(value).resolve()
    except (OSError, ValueError):
        raise ApiError(
            400, "reference is not a valid path.", "reference", "invalid_value"
        ) from None
    if not any(path.is_relative_to(root.resolve()) for root in roots):
        raise ApiError(
            400,
            "The reference clip is not an upload of this page; upload it again.",
            "reference",
            "invalid_value",
        )
    return str(path)


async def _frames(
    events: Iterator[StreamEvent], pieces: int, cancel: threading.Event
) -> AsyncIterator[bytes]:
    """The chained events of the request's `pieces` as the route's frames, on the event loop;
    an error after the response started is an ERROR frame."""
    try:
        async with aclosing(events_of(done_at_the_end(events, pieces), cancel)) as awaited:
            async for event in awaited:
                if event.audio.size:
                    yield frame(FRAME_PCM, pcm16_bytes(event.audio))
                yield frame(FRAME_STATS, json.dumps(event.stats).encode())
    except (InputError, BackendError, EngineBusy) as exc:  # EngineBusy: a busy remote
        yield frame(FRAME_ERROR, json.dumps({"message": str(exc)}).encode())
    except Exception as exc:  # noqa: BLE001 - the page gets a short message, the log all
        log.exception("page stream failed")
        message = f"Internal error ({type(exc).__name__}); see the server log."
        yield frame(FRAME_ERROR, json.dumps({"message": message}).encode())
