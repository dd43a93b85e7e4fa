"""GET/POST/DELETE /v1/audio/voices and POST /v1/audio/voices/owner_key.

The listing's fields (fits_model, presets), the multipart registration, private voices and the
per-address quotas are described in README.md beside this file. The multipart body is counted
while it arrives and refused past `--max-file-size`.
"""

from __future__ import annotations

import asyncio
from functools import partial

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import FormData, UploadFile

from ..engine import InputError
from ..engine.backend import reference_needs
from ..engine.errors import shown
from .connections import address_key
from .errors import ApiError
from .route_utils import api_errors, read_form, served_engine
from .state import OWNER_HEADER, ServerState
from .voice_fit import fit_json
from .voices import (
    MODEL_VOICE,
    NamedVoice,
    Viewer,
    VoiceDamaged,
    VoiceNotFound,
    VoiceStoreError,
    check_name,
)

FILE_FIELDS = ("file", "audio_sample")
TRANSCRIPT_FIELDS = ("transcript", "reference_text")
FORM_OVERHEAD = 64 * 1024  # multipart boundaries, part headers and the text fields
OWNER_KEY_ROUTE = "/v1/audio/voices/owner_key"
ISSUE_HINT = f"get one with POST {OWNER_KEY_ROUTE}."


def add_voice_routes(router: APIRouter, state: ServerState) -> None:
    @router.get("/v1/audio/voices")
    @api_errors
    async def list_voices(request: Request) -> JSONResponse:
        state.config.access.check(request, api=True)
        voices = await asyncio.to_thread(state.voices.list, state.api_viewer(request))
        engine = served_engine(state.slot)  # None while the model loads
        backend = engine.backend if engine is not None else None
        needs = reference_needs(backend) if backend is not None else None
        data = await asyncio.to_thread(
            lambda: [{**v.as_json(), **fit_json(v, backend)} for v in voices]
        )
        task = getattr(backend, "task_type", "Base")
        if task != "Base":  # the checkpoint speaks its own voices, never a clip (#41)
            why = f"this {task} checkpoint makes its own voices; it does not clone a clip"
            data = [{**voice, "fits_model": False, "unfit_reason": why} for voice in data]
            data = [*preset_voices(backend), *data]
        body = {"object": "list", "data": data}
        if needs is not None:  # what the served model asks of a clip (fits_model follows it)
            body["reference"] = needs.as_json(backend.needs_reference)
        return JSONResponse(body)

    @router.post("/v1/audio/voices")
    @api_errors
    async def register_voice(request: Request) -> JSONResponse:
        state.config.access.check(request, api=True)
        viewer = state.api_viewer(request)
        if not viewer.operator and viewer.owner_key is None:
            raise ApiError(
                400,
                f"This server keeps voices private: send '{OWNER_HEADER}: "
                f"<your key>' to register one (and to use it); {ISSUE_HINT}",
                OWNER_HEADER,
                "owner_required",
            )
        if not viewer.operator and not state.voices.is_issued(viewer.owner_key):
            raise ApiError(
                403,
                f"This {OWNER_HEADER} was not issued by this server; {ISSUE_HINT}",
                OWNER_HEADER,
                "owner_key_not_issued",
            )
        # the client's address is its quota, unless the caller holds the API key (the operator)
        address = None if state.config.access.api_key else _client_address(request)
        limit = state.config.max_upload_bytes
        form = await read_form(request, limit + FORM_OVERHEAD, lambda: _too_large(limit))
        try:
            name, clip, transcript, replace = await _registration(form, limit)
            voice = await _register(state, name, clip, transcript, replace, viewer, address)
        finally:
            await form.close()
        return JSONResponse(voice.as_json(), status_code=201)

    @router.post(OWNER_KEY_ROUTE)
    @api_errors
    async def issue_owner_key(request: Request) -> JSONResponse:
        """A key for this client's voices (the one it sends as X-Voice-Owner kept inside)."""
        state.config.access.check(request, api=True)
        held = request.headers.get(OWNER_HEADER) or None
        key = await asyncio.to_thread(state.voices.issue_owner_key, _client_address(request), held)
        return JSONResponse({"object": "owner_key", "owner_key": key, "header": OWNER_HEADER})

    @router.delete("/v1/audio/voices/{name}")
    @api_errors
    async def delete_voice(request: Request, name: str) -> JSONResponse:
        state.config.access.check(request, api=True)
        viewer = state.api_viewer(request)
        try:
            await asyncio.to_thread(
                state.voices.delete, name, viewer.owner_key, not viewer.operator
            )
        except VoiceNotFound:
            raise ApiError(
                404, f"Unknown voice '{shown(name)}'.", "voice", "voice_not_found"
            ) from None
        except FileExistsError as exc:
            raise ApiError(400, str(exc), "voice", "builtin_voice") from None
        except VoiceStoreError as exc:
            raise _store_error(exc) from None
        return JSONResponse({"id": name, "object": "voice", "deleted": True})


