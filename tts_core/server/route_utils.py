"""Helpers shared by the routes: error wrapping, bounded body reading, pydantic -> 400, the
request's knobs.

The routes may be added to an app that is already serving (Gradio's), whose exception
handlers are fixed by then, so every route turns its own errors into responses.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from pydantic import ValidationError
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException, MultiPartParser

from ..backends import request_knobs
from ..engine import BackendError, Engine, EngineBusy, EngineSlot, InputError, ModelLoading
from ..engine.errors import shown
from ..engine.knobs import parse_knobs
from .errors import ApiError

log = logging.getLogger(__name__)
MAX_JSON_BYTES = 1024 * 1024
DISK_FULL = "The server's disk is full; please try again later."


def disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def api_errors(route: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """ApiError -> its JSON response; EngineBusy (model loading, line full) -> 503 with
    Retry-After; BackendError (its message is safe to show) -> 500; a full disk (a clip's
    decode writes a temporary file) -> 507; anything unexpected -> logged, 500 in the same
    shape."""

    @functools.wraps(route)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await route(*args, **kwargs)
        except ApiError as exc:
            return exc.response()
        except EngineBusy as exc:
            return busy_error(exc).response()
        except BackendError as exc:
            return ApiError(500, str(exc), None, "backend_error").response()
        except Exception as exc:  # noqa: BLE001 - the client gets a short message, the log all
            if disk_full(exc):
                log.warning("API request failed: %s", exc)
                return ApiError(507, DISK_FULL, None, "disk_full").response()
            log.exception("API request failed")
            return ApiError(500, f"Internal error ({type(exc).__name__}).").response()

    return wrapper


async def read_json(request: Request, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON body: 415 unless labelled application/json (a cross-site page can send
    text/plain without asking first), 413 past `limit`, 400 when not JSON (deep nesting and
    over-long integers included)."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise ApiError(
            415,
            "Send the request body as JSON with 'Content-Type: application/json'.",
            None,
            "unsupported_media_type",
        )
    too_large = functools.partial(_body_too_large, limit)
    raw = b"".join([part async for part in limited_body(request, limit, too_large)])
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):  # ValueError: JSONDecodeError and
        # "Exceeds the limit (4300 digits) for integer string conversion"
        raise ApiError(400, "The request body must be valid JSON.", None, "invalid_json") from None


async def read_form(
    request: Request,
    limit: int,
    too_large: Callable[[], ApiError],
    max_files: int = 2,
    max_fields: int = 10,
    max_field_bytes: int = 64 * 1024,
) -> FormData:
    """A multipart/form-data body, counted while it arrives: nothing past `limit` bytes is
    read or spooled (413 from `too_large()`); too many parts or a text field over
    `max_field_bytes` is a 400. The caller closes the returned form."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "multipart/form-data":
        raise ApiError(
            415,
            "Send the voice as multipart/form-data, the clip in a file field named 'file'.",
            "file",
            "unsupported_media_type",
        )
    parser = MultiPartParser(
        request.headers,
        limited_body(request, limit, too_large),
        max_files=max_files,
        max_fields=max_fields,
        max_part_size=max_field_bytes,
    )
    try:
        return await parser.parse()
    except MultiPartException as exc:
        raise ApiError(400, f"Malformed form: {exc}", None, "invalid_form") from None


async def limited_body(
    request: Request, limit: int, too_large: Callable[[], ApiError]
) -> AsyncIterator[bytes]:
    """The request body's chunks; raises `too_large()` as soon as more than `limit` bytes
    are declared or have arrived (a chunked upload declares nothing)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large()
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise too_large()
        yield chunk


def _body_too_large(limit: int = MAX_JSON_BYTES) -> ApiError:
    return ApiError(413, f"The request body is larger than {limit} bytes.", None, "too_large")


def busy_error(exc: EngineBusy) -> ApiError:
    code = "model_loading" if isinstance(exc, ModelLoading) else "engine_busy"
    return ApiError(503, str(exc), None, code, {"Retry-After": str(exc.retry_after_s)})


MAX_MESSAGE_CHARS = 300  # pydantic's message may quote a value (our validators' do)


def validation_to_api_error(exc: ValidationError) -> ApiError:
    """The first pydantic error as a 400 naming its field."""
    first = exc.errors()[0] if exc.errors() else {}
    param = shown(".".join(str(part) for part in first.get("loc", ()))) or None
    message = shown(first.get("msg", "Invalid request body."), MAX_MESSAGE_CHARS)
    return ApiError(400, f"{param}: {message}" if param else message, param, "invalid_value")


def served_engine(slot: EngineSlot) -> Engine | None:
    """The engine when it serves; None while the model loads, after it failed or once the
    server is closing (the request then gets that answer from the slot)."""
    try:
        return slot.engine
    except (EngineBusy, BackendError):
        return None


def request_values(payload: dict[str, Any], slot: EngineSlot) -> dict[str, Any]:
    """The knob values of a JSON request, by name (tts_core.backends.request_knobs: the shared
    knobs, every known backend's and the served one's), checked: a bad one is a 400 naming it.
    Other fields are not looked at."""
    try:
        return parse_knobs(payload, request_knobs(served_engine(slot)))
    except InputError as exc:
        raise ApiError(400, str(exc), exc.param, "invalid_value") from None
