"""A backend that speaks through another server's /v1/audio/speech (vLLM-Omni's contract).

`--model http(s)://HOST:PORT/v1`: the page and our API in front of any server that speaks it,
another instance of this app included. A voice is its clip and transcript, sent with each
request as `ref_audio` (a base64 data URL of a 32-bit float WAV: the remote decodes exactly
the samples our engine holds) and `ref_text`, or `x_vector_only_mode: true` without one;
`task_type: "Base"`, the language and every set knob by name (seed, chunk sizes, the served
model's sampling values) go along. The answer streams as raw 16-bit PCM (`stream_format:
"audio"`, the default) or as SSE events (`"sse"`, env TTS_REMOTE_STREAM_FORMAT); its samples
become ours exactly (v / 32767 comes back to v through tts_core.audio.to_int16).

The remote's rate, frame size, knobs and defaults come from its GET /v1/models (`info`, which
this app's server gives; a server without it is taken for Qwen3-TTS: 24 kHz, 1920-sample
frames). Its errors become ours: 4xx -> InputError naming our field, 503 (busy, or its model
still loading) -> EngineBusy with the remote's Retry-After, which the engine passes on as it is
(our routes' 503 `engine_busy` with Retry-After, as our own admission's), anything else or no
answer -> BackendError saying which server failed and how. A cancelled request closes its connection: the remote stops too.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import soundfile as sf

from ..audio import SAMPLE_RATE
from ..engine.backend import BackendChunk, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from ..engine.errors import BackendError, EngineBusy, InputError
from ..engine.knobs import Knob

QWEN3_FRAME_SAMPLES = 1920  # 12.5 Hz codec frames at 24 kHz: a server that does not say
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # longest silence in an answer: a request may wait in the remote's line
FIELDS = {"input": "text", "ref_audio": "reference", "ref_text": "reference_text",
          "voice": "reference"}  # the remote's names of our engine's fields  # fmt: skip
STREAM_FORMATS = ("audio", "sse")
SCALE = 32767.0  # int16 <-> float as tts_core.audio.to_int16: round(x * 32767)


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

    @classmethod
    def from_models(cls, listing: dict[str, Any]) -> RemoteInfo:
        entries = listing.get("data") or [{}]
        entry = next((e for e in entries if "info" in e), entries[-1])
        info = entry.get("info") or {}
        rate = int(info.get("sample_rate", SAMPLE_RATE))
        frame = info.get("frame_ms")
        return cls(
            model=str(entry.get("served_model") or entry.get("id") or "remote"),
            backend=str(info.get("backend", "remote")),
            sample_rate=rate,
            frame_samples=round(frame * rate / 1000) if frame else QWEN3_FRAME_SAMPLES,
            needs_reference=bool(info.get("needs_reference", True)),
            max_concurrent=int(info.get("max_concurrent", 8)),
            description=str(info.get("description", "")),
            defaults=dict(info.get("sampling_defaults") or {}),
        )


class RemoteBackend:
    name = "remote"
    can_clone = True
    capabilities = Capabilities()  # the remote's audio is one stream: never crossfade
    weight_format, weight_format_reason, decode_step = None, "", None  # the remote's own
    device = "remote"

    def __init__(self, base_url: str, info: RemoteInfo, client: httpx.Client,
                 stream_format: str = "audio") -> None:  # fmt: skip
        if stream_format not in STREAM_FORMATS:
            raise ValueError(
                f"stream_format must be one of {STREAM_FORMATS}, not {stream_format!r}"
            )
        self.base_url = base_url
        self.info = info
        self.client = client
        self.stream_format = stream_format
        self.model_name = f"{info.model} at {base_url}"
        self.sample_rate = info.sample_rate
        self.frame_samples = info.frame_samples
        self.needs_reference = info.needs_reference
        self.default_concurrency = info.max_concurrent  # the remote's own line decides beyond
        self.description = f"Served by {base_url}. {info.description}".strip()
        self.knobs: tuple[Knob, ...] = _known_knobs(info.backend)

    @classmethod
    def connect(cls, base_url: str, api_key: str | None = None,
                stream_format: str | None = None) -> RemoteBackend:  # fmt: skip
        """Ask the remote what it serves (GET {base}/models); BackendError when it cannot be
        reached or gives no model list."""
        base = base_url.rstrip("/")
        key = api_key or os.environ.get("TTS_REMOTE_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        client = httpx.Client(headers=headers, timeout=timeout)
        with remote_errors(base):
            response = client.get(f"{base}/models")
            _raise_for(response, base)
            info = RemoteInfo.from_models(response.json())
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

    def stream(self, text: str, voice: Voice, params: SynthesisParams,
               cancel: threading.Event) -> Iterator[BackendChunk]:  # fmt: skip
        body = self._body(text, voice, params)
        with remote_errors(self.base_url):
            with self.client.stream("POST", f"{self.base_url}/audio/speech", json=body) as answer:
                _raise_for(answer, self.base_url)
                self._check_rate(answer)
                pieces = _sse_pcm(answer) if self.stream_format == "sse" else _raw_pcm(answer)
                for pcm in pieces:
                    yield BackendChunk(pcm.astype(np.float32) / np.float32(SCALE))
                    if cancel.is_set():
                        return  # leaving the block closes the connection: the remote stops

    def _body(self, text: str, voice: Voice, params: SynthesisParams) -> dict[str, Any]:
        body = {"model": self.info.model, "input": text, "response_format": "pcm",
                "stream": True, "stream_format": self.stream_format, "task_type": "Base",
                "language": params.language, **params.values}  # fmt: skip
        if voice.data is not None:
            url, transcript = voice.data
            body["ref_audio"] = url
            if transcript:
                body["ref_text"] = transcript
            else:
                body["x_vector_only_mode"] = True
        return body

    def _check_rate(self, answer: httpx.Response) -> None:
        said = answer.headers.get("x-sample-rate")
        if said is not None and int(said) != self.sample_rate:
            raise BackendError(f"The remote server {self.base_url} now answers at {said} Hz, "
                               f"not the {self.sample_rate} Hz it said at start; restart this "
                               "server.")  # fmt: skip


@contextmanager
def remote_errors(base_url: str) -> Iterator[None]:
    """httpx's failures -> BackendError naming the remote server (ours pass through)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise BackendError(f"The remote server {base_url} did not answer in time "
                           f"({type(exc).__name__}).") from exc  # fmt: skip
    except httpx.HTTPError as exc:
        raise BackendError(f"The remote server {base_url} could not be reached or broke off "
                           f"({type(exc).__name__}: {exc}).") from exc  # fmt: skip


