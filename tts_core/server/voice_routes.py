"""Voice routes: GET /v1/audio/voices, POST /v1/audio/voices, DELETE /v1/audio/voices/{name}.

Registration is multipart/form-data: `name`, the clip as `file` (or `audio_sample`, OpenAI's
field name), optional `transcript` (or `reference_text`), optional `replace=true`. The clip is
checked like a synthesis reference and stored as 24 kHz mono WAV; answers 201 with the voice.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from ..engine import InputError
from .errors import ApiError
from .route_utils import api_errors
from .state import ServerState
from .voices import VoiceNotFound, check_name

FILE_FIELDS = ("file", "audio_sample")
TRANSCRIPT_FIELDS = ("transcript", "reference_text")


def add_voice_routes(router: APIRouter, state: ServerState) -> None:
    @router.get("/v1/audio/voices")
    @api_errors
    async def list_voices() -> JSONResponse:
        voices = await asyncio.to_thread(state.voices.list)
        return JSONResponse({"object": "list", "data": [v.as_json() for v in voices]})

    @router.post("/v1/audio/voices")
    @api_errors
    async def register_voice(request: Request) -> JSONResponse:
        limit = state.config.max_upload_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit + 64 * 1024:
            raise _too_large(limit)
        form = await request.form(max_files=2, max_fields=10)
        try:
            upload = next((form[k] for k in FILE_FIELDS if isinstance(form.get(k), UploadFile)),
                          None)  # fmt: skip
            if upload is None:
                raise ApiError(400, "Send the reference clip as a file field named 'file'.",
                               "file", "missing_file")  # fmt: skip
            if upload.size is not None and upload.size > limit:
                raise _too_large(limit)
            name = str(form.get("name") or "").strip()
            try:
                check_name(name)
            except InputError as exc:
                raise ApiError(400, str(exc), "name", "invalid_value") from None
            transcript = next((str(form[k]) for k in TRANSCRIPT_FIELDS if form.get(k)), None)
            replace = str(form.get("replace", "")).lower() in ("1", "true", "yes")
            voice = await _register(state, name, upload, transcript, replace)
        finally:
            await form.close()
        return JSONResponse(voice.as_json(), status_code=201)

    @router.delete("/v1/audio/voices/{name}")
    @api_errors
    async def delete_voice(name: str) -> JSONResponse:
        try:
            await asyncio.to_thread(state.voices.delete, name)
        except VoiceNotFound:
            raise ApiError(404, f"Unknown voice '{name}'.", "voice", "voice_not_found") from None
        except FileExistsError as exc:
            raise ApiError(400, str(exc), "voice", "builtin_voice") from None
        return JSONResponse({"id": name, "object": "voice", "deleted": True})


async def _register(state: ServerState, name: str, upload: UploadFile, transcript, replace):  # noqa: ANN001, ANN202
    suffix = Path(upload.filename or "clip").suffix[:10]
    with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
        tmp.write(await upload.read())
        tmp.flush()
        limits = state.engine.config.limits
        try:
            return await asyncio.to_thread(
                state.voices.register, name, tmp.name, transcript, limits, replace
            )
        except InputError as exc:
            raise ApiError(400, str(exc), "file", "invalid_value") from None
        except FileExistsError as exc:
            raise ApiError(409, str(exc), "name", "voice_exists") from None


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"The reference clip is larger than {limit // (1024 * 1024)} MB.",
                    "file", "file_too_large")  # fmt: skip
