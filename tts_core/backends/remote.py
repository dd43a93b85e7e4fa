"""A backend that speaks through another server's /v1/audio/speech (vLLM-Omni's contract):
`--model http(s)://HOST:PORT/v1`, another instance of this app included.

A voice is its clip, sent with each request as `ref_audio` (a base64 data URL of a 32-bit float
WAV: the remote decodes exactly our samples), and its transcript (`ref_text`, else
`x_vector_only_mode`); the language and every set knob go by name (`_body`). The answer is raw
16-bit PCM (`stream_format` "audio") or SSE events ("sse", env TTS_REMOTE_STREAM_FORMAT); its
samples become ours exactly (v / 32767 comes back to v through tts_core.audio.to_int16). The
remote's rate, frame, knobs and defaults are its GET /v1/models `info` (none: Qwen3-TTS's).
Its errors become ours (`_raise_for`); a cancelled request closes its connection.

A remote is trusted for nothing it says (issue #37 M8, L1): every body is read with a byte
bound (MAX_*_BYTES; compression is declined), a 200 must carry audio, a request's audio stops at
`max_audio_s(text)`, and its numbers are checked or clamped (rate and frame at start,
MAX_CONCURRENT, MAX_RETRY_AFTER_S).
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np
import soundfile as sf

from ..audio import SAMPLE_RATE
from ..engine.backend import BackendChunk, SynthesisParams, Voice
from ..engine.capabilities import TASK_TYPES, Capabilities
from ..engine.errors import BackendError, EngineBusy, InputError
from ..engine.knobs import Knob
from ..engine.requests import ModelVoice

QWEN3_FRAME_SAMPLES = 1920  # 12.5 Hz codec frames at 24 kHz: a server that does not say
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # longest silence in an answer: a request may wait in the remote's line
FIELDS = {
    "input": "text",
    "ref_audio": "reference",
    "ref_text": "reference_text",
    "voice": "reference",
}  # the remote's names of our engine's fields
STREAM_FORMATS = ("audio", "sse")
SCALE = 32767.0  # int16 <-> float as tts_core.audio.to_int16: round(x * 32767)
MAX_LISTING_BYTES = 1 << 20  # GET /models: a few KB for a real server
MAX_ERROR_BYTES = 64 << 10  # an error's body: its message is cut to this much
MAX_SSE_LINE_BYTES = 4 << 20  # one `data:` line: base64 of ~65 s of 24 kHz int16 audio
MAX_CONCURRENT = 64  # places in our line for the remote's, whatever it says
MAX_SPEAKERS = 1000  # a remote's preset list (the released CustomVoice has 9)
MAX_RETRY_AFTER_S = 300
SAMPLE_RATES = (8_000, 192_000)  # the remote's rate must lie in this range (Hz)
FRAME_MS = (1.0, 10_000.0)  # and its frame (ms)
# audio per request: speech runs at ~15 characters a second; 1 s a character is far past any
# voice, and a short text still gets MIN_AUDIO_S
AUDIO_S_PER_CHAR = 1.0
MIN_AUDIO_S = 30.0


@dataclass(frozen=True)
class RemoteInfo:
    """What GET {base}/models says of the served model (defaults: Qwen3-TTS's)."""

    model: str
    backend: str = "remote"
    sample_rate: int = SAMPLE_RATE
    frame_samples: int = QWEN3_FRAME_SAMPLES
    needs_reference: bool = True
    max_concurrent: int = 8
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    # what the remote's checkpoint does (vLLM-Omni's task_type; #41) and its preset voices
    task_type: str = "Base"
    speakers: tuple[str, ...] = ()
    instruct_supported: bool = False

    @classmethod
    def from_models(cls, listing: object) -> RemoteInfo:
        """The listing's model; ValueError naming the field when a number is out of range."""
        entries = (listing.get("data") if isinstance(listing, dict) else None) or [{}]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ValueError("'data' is not a list of models")
        entry = next((e for e in entries if "info" in e), entries[-1])
        info = entry.get("info") or {}
        if not isinstance(info, dict):
            raise ValueError("'info' is not an object")
        rate = _number(info, "sample_rate", SAMPLE_RATE, SAMPLE_RATES, whole=True)
        frame = info.get("frame_ms")
        frame_ms = None if frame is None else _number(info, "frame_ms", 0, FRAME_MS)
        concurrent = _number(info, "max_concurrent", 8, (1, float("inf")), whole=True)
        defaults = info.get("sampling_defaults") or {}
        return cls(
            model=str(entry.get("served_model") or entry.get("id") or "remote"),
            backend=str(info.get("backend", "remote")),
            sample_rate=int(rate),
            frame_samples=max(1, round(frame_ms * rate / 1000))
            if frame_ms
            else QWEN3_FRAME_SAMPLES,
            needs_reference=bool(info.get("needs_reference", True)),
            max_concurrent=int(min(concurrent, MAX_CONCURRENT)),
            description=str(info.get("description", ""))[:1000],
            defaults=dict(defaults) if isinstance(defaults, dict) else {},
            **_model_voices(info),
        )


def _model_voices(info: dict) -> dict[str, Any]:
    """task_type, speakers and instruct_supported from the remote's info (a server that does
    not say them: Base, none), checked like its numbers (ValueError naming the field)."""
    task = info.get("task_type", "Base")
    if task not in TASK_TYPES:
        raise ValueError(f"'task_type' must be one of {', '.join(TASK_TYPES)}, not {task!r}"[:300])
    speakers = info.get("speakers") or []
    if (
        not isinstance(speakers, list)
        or not all(isinstance(name, str) and 0 < len(name) <= 100 for name in speakers)
        or len(speakers) > MAX_SPEAKERS
    ):
        raise ValueError(f"'speakers' must be a list of at most {MAX_SPEAKERS} names")
    return {
        "task_type": task,
        "speakers": tuple(speakers),
        "instruct_supported": info.get("instruct_supported") is True,
    }


def _number(
    info: dict, name: str, default: float, bounds: tuple[float, float], whole: bool = False
) -> float:
    """info[name] (or `default`) as a number within `bounds`; ValueError naming it if not."""
    value = info.get(name, default)
    low, high = bounds
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (whole and value != int(value))
        or not low <= value <= high
    ):
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"'{name}' must be {kind} from {low:g} to {high:g}, not {value!r}")
    return value


