"""Answer a Gradio event call for an event that does not exist with 404, not a 500.

Gradio looks `fn_index` up in a dict without a check (`route_utils.get_fn`), so a POST to
`/gradio_api/queue/join` (or `/run/predict`) naming an unknown index raises KeyError inside the
route: a 500 and a traceback in the log for what is a client's mistake. This middleware reads
such a request's JSON body (small: the page's inputs, files go by reference), answers 404 for
an unknown index and hands every other request on untouched, body included.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

EVENT_ROUTES = ("/gradio_api/queue/join", "/gradio_api/run/predict")
MAX_INSPECTED_BYTES = 1 << 20  # larger bodies pass on unread: Gradio bounds them itself


class UnknownEventGuard:
    """Pure ASGI (a streamed response is never buffered). `known_indices()` is asked per
    request: the set of fn_index values the page has."""

    def __init__(self, app: ASGIApp, known_indices: Callable[[], Collection[int]]) -> None:
        self.app, self.known_indices = app, known_indices

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_event_call(scope):
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        index = _fn_index(body) if complete else None
        if index is not None and index not in self.known_indices():
            await _send_json(send, 404, {"detail": f"No event with fn_index {index}."})
            return
        await self.app(scope, _replay(body, complete, receive), send)


def _is_event_call(scope: Scope) -> bool:
    if scope["type"] != "http" or scope["method"] != "POST":
        return False
    path = scope["path"][len(scope.get("root_path", "")) :] or scope["path"]
    return path.rstrip("/").endswith(EVENT_ROUTES)


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