def _raise_for(response: httpx.Response, base_url: str) -> None:
    """A refused request as our error: 4xx InputError (naming our field), 503 EngineBusy,
    else BackendError. The remote's message is kept (it is written for the user too)."""
    if response.status_code == 200:
        return
    response.read()
    try:
        error = response.json().get("error") or {}
        message, param = str(error.get("message") or error), error.get("param")
    except (ValueError, AttributeError):
        message, param = response.text[:300], None
    status = response.status_code
    if status == 503:
        retry = response.headers.get("retry-after", "5")
        raise EngineBusy(
            f"The remote server is busy: {message}", int(retry) if retry.isdigit() else 5
        )
    if 400 <= status < 500 and status not in (401, 403):
        raise InputError(message, FIELDS.get(param, param))
    raise BackendError(f"The remote server {base_url} answered {status}: {message}")


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
    for line in answer.iter_lines():
        if not line.startswith("data:"):
            continue  # event: names, comments, blank separators
        event = json.loads(line[5:].strip())
        kind = event.get("type")
        if kind == "speech.audio.delta":
            yield np.frombuffer(base64.b64decode(event["audio"]), dtype="<i2")
        elif kind == "speech.audio.done":
            return
        elif kind in ("speech.audio.error", "error"):
            error = event.get("error") or {}
            raise BackendError(f"The remote server failed: {error.get('message', error)}")
    raise BackendError("The remote server's event stream ended before speech.audio.done.")


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