class RemoteBackend:
    name = "remote"
    can_clone = True
    capabilities = Capabilities()  # the remote's audio is one stream: never crossfade
    weight_format, weight_format_reason, decode_step = None, "", None  # the remote's own
    device = "remote"

    def __init__(
        self,
        base_url: str,
        info: RemoteInfo,
        client: httpx.Client,
        stream_format: str = "audio",
        audio_s_per_char: float = AUDIO_S_PER_CHAR,
    ) -> None:
        if stream_format not in STREAM_FORMATS:
            raise ValueError(
                f"stream_format must be one of {STREAM_FORMATS}, not {stream_format!r}"
            )
        self.base_url = base_url
        self.info = info
        self.client = client
        self.stream_format = stream_format
        self.audio_s_per_char = audio_s_per_char
        self.model_name = f"{info.model} at {base_url}"
        self.sample_rate = info.sample_rate
        self.frame_samples = info.frame_samples
        self.needs_reference = info.needs_reference
        self.default_concurrency = info.max_concurrent  # the remote's own line decides beyond
        self.description = f"Served by {base_url}. {info.description}".strip()
        self.knobs: tuple[Knob, ...] = _known_knobs(info.backend)
        # a CustomVoice / VoiceDesign remote speaks with voices it makes (`model_voice`)
        self.task_type = info.task_type
        self.speakers = info.speakers
        self.instruct_supported = info.instruct_supported
        self.capabilities = replace(
            self.capabilities, task_type=info.task_type, speakers=info.speakers
        )
        self.can_clone = info.task_type == "Base"

    @classmethod
    def connect(
        cls, base_url: str, api_key: str | None = None, stream_format: str | None = None
    ) -> RemoteBackend:
        """Ask the remote what it serves (GET {base}/models); BackendError when it cannot be
        reached or gives no model list."""
        base = base_url.rstrip("/")
        key = api_key or os.environ.get("TTS_REMOTE_API_KEY")
        headers = {"Accept-Encoding": "identity"}  # bodies are read by the byte: no inflating
        if key:
            headers["Authorization"] = f"Bearer {key}"
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        client = httpx.Client(headers=headers, timeout=timeout)
        with remote_errors(base), client.stream("GET", f"{base}/models") as response:
            _raise_for(response, base)
            listing = _read_bounded(response, MAX_LISTING_BYTES)
            if listing is None:
                raise BackendError(
                    f"The remote server {base} sent a model list of more than "
                    f"{MAX_LISTING_BYTES} bytes."
                )
            try:
                info = RemoteInfo.from_models(json.loads(listing))
            except ValueError as exc:  # JSON's errors are ValueErrors too
                raise BackendError(
                    f"The remote server {base} gave an unusable model list: {str(exc)[:200]}"
                ) from None
        fmt = stream_format or os.environ.get("TTS_REMOTE_STREAM_FORMAT", "audio")
        return cls(base, info, client, fmt)

    def sampling_defaults(self) -> dict[str, Any]:
        return {
            k.name: self.info.defaults[k.name] for k in self.knobs if k.name in self.info.defaults
        }

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: (N,) float32 at 24 kHz, sent as a float WAV data URL (exact samples)."""
        if audio is None:
            return Voice(self.name, None, {"mode": "remote default"})
        url = "data:audio/wav;base64," + base64.b64encode(_float_wav(audio)).decode("ascii")
        mode = "icl" if reference_text else "xvector"
        return Voice(
            self.name, (url, reference_text), {"mode": mode, "transcript": bool(reference_text)}
        )

    def model_voice(self, spec: ModelVoice) -> Voice:
        """A preset (`spec.speaker`) and its instruction, or a description (VoiceDesign), sent
        with each request as `voice` / `instructions` under the remote's task_type; the remote
        checks them (its 400 is our InputError)."""
        if self.task_type == "Base":
            raise InputError("This checkpoint clones voices: give a reference clip.", "voice")
        return Voice(self.name, spec, {"speaker": spec.speaker, "instruct": bool(spec.instruct)})

    def max_audio_s(self, text: str) -> float:
        """The most audio one request for `text` may bring back (see AUDIO_S_PER_CHAR)."""
        return max(MIN_AUDIO_S, len(text) * self.audio_s_per_char)

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        body = self._body(text, voice, params)
        limit_s = self.max_audio_s(text)
        left = int(limit_s * self.sample_rate)  # samples this request may still bring
        with remote_errors(self.base_url):
            with self.client.stream("POST", f"{self.base_url}/audio/speech", json=body) as answer:
                _raise_for(answer, self.base_url)
                self._check_answer(answer)
                pieces = _sse_pcm(answer) if self.stream_format == "sse" else _raw_pcm(answer)
                for pcm in pieces:
                    left -= len(pcm)
                    if left < 0:
                        raise BackendError(
                            f"The remote server {self.base_url} sent more than "
                            f"{limit_s:g} s of audio for {len(text)} characters; "
                            "stopped there."
                        )
                    yield BackendChunk(pcm.astype(np.float32) / np.float32(SCALE))
                    if cancel.is_set():
                        return  # leaving the block closes the connection: the remote stops

    def _body(self, text: str, voice: Voice, params: SynthesisParams) -> dict[str, Any]:
        body = {
            "model": self.info.model,
            "input": text,
            "response_format": "pcm",
            "stream": True,
            "stream_format": self.stream_format,
            "task_type": "Base",
            "language": params.language,
            **params.values,
        }
        if isinstance(voice.data, ModelVoice):  # the remote's own voice (#41)
            body["task_type"] = self.task_type
            if voice.data.speaker:
                body["voice"] = voice.data.speaker
            if voice.data.instruct:
                body["instructions"] = voice.data.instruct
        elif voice.data is not None:
            url, transcript = voice.data
            body["ref_audio"] = url
            if transcript:
                body["ref_text"] = transcript
            else:
                body["x_vector_only_mode"] = True
        return body

    def _check_answer(self, answer: httpx.Response) -> None:
        """A 200 carries the audio asked for, at the rate the remote said at start."""
        media = answer.headers.get("content-type", "").split(";")[0].strip().lower()
        sse = self.stream_format == "sse"
        if (media != "text/event-stream") if sse else not _is_audio(media):
            wanted = "text/event-stream" if sse else "audio"
            raise BackendError(
                f"The remote server {self.base_url} answered "
                f"{media[:100] or 'no content type'}, not {wanted}."
            )
        said = answer.headers.get("x-sample-rate")
        if said is not None and (not said.isdigit() or int(said[:7]) != self.sample_rate):
            raise BackendError(
                f"The remote server {self.base_url} now answers at {said} Hz, "
                f"not the {self.sample_rate} Hz it said at start; restart this "
                "server."
            )


def _is_audio(media: str) -> bool:
    """A raw-PCM answer's content type: audio/*, octet-stream, or none said."""
    return media in ("", "application/octet-stream") or media.startswith("audio/")


