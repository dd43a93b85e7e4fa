"""WebSocket /v1/audio/speech/stream: text in pieces -> speech while it arrives (issue #27).

Compatible with vLLM-Omni's route of the same path. Client messages (JSON text):
    {"type": "session.config", ...}   the POST /v1/audio/speech fields (validated by the same
                                      SpeechBody, knobs by name) minus `input`; first message,
                                      and again between utterances to change it
    {"type": "input.text", "text": s} any piece of text: a word, a character, half a word
    {"type": "input.done"}            the utterance is complete (the connection stays open)
    {"type": "session.close"}         end: the audio of a completed utterance is sent first
Server messages, per utterance:
    {"type": "audio.start", "utterance_index", "sentence_index": 0, "sentence_text": "",
     "format", "sample_rate", "channels": 1}      before its first audio byte
    binary frames                     `pcm`: 16-bit little-endian mono at sample_rate; `wav`:
                                      the same after a streamed WAV header (sizes 0xFFFFFFFF)
                                      in the first frame
    {"type": "audio.done", "utterance_index", "sentence_index": 0, "total_bytes", "error"}
    {"type": "session.done", "utterance_index", "total_sentences": 1, "stats"}
    {"type": "error", "message", "code", "param", "status"}   then the server closes
An utterance is one engine request (Engine.open_fed): a backend that takes text in pieces
(Qwen3-TTS) speaks while the text arrives, byte-identical to POST /v1/audio/speech with the
whole text; the others buffer until input.done (vLLM-Omni buffers, or cuts sentences).
`response_format` is `pcm` or `wav` (default `wav`, as vLLM-Omni); `stream_audio` and
`split_granularity` are accepted and ignored.

Bounds (README.md beside this file): /v1's Host / Origin checks and API key at the handshake
(no CORS protects a WebSocket), the engine's admission per utterance, text limits, message
sizes and time (StreamLimits: an utterance holds an engine slot from its first piece to
input.done). Every error is an `error` message and a close (codes: 1008 refused or bad
message, 1009 too large, 1013 busy, 1011 server error, 1000 idle or past a time limit).

The client's messages are read ahead while the session acts on an earlier one: uvicorn stops
reading a socket whose app has not asked for the message it holds, and its keepalive pongs
with it, so a busy session had its client dropped (1011) though it answered every ping. Up to
MAX_PENDING_BYTES wait unread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from ..engine import BackendError, EngineBusy, InputError, SynthesisParams, SynthesisRequest
from ..engine.awaiting import run_awaiting
from ..engine.backend import TextTooLong
from ..engine.streams import FedStream
from .audio_formats import make_encoder
from .errors import ApiError
from .route_utils import busy_error, request_values
from .speech_body import parse_speech_body, reference, speech_reference, speech_task
from .state import ServerState
from .streaming import events_of
from .voices import Viewer

log = logging.getLogger(__name__)

ROUTE = "/v1/audio/speech/stream"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # a session.config with a ref_audio data URL (vLLM-Omni's)
MAX_TEXT_MESSAGE_CHARS = 64 * 1024  # any other message
MAX_PENDING_BYTES = MAX_MESSAGE_BYTES  # messages read ahead of the session; then reads wait
FORMATS = ("pcm", "wav")
CONFIG_PLACEHOLDER = "session.config"  # SpeechBody's required `input`; the text comes later
_CLOSE_CODES = {400: 1008, 401: 1008, 403: 1008, 404: 1008, 408: 1000, 413: 1009, 503: 1013}
# Who may open a session: "api" = the /v1 rules (Host, Origin, and the API key when one is
# set; voices seen as api_viewer), "page" = the page's (Host and Origin only: a page cannot
# keep a key secret; its voices come with its request, as the PCM route's)
Access = Literal["api", "page"]


@dataclass(frozen=True)
class StreamLimits:
    # longest wait for the client's next step: a message that moves the session on (text, an
    # input.done, a first config); an empty piece or a config sent again renews nothing
    idle_timeout_s: float = 30.0
    max_session_chars: int | None = None  # None: ApiConfig.max_input_chars
    # an utterance holds an engine slot from its first piece to input.done: at most this long
    # (4096 characters from an LLM at ~20 characters a second take ~200 s)
    max_utterance_s: float = 300.0
    # input.text messages per utterance, empty ones included (one a character: 4096)
    max_utterance_pieces: int = 8192
    max_session_s: float = 3600.0  # a whole connection, however busy


def add_speech_stream_route(
    router: APIRouter, state: ServerState, limits: StreamLimits | None = None
) -> None:
    limits = limits or StreamLimits()

    @router.websocket(ROUTE)
    async def speech_stream(websocket: WebSocket) -> None:
        await SpeechSession(websocket, state, limits).run()


class _Handshake:
    """The upgrade request as AccessPolicy.check reads it. Its method is not a safe one: no
    CORS protects a WebSocket, so the Origin check applies as to a POST."""

    method = "WEBSOCKET"

    def __init__(self, websocket: WebSocket) -> None:
        self.headers = websocket.headers


@dataclass
class _Utterance:
    index: int
    stream: FedStream
    sender: asyncio.Task  # its audio -> the client; result: (bytes sent, final stats)
    opened_at: float  # time.monotonic() at its first piece
    done: bool = False  # input.done came
    pieces: int = 0  # input.text messages, empty ones included

    @property
    def sending(self) -> bool:
        """Complete, its audio still on its way (the client waits: it is not idle)."""
        return self.done and not self.sender.done()


class SpeechSession:
    """One connection: its config, its current utterance, its message loop. `access`: the
    rules of its handshake ("api": /v1's, "page": the page's; see Access)."""

    def __init__(
        self, websocket: WebSocket, state: ServerState, limits: StreamLimits, access: Access = "api"
    ) -> None:
        if access not in ("api", "page"):
            raise ValueError(f"access must be 'api' or 'page', not {access!r}")
        self.ws, self.state, self.limits, self.access = websocket, state, limits, access
        self.max_chars = limits.max_session_chars or state.config.max_input_chars
        self.chars = 0  # text received this session
        self.config: tuple[str, SynthesisRequest] | None = None  # (format, request sans text)
        self.utterance: _Utterance | None = None
        self.count = 0  # utterances opened
        self.viewer: Viewer | None = None
        self._started_at = self._progress_at = time.monotonic()  # the idle clock's start
        self._configured = False  # a session.config came since the last progress
        # the client's messages, read ahead of the session (see the module docstring)
        self._inbox: asyncio.Queue[tuple[dict, int]] = asyncio.Queue()
        self._pending = 0  # their size (a text message: its characters)
        self._taken = asyncio.Event()  # a message was taken from the inbox

    async def run(self) -> None:
        await self.ws.accept()
        receiving: asyncio.Task | None = None
        reader: asyncio.Task | None = None
        try:
            self._admit()
            reader = asyncio.ensure_future(self._read())
            while True:
                receiving = receiving or asyncio.ensure_future(self._take())
                message = await self._next(receiving)
                if message is None:
                    continue  # an utterance's audio ended first
                receiving = None
                if message.get("type") == "websocket.disconnect":
                    return
                if not await self._handle(self._parse(message)):
                    return
        except WebSocketDisconnect:
            return  # the client went away (the finally stops its utterance)
        except ApiError as exc:
            await self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - the client gets a short message, the log all
            log.exception("speech stream session failed")
            await self._fail(ApiError(500, f"Internal error ({type(exc).__name__})."))
        finally:
            for task in (receiving, reader):
                if task is not None:
                    task.cancel()
            await self._stop_utterance()

    async def _read(self) -> None:
        """The client's messages into the inbox as they come, up to the disconnect; reading
        waits while MAX_PENDING_BYTES of them are not taken yet."""
        while True:
            while self._pending > MAX_PENDING_BYTES:
                self._taken.clear()
                await self._taken.wait()
            try:
                message = await self.ws.receive()
            except Exception:  # noqa: BLE001 - the connection is gone: the session ends
                message = {"type": "websocket.disconnect"}
            size = len(message.get("text") or message.get("bytes") or "")
            self._pending += size
            self._inbox.put_nowait((message, size))
            if message["type"] == "websocket.disconnect":
                return

    async def _take(self) -> dict:
        """The client's next message (in the order sent)."""
        message, size = await self._inbox.get()
        self._pending -= size
        self._taken.set()
        return message

    def _admit(self) -> None:
        """The handshake's access check, by the session's `access` (ApiError 403 / 401), and
        who the caller is for the voices: /v1's caller, or a page without its browser's key
        (a page's request names its key itself: PageTextSession)."""
        api = self.access == "api"
        self.state.config.access.check(_Handshake(self.ws), api=api)  # type: ignore[arg-type]
        state = self.state
        self.viewer = state.api_viewer(self.ws) if api else state.page_viewer(None)  # type: ignore[arg-type]

    async def _next(self, receiving: asyncio.Task) -> dict | None:
        """The next client message; None when a completed utterance's audio ended first;
        the sender's error raised here; ApiError 408 past a deadline (see _deadline)."""
        utterance = self.utterance
        sender = utterance.sender if utterance and not utterance.sender.done() else None
        waits = {receiving, sender} if sender is not None else {receiving}
        deadline, error = self._deadline()
        if time.monotonic() >= deadline:  # checked first: a flood of messages ends here too
            raise error
        finished, _ = await asyncio.wait(
            waits, timeout=deadline - time.monotonic(), return_when=asyncio.FIRST_COMPLETED
        )
        if sender is not None and sender in finished:
            sender.result()  # its error, if any
            if utterance.done:
                await self._finish_utterance()
            # else it ended before its text (the model's end of speech, as the whole text's
            # request ends there too): later pieces go to it unheard until input.done
            return receiving.result() if receiving in finished else None
        if receiving in finished:
            return receiving.result()
        if time.monotonic() >= deadline:
            raise error
        return None

    def _deadline(self) -> tuple[float, ApiError]:
        """The earliest time the session may wait to, with the error it ends in there: the
        idle timeout from the last progress (not while a completed utterance's audio is being
        sent), the open utterance's time limit, the session's."""
        limits, utterance = self.limits, self.utterance
        session = f"Session time limit: {limits.max_session_s:g} s."
        bounds = [(self._started_at + limits.max_session_s, session, None, "session_timeout")]
        if not (utterance and utterance.sending):
            idle = f"Idle timeout: nothing new for {limits.idle_timeout_s:g} s."
            bounds.append((self._progress_at + limits.idle_timeout_s, idle, None, "idle_timeout"))
        if utterance is not None and not utterance.done:
            slow = (
                f"An utterance may take at most {limits.max_utterance_s:g} s from its "
                "first piece to input.done."
            )
            end = utterance.opened_at + limits.max_utterance_s
            bounds.append((end, slow, "text", "utterance_timeout"))
        at, message, param, code = min(bounds, key=lambda bound: bound[0])
        return at, ApiError(408, message, param, code)

    def _progressed(self) -> None:
        """The session moved on (text, input.done, audio sent): the idle clock restarts."""
        self._progress_at = time.monotonic()
        self._configured = False

    async def _finish_utterance(self) -> None:
        """The completed utterance's audio is all sent: audio.done and session.done."""
        utterance, self.utterance = self.utterance, None
        assert utterance is not None and utterance.done
        total, stats = await utterance.sender
        self._progressed()
        await self.ws.send_json(
            {
                "type": "audio.done",
                "utterance_index": utterance.index,
                "sentence_index": 0,
                "total_bytes": total,
                "error": False,
            }
        )
        await self.ws.send_json(
            {
                "type": "session.done",
                "utterance_index": utterance.index,
                "total_sentences": 1,
                "stats": stats,
            }
        )

    def _parse(self, message: dict) -> dict[str, Any]:
        raw = message.get("text")
        if raw is None:
            raise ApiError(
                400, "Send JSON text messages (binary is not read).", None, "invalid_message"
            )
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):
            raise ApiError(400, "The message must be valid JSON.", None, "invalid_json") from None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("type"), str):
            raise ApiError(
                400, "A message must be a JSON object with a 'type'.", "type", "invalid_message"
            )
        if parsed["type"] != "session.config" and len(raw) > MAX_TEXT_MESSAGE_CHARS:
            raise ApiError(
                413,
                f"A {parsed['type']} message may have at most {MAX_TEXT_MESSAGE_CHARS} characters.",
                None,
                "too_large",
            )
        return parsed

    async def _handle(self, message: dict[str, Any]) -> bool:
        """Act on one message; False when the session ends."""
        kind = message["type"]
        if kind == "session.config":
            if self.utterance is not None and not self.utterance.done:
                raise ApiError(
                    400,
                    "session.config during an utterance: send input.done first.",
                    "type",
                    "invalid_message",
                )
            self.config = await self._configure(message)
            if not self._configured:  # the first since the last progress; a re-sent one: none
                self._progressed()
                self._configured = True
        elif kind == "session.close":
            if self.utterance is not None and self.utterance.done:
                await self._finish_utterance()  # its audio first
            await self.ws.close(1000)
            return False
        elif kind not in ("input.text", "input.done"):
            raise ApiError(400, f"Unknown message type '{kind}'.", "type", "invalid_message")
        elif self.config is None:
            raise ApiError(400, f"Send session.config before {kind}.", "type", "invalid_message")
        elif kind == "input.text":
            await self._text(message.get("text"))
        elif self.utterance is None or self.utterance.done:  # input.done with no text: no audio
            await self.ws.send_json(
                {"type": "session.done", "utterance_index": self.count, "total_sentences": 0}
            )
            self.count += 1
        else:
            self._progressed()
            self.utterance.done = True
            await self._engine_call(self.utterance.stream.done)
            if self.utterance.sender.done():  # it ended before its text did
                await self._finish_utterance()
        return True

    async def _configure(self, message: dict[str, Any]) -> tuple[str, SynthesisRequest]:
        """session.config -> (format, the request with no text), checked as POST
        /v1/audio/speech checks its body (SpeechBody, knobs, voice or ref_audio)."""
        payload = {k: v for k, v in message.items() if k not in ("type", "input")}
        payload.setdefault("response_format", "wav")  # vLLM-Omni's default
        body = parse_speech_body({**payload, "input": CONFIG_PLACEHOLDER}, self.max_chars)
        if body.response_format not in FORMATS:
            raise ApiError(
                400,
                f"response_format must be one of {', '.join(FORMATS)} here.",
                "response_format",
                "unsupported_value",
            )
        params = SynthesisParams(body.language, **request_values(payload, self.state.slot))
        limits = self.state.engine.config.limits
        assert self.viewer is not None
        model_voice = speech_task(body, self.state.engine.backend)  # as POST: a preset, ...
        clip, transcript = None, None
        if model_voice is None:
            clip, transcript, _names = await speech_reference(self.state, body, self.viewer, limits)
        request = SynthesisRequest("", reference(clip), transcript, params, model_voice)
        return body.response_format, request

    async def _text(self, text: object) -> None:
        if not isinstance(text, str):
            raise ApiError(400, "input.text needs a string 'text'.", "text", "invalid_value")
        utterance = self.utterance
        if utterance is not None and not utterance.done:
            utterance.pieces += 1
            if utterance.pieces > self.limits.max_utterance_pieces:
                raise ApiError(
                    413,
                    f"An utterance may have at most "
                    f"{self.limits.max_utterance_pieces} input.text messages.",
                    "text",
                    "too_many_pieces",
                )
        if not text:  # nothing to speak: no slot taken, no engine call, and no progress
            return
        self._progressed()
        self.chars += len(text)
        if self.chars > self.max_chars:
            raise ApiError(
                413,
                f"More than {self.max_chars} characters of text in this session.",
                "text",
                "input_too_long",
            )
        if self.utterance is not None and self.utterance.done:
            await self._finish_utterance()  # utterances in order
        if self.utterance is None:
            self.utterance = await self._open()
            self.utterance.pieces = 1
        await self._engine_call(self.utterance.stream.feed, text)

    async def _open(self) -> _Utterance:
        assert self.config is not None
        response_format, request = self.config
        stream = await self._engine_call(self.state.engine.open_fed, request)
        index, self.count = self.count, self.count + 1
        sender = asyncio.ensure_future(self._send_audio(index, stream, response_format))
        return _Utterance(index, stream, sender, time.monotonic())

    async def _engine_call(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` on the event loop, its waits awaited (awaiting.py), its engine errors as
        ApiErrors. A piece of text is handed to the request without a wait (the request's
        own pipeline, in its sender, waits for the text and the model)."""
        try:
            return await run_awaiting(fn, *args)
        except InputError as exc:
            status = 413 if isinstance(exc, TextTooLong) else 400
            raise ApiError(status, str(exc), exc.param, "invalid_value") from None
        except EngineBusy as exc:
            raise busy_error(exc) from None

    async def _send_audio(
        self, index: int, stream: FedStream, response_format: str
    ) -> tuple[int, dict[str, Any]]:
        """The utterance's events -> audio.start, then binary frames; (bytes sent, stats)."""
        rate = self.state.engine.sample_rate
        frames: list[bytes] = []
        encoder = make_encoder(response_format, frames.append, rate, streamed=True)
        total, stats = 0, {}
        try:
            async with aclosing(events_of(stream)) as events:  # the finally stops it early
                async for event in events:
                    stats = event.stats
                    encoder.feed(event.audio)
                    if total == 0 and any(frames):
                        await self.ws.send_json(
                            {
                                "type": "audio.start",
                                "utterance_index": index,
                                "sentence_index": 0,
                                "sentence_text": "",
                                "format": response_format,
                                "sample_rate": rate,
                                "channels": 1,
                            }
                        )
                    for data in frames:
                        if data:
                            total += len(data)
                            await self.ws.send_bytes(data)
                    frames.clear()
        except InputError as exc:
            raise ApiError(400, str(exc), exc.param, "invalid_value") from None
        except BackendError as exc:
            raise ApiError(500, str(exc), None, "backend_error") from None
        except EngineBusy as exc:  # a busy remote server (backends/remote.py)
            raise busy_error(exc) from None
        finally:
            stream.cancel()  # no-op once it ended; stops it when this task ends early
        if stats.get("stop_reason") == "cancelled":  # not by this session: by a shutdown
            raise ApiError(
                503, "The synthesis was cancelled: the server is shutting down.", None, "cancelled"
            )
        encoder.finish()  # a WAV with no audio still gets its header
        for data in frames:
            total += len(data)
            await self.ws.send_bytes(data)
        return total, stats

    async def _stop_utterance(self) -> None:
        """Cancel the current utterance (client gone, or an error) and wait for its sender."""
        utterance, self.utterance = self.utterance, None
        if utterance is None:
            return
        utterance.stream.cancel()
        utterance.sender.cancel()
        await asyncio.gather(utterance.sender, return_exceptions=True)

    async def _fail(self, error: ApiError) -> None:
        """Send `error` and close; the connection may already be gone."""
        await self._stop_utterance()
        if self.ws.application_state is WebSocketState.DISCONNECTED:
            return
        try:
            await self.ws.send_json(
                {
                    "type": "error",
                    "message": error.message,
                    "code": error.code,
                    "param": error.param,
                    "status": error.status,
                }
            )
            await self.ws.close(_CLOSE_CODES.get(error.status, 1011))
        except Exception:  # noqa: BLE001 - the client went away meanwhile
            log.debug("could not send the error to a closed WebSocket", exc_info=True)