def preset_voices(backend: object) -> list[dict]:
    """A CustomVoice checkpoint's presets as listed voices (`kind` "preset": its own speaker
    embeddings, no clip; `voice` names one on /v1/audio/speech), in the checkpoint's order."""
    instruct = (
        "takes `instructions`"
        if getattr(backend, "instruct_supported", False)
        else "refuses `instructions` (the official model ignores them)"
    )
    return [
        {
            "id": name,
            "object": "voice",
            "kind": "preset",
            "transcript": None,
            "description": f"A preset voice of the served CustomVoice checkpoint; it {instruct}.",
            "status": "ok",
            "reference_seconds": None,
            "fits_model": True,
        }
        for name in getattr(backend, "speakers", ())
    ]


def _client_address(request: Request) -> str:
    return address_key(request.client.host if request.client else None)


async def load_voice(
    state: ServerState, name: str, viewer: Viewer
) -> tuple[NamedVoice, np.ndarray]:
    """A named voice `viewer` may use and its clip, read into memory (a later replace cannot
    change it under a running request). 404 for an unknown name (or another visitor's private
    voice), 500 for a damaged stored voice."""
    try:  # a local WAV of seconds, read in milliseconds: on the event loop, no thread hop
        return state.voices.load(name, viewer)
    except VoiceNotFound:
        known = ", ".join(state.voices.names(viewer))
        raise ApiError(
            404,
            f"Unknown voice '{shown(name)}'. Known voices: {known}; and "
            f"'{MODEL_VOICE}', the model's own voice (no clip).",
            "voice",
            "voice_not_found",
        ) from None
    except VoiceDamaged as exc:
        raise ApiError(500, str(exc), "voice", "voice_damaged") from None


async def _registration(form: FormData, limit: int) -> tuple[str, bytes, str | None, bool]:
    """(name, clip bytes, transcript, replace) from the form, or a 400/413."""
    upload = next((form[k] for k in FILE_FIELDS if isinstance(form.get(k), UploadFile)), None)
    if upload is None:
        raise ApiError(
            400, "Send the reference clip as a file field named 'file'.", "file", "missing_file"
        )
    clip = await upload.read(limit + 1)
    if len(clip) > limit:
        raise _too_large(limit)
    name = _text_field(form, ("name",)) or ""
    try:
        check_name(name.strip())
    except InputError as exc:
        raise ApiError(400, str(exc), "name", "invalid_value") from None
    transcript = _text_field(form, TRANSCRIPT_FIELDS)
    replace = (_text_field(form, ("replace",)) or "").lower() in ("1", "true", "yes")
    return name.strip(), clip, transcript, replace


def _text_field(form: FormData, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = form.get(key)
        if isinstance(value, UploadFile):
            raise ApiError(
                400, f"'{shown(key)}' must be a text field, not a file.", key, "invalid_value"
            )
        if value:
            return value
    return None


async def _register(
    state: ServerState,
    name: str,
    clip: bytes,
    transcript: str | None,
    replace: bool,
    viewer: Viewer,
    address: str | None,
) -> NamedVoice:
    register = partial(
        state.voices.register,
        limits=state.engine.config.limits,
        replace=replace,
        owner_key=viewer.owner_key,
        viewer=viewer,
        address=address,
    )
    try:
        return await asyncio.to_thread(register, name, clip, transcript)
    except InputError as exc:
        param = "transcript" if exc.param == "reference_text" else "file"
        raise ApiError(400, str(exc), param, "invalid_value") from None
    except FileExistsError as exc:
        raise ApiError(409, str(exc), "name", "voice_exists") from None
    except VoiceStoreError as exc:
        raise _store_error(exc) from None


def _store_error(exc: VoiceStoreError) -> ApiError:
    codes = {507: "voice_store_full", 429: "voice_quota_reached"}
    code = codes.get(exc.status, "voice_store_unavailable")
    return ApiError(exc.status, str(exc), None, code)


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"The reference clip is larger than {limit / (1024 * 1024):g} MB.",
        "file",
        "file_too_large",
    )