def _read_bounded(response: httpx.Response, limit: int) -> bytes | None:
    """At most `limit` bytes of the body (as sent: compression was declined); None when it
    has more (the rest is not read: closing the response drops the connection)."""
    body = bytearray()
    for data in response.iter_raw():
        body += data
        if len(body) > limit:
            return None
    return bytes(body)


@contextmanager
def remote_errors(base_url: str) -> Iterator[None]:
    """httpx's failures -> BackendError naming the remote server (ours pass through)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise BackendError(
            f"The remote server {base_url} did not answer in time ({type(exc).__name__})."
        ) from exc
    except httpx.HTTPError as exc:
        raise BackendError(
            f"The remote server {base_url} could not be reached or broke off "
            f"({type(exc).__name__}: {exc})."
        ) from exc


def _raise_for(response: httpx.Response, base_url: str) -> None:
    """A refused request as our error: 4xx InputError (naming our field), 503 EngineBusy,
    else BackendError. The remote's message is kept (it is written for the user too)."""
    if response.status_code == 200:
        return
    body = _read_bounded(response, MAX_ERROR_BYTES)
    try:
        if body is None:
            raise ValueError("cut")
        error = json.loads(body).get("error") or {}
        message, param = str(error.get("message") or error)[:1000], error.get("param")
    except (ValueError, AttributeError):
        text = "(more than 64 KB)" if body is None else body[:300].decode("utf-8", "replace")
        message, param = text, None
    if not isinstance(param, str | None):
        param = None
    status = response.status_code
    if status == 503:
        raise EngineBusy(
            f"The remote server is busy: {message}",
            _retry_after(response.headers.get("retry-after", "")),
        )
    if 400 <= status < 500 and status not in (401, 403):
        raise InputError(message, FIELDS.get(param, param))
    raise BackendError(f"The remote server {base_url} answered {status}: {message}")


