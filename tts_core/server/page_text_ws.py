"""WebSocket /tts_stream/text: the page's "speak while the text arrives".

The /v1 text-stream session (speech_ws.SpeechSession: messages, bounds, errors, close codes)
with the page's access rules (Host and Origin at the handshake, no API key) and the PCM
route's request fields in `session.config` (pcm_stream.page_request); the audio is always pcm.
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
