"""WebSocket /tts_stream/text: the page's "speak while the text arrives" (issue #27 item 5).

This route is to WebSocket /v1/audio/speech/stream what POST /tts_stream/pcm is to POST
/v1/audio/speech: the same session (speech_ws.SpeechSession: its messages, bounds, errors and
close codes), with the page's access rules and the page's request fields.

- Access: the Host and Origin checks at the handshake, always (no CORS protects a WebSocket);
  no API key, which a page cannot keep secret (SpeechSession's `access="page"`).
- `session.config` takes the PCM route's fields (pcm_stream.page_request): language, the
  uploaded `reference` (a path Gradio gave the upload, accepted only under its upload folder or
  the app's assets) with `reference_text`, or a saved `voice` with the browser's `owner_key`,
  and the knobs by name. The audio is always `pcm` (16-bit little-endian mono; the rate is in
  `audio.start`).
- `input.text`, `input.done`, `session.close` and the server's messages: as the /v1 route's.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, WebSocket

from ..engine import SynthesisRequest
from .pcm_stream import page_request
from .speech_ws import SpeechSession, StreamLimits
from .state import ServerState

ROUTE = "/tts_stream/text"
FORMAT = "pcm"  # the page's player reads raw PCM
_NOT_REQUEST_FIELDS = frozenset({"type", "text", "input"})  # the text comes in pieces
LIMITS = StreamLimits()  # the /v1 route's: idle timeout, text per session (None: limits=)


def make_page_text_router(state: ServerState, limits: StreamLimits | None = None) -> APIRouter:
    """The page's text-stream WebSocket at ROUTE, sharing `state`'s engine and voices."""
    router = APIRouter()
    limits = limits or LIMITS

    @router.websocket(ROUTE)
    async def page_text_stream(websocket: WebSocket) -> None:
        await PageTextSession(websocket, state, limits).run()

    return router


class PageTextSession(SpeechSession):
    """A SpeechSession with the page's access rules (what the page's routes check:
    `check(api=False)`, Host and, for a WebSocket, Origin) whose session.config is the page's
    request (see the module docstring)."""

    def __init__(self, websocket: WebSocket, state: ServerState, limits: StreamLimits) -> None:
        super().__init__(websocket, state, limits, access="page")

    async def _configure(self, message: dict[str, Any]) -> tuple[str, SynthesisRequest]:
        payload = {k: v for k, v in message.items() if k not in _NOT_REQUEST_FIELDS}
        return FORMAT, await page_request(self.state, {**payload, "text": ""})


__all__ = ["ROUTE", "PageTextSession", "make_page_text_router"]