def _retry_after(said: str) -> int:
    """The remote's Retry-After in whole seconds, 1 to MAX_RETRY_AFTER_S (5 when unsaid or
    not a number of seconds: an HTTP date is not worth trusting a remote's clock for)."""
    said = said.strip()
    if not said.isdigit():
        return 5
    return max(1, min(MAX_RETRY_AFTER_S, int(said[:6])))


def _raw_pcm(answer: httpx.Response) -> Iterator[np.ndarray]:
    """int16 samples of a raw PCM body as they arrive; a sample split between two network
    chunks waits for its second byte."""
    rest = b""
    for data in answer.iter_raw():
        data = rest + data
        whole = len(data) - len(data) % 2
        rest = data[whole:]
        if whole:
            yield np.frombuffer(data[:whole], dtype="<i2")
    if rest:
        raise BackendError("The remote server's PCM stream ended in the middle of a sample.")


def _sse_pcm(answer: httpx.Response) -> Iterator[np.ndarray]:
    """int16 samples of speech.audio.delta events; speech.audio.error -> BackendError; a
    stream that ends without speech.audio.done was cut off (BackendError)."""
    for line in _bounded_lines(answer, MAX_SSE_LINE_BYTES):
        if not line.startswith(b"data:"):
            continue  # event: names, comments, blank separators
        try:
            event = json.loads(line[5:].strip())
        except ValueError:
            raise BackendError("The remote server sent an event that is not JSON.") from None
        if not isinstance(event, dict):
            raise BackendError("The remote server sent an event that is not a JSON object.")
        kind = event.get("type")
        if kind == "speech.audio.delta":
            yield _delta_pcm(event.get("audio"))
        elif kind == "speech.audio.done":
            return
        elif kind in ("speech.audio.error", "error"):
            error = event.get("error") or {}
            raise BackendError(f"The remote server failed: {error.get('message', error)}")
    raise BackendError("The remote server's event stream ended before speech.audio.done.")


def _delta_pcm(audio: object) -> np.ndarray:
    """A delta event's base64 int16 samples (BackendError when they are not)."""
    try:
        data = base64.b64decode(audio, validate=True)  # type: ignore[arg-type]
        return np.frombuffer(data, dtype="<i2")
    except (TypeError, ValueError):  # binascii.Error is a ValueError; so is an odd length
        raise BackendError("The remote server sent an audio event without int16 audio.") from None


def _bounded_lines(answer: httpx.Response, limit: int) -> Iterator[bytes]:
    """The body's lines (ends: LF or CRLF), each at most `limit` bytes (BackendError past it,
    without reading on)."""
    rest = b""
    for data in answer.iter_raw():
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line.removesuffix(b"\r")
        if len(rest) > limit:
            raise BackendError(f"The remote server sent an event line of more than {limit} bytes.")
    if rest:
        yield rest


def _float_wav(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    sf.write(
        buffer, np.asarray(audio, dtype=np.float32), SAMPLE_RATE, subtype="FLOAT", format="WAV"
    )
    return buffer.getvalue()


def _known_knobs(backend: str) -> tuple[Knob, ...]:
    """The knobs of the remote's backend when it is one of ours (by its name), else none: the
    shared ones (seed, chunk sizes) are forwarded to any remote."""
    from . import backend_classes

    for cls in backend_classes():
        if cls.name == backend:
            return tuple(cls.knobs)
    return ()
