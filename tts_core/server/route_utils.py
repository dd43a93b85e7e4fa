"""Helpers shared by the routes: error wrapping, JSON body reading, pydantic -> 400.

The routes may be added to an app that is already serving (Gradio's), whose exception
handlers are fixed by then, so every route turns its own errors into responses.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from pydantic import ValidationError

from .errors import ApiError

log = logging.getLogger(__name__)
MAX_JSON_BYTES = 1024 * 1024


def api_errors(route: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """ApiError -> its JSON response; anything unexpected -> logged, 500 in the same shape."""

    @functools.wraps(route)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await route(*args, **kwargs)
        except ApiError as exc:
            return exc.response()
        except Exception as exc:  # noqa: BLE001 - the client gets a short message, the log all
            log.exception("API request failed")
            return ApiError(500, f"Internal error ({type(exc).__name__}).").response()

    return wrapper


async def read_json(request: Request, limit: int = MAX_JSON_BYTES) -> Any:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"The request body is larger than {limit} bytes.", None, "too_large")
    raw = b""
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise ApiError(413, f"The request body is larger than {limit} bytes.", None,
                           "too_large")  # fmt: skip
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ApiError(400, "The request body must be JSON.", None, "invalid_json") from None


def validation_to_api_error(exc: ValidationError) -> ApiError:
    """The first pydantic error as a 400 naming its field."""
    first = exc.errors()[0] if exc.errors() else {}
    param = ".".join(str(part) for part in first.get("loc", ())) or None
    message = first.get("msg", "Invalid request body.")
    return ApiError(400, f"{param}: {message}" if param else message, param, "invalid_value")
