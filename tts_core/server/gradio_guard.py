"""Gradio answers only what the page and gradio_client use: a list of its routes, its events by
index, the public API by name.

* Gradio 6 registers ~70 routes; some read or write the server's disk for anyone who asks
  (`process_recording` runs ffmpeg on an uploaded "video", which follows a DASH manifest to
  local files; `vibe-edit` rewrites the app's source in dev mode). Only the routes in `SERVED`
  pass (an allow-list: a route a later Gradio adds is refused until listed); any other path
  under `/gradio_api/`, and the top-level routes the page does not use, get 404.
* An unknown `fn_index` (`queue/join`, `run/predict`) raised KeyError inside Gradio (a 500 and
  a traceback for a client's mistake): a 404 here.
* Gradio runs any event called by its name, `api_visibility="private"` included (that only
  hides it from the docs). The page sends its events by index, so a call by name is for the
  public API only; any other name is a 404.

The middleware reads such a request's JSON body (small: files go by reference) and hands
every request it lets through on untouched, body included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from .disk_guard import ASGIApp, Message, Receive, Scope, Send, send_json

BY_INDEX = re.compile(r"/gradio_api/queue/join/?$")
BY_NAME = re.compile(r"/gradio_api/(?:call/v2|call|run|api)/([^/]+)/?$")
MAX_INSPECTED_BYTES = 1 << 20  # an event's inputs (files go by reference); larger: 413

# Gradio's API routes the page (its JS client) and gradio_client call: (methods, the path after
# `/gradio_api/`). GET covers HEAD. Left out: process_recording, vibe-*, component_server (no
# component of the page has server functions), stream/<event_id> (streamed inputs: none),
# deep_link, dev/reload, run-history, proxy=, custom_component, openapi.json.
_NAME, _ANY = r"[^/]+", r".*"
SERVED: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = tuple(
    (frozenset(methods.split()), re.compile(path))
    for methods, path in (
        ("GET", r"info/?"),  # the API's description (gradio_client, the page's API panel)
        ("GET", r"file=" + _ANY),  # files by path: Gradio checks each is one it may serve
        ("GET", r"file/" + _ANY),
        ("GET", rf"heartbeat/{_NAME}"),
        ("GET", r"queue/(?:data|status)"),  # an event's results (SSE), the queue's size
        ("GET", r"upload_progress"),
        ("GET", r"startup-events"),  # launch() calls it once itself; later calls do nothing
        ("GET", r"theme\.css"),
        ("GET", r"(?:app_id|user|login_check|token)/?"),  # the page asks at load
        ("GET", rf"stream/{_NAME}/{_NAME}/{_NAME}/{_NAME}"),  # streamed audio: HLS segments
        ("GET", rf"call(?:/v2)?/{_NAME}/{_NAME}"),  # a call's results (SSE)
        ("POST", r"upload"),
        ("POST", r"queue/join"),
        ("POST", r"(?:cancel|reset)/?"),
        ("POST", rf"(?:call/v2|call|run|api)/{_NAME}/?"),  # by name: checked below
    )
)
API_PATH = re.compile(r"/gradio_api/(?P<rest>.*)$")
# Gradio's routes outside /gradio_api that the page does not use (it has no login, monitoring
# or API schema): the rest of that level is the page and its static assets, and our own routes.
# Matched from the root (the page is mounted there): /v1/audio/voices/docs is a voice's name
UNUSED_TOP_LEVEL = re.compile(r"^/(?:login|logout|monitoring|openapi\.json|docs|redoc)(?:/.*)?$")


def served(scope: Scope) -> bool:
    """Whether an HTTP request goes to a route of Gradio's the page uses, or to none of its."""
    if scope["type"] != "http":
        return True  # WebSockets: Gradio 6 serves none; ours are checked by their routes
    method = "GET" if scope["method"] == "HEAD" else scope["method"]
    path = scope["path"]
    found = API_PATH.search(path)
    if found is None:
        return UNUSED_TOP_LEVEL.search(path) is None
    rest = found["rest"]
    return any(method in methods and pattern.fullmatch(rest) for methods, pattern in SERVED)


class EventGuard:
    """Pure ASGI (a streamed response is never buffered). `blocks` is asked per request, so
    events added after the guard was made count too."""

    def __init__(self, app: ASGIApp, blocks: Any) -> None:
        self.app, self.blocks = app, blocks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not served(scope):
            await send_json(send, 404, "Not Found")
            return
        name = _event_route(scope)
        if name is None:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        if len(body) > MAX_INSPECTED_BYTES:
            limit = MAX_INSPECTED_BYTES // 1024
            await send_json(send, 413, f"An event's body is at most {limit} KB.")
            return
        index = _fn_index(body) if complete else None
        refusal = self._refusal(name, index)
        if refusal is not None:
            await send_json(send, 404, refusal)
            return
        await self.app(scope, _replay(body, complete, receive), send)

    def _refusal(self, name: str, index: int | None) -> str | None:
        fns = self.blocks.fns
        if index is not None:  # the page's way: by index, to any of its events
            return None if index in fns else f"No event with fn_index {index}."
        if name == BY_INDEX_ROUTE or name in public_names(fns.values()):
            return None  # queue/join without an index: Gradio's own validation answers
        return f"No API endpoint named {name!r}; the API is {sorted(public_names(fns.values()))}."


BY_INDEX_ROUTE = "queue/join"


def public_names(fns: Iterable[Any]) -> set[str]:
    """Names callable by name: Gradio's "public" and "undocumented" events (not "private")."""
    return {fn.api_name for fn in fns if getattr(fn, "api_visibility", "public") != "private"}


def _event_route(scope: Scope) -> str | None:
    """The event name a POST calls (BY_INDEX_ROUTE for queue/join), None for other requests."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path = scope["path"]
    if BY_INDEX.search(path):
        return BY_INDEX_ROUTE
    found = BY_NAME.search(path)
    return found.group(1) if found else None


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """(what was read, whether that is the whole body)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > MAX_INSPECTED_BYTES:
            return b"".join(chunks), False


_INDEX = TypeAdapter(int | None)  # PredictBody.fn_index, read as Gradio's pydantic reads it


def _fn_index(body: bytes) -> int | None:
    """fn_index as Gradio will use it: pydantic's lax int takes "9999", 9999.0 and true too."""
    try:
        return _INDEX.validate_python(json.loads(body).get("fn_index"))
    except (ValueError, AttributeError):  # pydantic's ValidationError is a ValueError
        return None  # not a JSON object, or no int: Gradio's own validation answers (422)


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A receive() that first gives back what was read, then the rest from the client."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay
