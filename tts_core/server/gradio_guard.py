"""Gradio's event routes answer only what they should: the page's events by index, the public
API by name.

* Gradio looks `fn_index` up in a dict without a check (`route_utils.get_fn`), so a POST to
  `/gradio_api/queue/join` (or `/run/predict`) naming an unknown index raised KeyError inside
  the route: a 500 and a traceback for a client's mistake. Now a 404.
* Gradio runs any event called by its name (`/gradio_api/call/<name>`, `/call/v2/<name>`,
  `/run/<name>`, `/api/<name>`), `api_visibility="private"` included: that only hides it from
  the API docs. The page sends its own events by index, so a call by name is for the public API
  (`/synthesize`, `/synthesize_full`) only; any other name is a 404 before Gradio sees it.

The middleware reads such a request's JSON body (small: the inputs, files go by reference) and
hands every request it lets through on untouched, body included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BY_INDEX = re.compile(r"/gradio_api/queue/join/?$")
BY_NAME = re.compile(r"/gradio_api/(?:call/v2|call|run|api)/([^/]+)/?$")
MAX_INSPECTED_BYTES = 1 << 20  # larger bodies pass on unread: Gradio bounds them itself


class EventGuard:
    """Pure ASGI (a streamed response is never buffered). `blocks` is asked per request, so
    events added after the guard was made count too."""

    def __init__(self, app: ASGIApp, blocks: Any) -> None:
        self.app, self.blocks = app, blocks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = _event_route(scope)
        if name is None:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        index = _fn_index(body) if complete else None
        refusal = self._refusal(name, index)
        if refusal is not None:
            await _send_json(send, 404, {"detail": refusal})
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


def _fn_index(body: bytes) -> int | None:
    try:
        index = json.loads(body).get("fn_index")
    except (ValueError, AttributeError):
        return None  # not a JSON object: Gradio's own validation answers
    return index if isinstance(index, int) and not isinstance(index, bool) else None


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


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
