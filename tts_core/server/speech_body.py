"""POST /v1/audio/speech's request: the body (OpenAI's fields, vLLM-Omni's voice cloning fields;
see openai_api.py), its checks, the voice it names or carries, and the engine requests it makes
(a long input cut into pieces within the engine's text limit). The WebSocket route's
session.config is read by the same code (speech_ws.py). `speech_task`: vLLM-Omni's task_type
against the served checkpoint's, and the voice a CustomVoice / VoiceDesign model makes."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from ..audio import SAMPLE_RATE
from ..audio.decode import AudioDecodeError, DataUrlTooLarge, decode_data_url
from ..engine import InputError, Limits, SynthesisParams, SynthesisRequest
from ..engine.backend import Backend
from ..engine.capabilities import TASK_TYPES
from ..engine.errors import shown
from ..engine.requests import ModelVoice
from ..engine.validation import prepare_reference, printable
from .errors import ApiError
from .route_utils import validation_to_api_error
from .state import ServerState
from .text_split import split_text
from .voice_routes import load_voice
from .voices import MODEL_VOICE, Viewer

# the engine's field names -> this API's
API_PARAMS = {"text": "input", "reference": "voice", "reference_text": "voice"}
REF_PARAMS = {"text": "input", "reference": "ref_audio", "reference_text": "ref_text"}


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = "tts-1"
    input: str
    voice: str | dict[str, Any] | None = None  # may be left out when ref_audio is given
    response_format: Literal["wav", "pcm", "mp3", "opus", "flac", "aac"] = "mp3"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    # None (not asked): a WAV is sent whole, every other format streams (`sent_whole`)
    stream: bool | None = None
    instructions: str | None = None
    language: str = "auto"
    # vLLM-Omni's voice cloning fields (see the module's docstring)
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    task_type: str | None = None
    # and the knobs, by name: read from the same JSON object by request_values (route_utils)

    @model_validator(mode="before")
    @classmethod
    def _stream_means_sse(cls, data: Any) -> Any:
        """vLLM-Omni: `stream: true` with no (or a null) stream_format asks for SSE events."""
        if isinstance(data, dict) and data.get("stream_format") is None:
            data = {k: v for k, v in data.items() if k != "stream_format"}
            if data.get("stream") is True:
                data["stream_format"] = "sse"
        return data

    def sent_whole(self) -> bool:
        """Whether the response is held until the end and sent with its Content-Length: when
        `stream` is false, and for a WAV whose request asks for no stream (neither `stream`
        nor `stream_format`). A streamed WAV's header cannot know its length (0xFFFFFFFF,
        OpenAI's own), which `wave` and `soxi` read as a file of 24 h 51 min: what the OpenAI
        SDK's `stream_to_file("x.wav")` saved; sent whole it has its real sizes, as
        vLLM-Omni's non-streamed default. Other formats' bytes are the same either way."""
        if self.stream_format == "sse":
            return False
        if self.stream is not None:
            return not self.stream
        return self.response_format == "wav" and "stream_format" not in self.model_fields_set

    @field_validator("voice")
    @classmethod
    def _voice_name(cls, value: str | dict[str, Any] | None) -> str | None:
        if value is None:
            return None
        name = value.get("id") if isinstance(value, dict) else value
        if not isinstance(name, str) or not name.strip():
            raise ValueError("voice must be a voice name or an object with an 'id'")
        return name.strip()

    @field_validator("task_type")
    @classmethod
    def _task_type(cls, value: str | None) -> str | None:
        if value is not None and value not in TASK_TYPES:
            raise ValueError(f"'{shown(value)}' is not a task type: one of {', '.join(TASK_TYPES)}")
        return value


def parse_speech_body(payload: object, max_input_chars: int) -> SpeechBody:
    try:
        body = SpeechBody.model_validate(payload)
    except ValidationError as exc:
        raise validation_to_api_error(exc) from None
    if not printable(body.input):  # blank, or only control / zero-width characters
        raise ApiError(400, "input must not be empty.", "input", "invalid_value")
    if len(body.input) > max_input_chars:
        raise ApiError(
            413,
            f"input is {len(body.input)} characters long; the limit is {max_input_chars}.",
            "input",
            "input_too_long",
        )
    if body.speed != 1.0:
        raise ApiError(
            400, "Only speed 1.0 is supported by this server.", "speed", "unsupported_value"
        )
    # with instructions alone (VoiceDesign, or a task left out) speech_task says what is missing
    bare = body.task_type != "VoiceDesign" and body.instructions is None
    if body.voice is None and body.ref_audio is None and bare:
        raise ApiError(
            400,
            "voice: give a voice name, or the clip to clone as ref_audio.",
            "voice",
            "invalid_value",
        )
    if body.ref_text is not None and body.ref_audio is None:
        raise ApiError(
            400,
            "ref_text is the transcript of ref_audio: send the clip with it.",
            "ref_text",
            "invalid_value",
        )
    return body


async def speech_reference(
    state: ServerState, body: SpeechBody, viewer: Viewer, limits: Limits
) -> tuple[np.ndarray | None, str | None, dict[str, str]]:
    """(clip: (N,) float32 at SAMPLE_RATE, transcript, the API's names of the engine's fields
    for errors): `ref_audio` + `ref_text` when given, else the saved voice `voice` names (404
    when unknown), or no clip for MODEL_VOICE. `x_vector_only_mode` leaves the transcript out."""
    if body.ref_audio is None and body.voice in (MODEL_VOICE, None):
        return None, None, API_PARAMS
    if body.ref_audio is not None:
        with_text = body.ref_text is not None and not body.x_vector_only_mode
        clip = await asyncio.to_thread(
            decode_ref_audio, body.ref_audio, state.config.max_upload_bytes, limits, with_text
        )
        transcript, names = body.ref_text, REF_PARAMS
    else:
        voice, clip = await load_voice(state, body.voice, viewer)
        transcript, names = voice.transcript, API_PARAMS
    return clip, (None if body.x_vector_only_mode else transcript), names


def speech_task(body: SpeechBody, backend: Backend) -> ModelVoice | None:
    """The voice a CustomVoice / VoiceDesign checkpoint makes for `body` (None: a Base
    request: a clip or a saved voice, as before). task_type left out: on a CustomVoice or
    VoiceDesign server, a reference (ref_audio, or a voice that is no preset) means Base,
    anything else CustomVoice (vLLM-Omni's rule: VoiceDesign must be named); on a Base server,
    Base. A task other than the served checkpoint's is a 400 naming both."""
    served, names = backend.capabilities.task_type, backend.capabilities.speakers  # declared
    presets = {name.lower() for name in names}
    named = body.voice is not None and body.voice != MODEL_VOICE
    reference = body.ref_audio is not None or (named and body.voice.lower() not in presets)
    asked = body.task_type or ("Base" if reference or served == "Base" else "CustomVoice")
    if asked != served:
        rule = (
            "a reference clip or saved voice means Base"
            if reference
            else "no reference means CustomVoice; VoiceDesign must be named"
        )
        why = "" if body.task_type else f" (task_type left out: {rule})"
        offer = f" Its preset voices: {', '.join(names)}." if served == "CustomVoice" else ""
        raise ApiError(
            400,
            f"task_type '{asked}'{why} does not match the served checkpoint, "
            f"a {served} model.{offer}",
            "task_type",
            "invalid_value",
        )
    if served == "Base":
        return None
    if body.ref_audio is not None or body.ref_text is not None:
        raise ApiError(
            400,
            f"ref_audio / ref_text clone a voice (task_type Base); a {served} model makes its own.",
            "ref_audio",
            "invalid_value",
        )
    speaker = body.voice if served == "CustomVoice" else None
    return ModelVoice(speaker=speaker, instruct=body.instructions or None)


def decode_ref_audio(value: str, max_bytes: int, limits: Limits, with_text: bool) -> np.ndarray:
    """A ref_audio data URL -> its clip, checked as an uploaded voice is (size, format,
    length; too long with a transcript: refused, without: cut): 400 / 413 naming ref_audio."""
    try:
        data = decode_data_url(value, max_bytes)
        clip, _notices = prepare_reference(data, limits, with_text)
    except DataUrlTooLarge as exc:
        raise ApiError(413, f"ref_audio: {exc}", "ref_audio", "file_too_large") from None
    except AudioDecodeError as exc:
        raise ApiError(400, f"ref_audio: {exc}", "ref_audio", "invalid_value") from None
    except InputError as exc:
        raise ApiError(400, str(exc), "ref_audio", "invalid_value") from None
    assert clip is not None  # decode_data_url refuses an empty clip
    return clip


def build_requests(
    text: str,
    params: SynthesisParams,
    clip: np.ndarray | None,
    transcript: str | None,
    max_chars: int,
    model_voice: ModelVoice | None = None,
) -> list[SynthesisRequest]:
    """One engine request per piece of the (cleaned) input, each with `params`; the clip was
    read once, into memory (None: the model's own voice, or `model_voice`)."""
    return [
        SynthesisRequest(piece, reference(clip), transcript, params, model_voice)
        for piece in split_text(text, max_chars)
    ]


def reference(clip: np.ndarray | None) -> tuple[int, np.ndarray] | None:
    """An engine request's reference: the clip at SAMPLE_RATE, or None (no clip)."""
    return None if clip is None else (SAMPLE_RATE, clip)
