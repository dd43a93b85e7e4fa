"""The contract between the engine and a voice backend (eSpeak NG, Qwen3-TTS, ...)."""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .awaiting import Condition
from .capabilities import Capabilities
from .errors import InputError
from .knobs import SHARED_KNOBS, Knob

LANGUAGES = (
    "chinese",
    "english",
    "german",
    "italian",
    "portuguese",
    "spanish",
    "japanese",
    "korean",
    "french",
    "russian",
)


class SynthesisParams:
    """One request's settings: its language and its knob values by name (engine/knobs.py); a knob
    left out, or None, takes its default (the declared one, else the backend's own). Checked by
    `Engine.prepare` (`check_params`)."""

    def __init__(self, language: str = "auto", **values: Any) -> None:
        self.language = language
        self.values: dict[str, Any] = {k: v for k, v in values.items() if v is not None}

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the knob `name`, or `default` when it is not set."""
        return self.values.get(name, default)

    def values_of(self, knobs: Iterable[Knob]) -> dict[str, Any]:
        """The set values of `knobs`, by name: keyword arguments for a model call."""
        return {knob.name: self.values[knob.name] for knob in knobs if knob.name in self.values}

    def only(self, knobs: Iterable[Knob]) -> SynthesisParams:
        """These settings with the values of `knobs` alone (the page sends every control's
        value, the hidden ones' too: it keeps those of the knobs the served model reads)."""
        return SynthesisParams(self.language, **self.values_of(knobs))

    # the shared knobs, which the engine and every backend read
    @property
    def seed(self) -> int | None:
        return self.values.get("seed")  # None: a random seed

    @property
    def first_chunk_frames(self) -> int:
        return self.values.get("first_chunk_frames", _SHARED["first_chunk_frames"].default)

    @property
    def chunk_frames(self) -> int:
        return self.values.get("chunk_frames", _SHARED["chunk_frames"].default)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SynthesisParams):
            return NotImplemented
        return (self.language, self.values) == (other.language, other.values)

    def __repr__(self) -> str:
        values = "".join(f", {name}={value!r}" for name, value in self.values.items())
        return f"SynthesisParams(language={self.language!r}{values})"


_SHARED = {knob.name: knob for knob in SHARED_KNOBS}


@dataclass(frozen=True)
class Notice:
    """Why the app is not speaking with the model asked for: plain words, then the error."""

    summary: str  # what happened, what you hear instead, how to get the real voice
    details: str  # the exception, folded away in the page


# what a backend does with a reference's transcript ("required": a clip without one is refused)
TRANSCRIPT_USES = ("used", "ignored", "required")


@dataclass(frozen=True)
class ReferenceNeeds:
    """What a backend asks of a reference clip, declared once on its class (`reference`): the
    page's voice picker, examples and upload label, and `GET /v1/audio/voices`, follow it.

    Any clip rate is accepted (the engine decodes to 24 kHz mono and the model resamples to
    `sample_rate`); a clip longer than the engine's `Limits.max_reference_s` is cut."""

    sample_rate: int = 24_000  # the rate the model reads the clip at
    min_seconds: float = 0.0  # shorter clips are refused (`min_exclusive`: this long, too)
    min_exclusive: bool = False
    max_seconds: float | None = None  # longest clip the model holds with room to speak (None:
    # no limit of its own; the engine cuts at Limits.max_reference_s)
    transcript: str = "used"  # "used" (optional, closer clone), "ignored" or "required" (TADA)
    best_seconds: tuple[float, float] = (3.0, 10.0)  # what clips work best, for the label

    def __post_init__(self) -> None:
        if self.transcript not in TRANSCRIPT_USES or self.min_seconds < 0:
            raise ValueError(f"transcript must be one of {TRANSCRIPT_USES}; min_seconds >= 0")

    def fits(self, seconds: float) -> bool:
        """Whether a clip this long can serve the model."""
        return self.why_not(seconds) is None

    def why_not(self, seconds: float) -> str | None:
        """Why a clip this long cannot serve the model (None: it can)."""
        short = seconds <= self.min_seconds if self.min_exclusive else seconds < self.min_seconds
        if short:
            than = "longer than" if self.min_exclusive else "at least"
            return (
                f"this model needs a clip {than} {self.min_seconds:g} s (this one is "
                f"{seconds:.1f} s)"
            )
        if self.max_seconds is not None and seconds > self.max_seconds:
            return (
                f"this model holds at most {self.max_seconds:.1f} s of reference (this one "
                f"is {seconds:.1f} s)"
            )
        return None

    def length_text(self) -> str:
        """'3-10 s of speech', 'more than 5 s of speech (6-10 s work best)'."""
        low, high = self.best_seconds
        if self.min_seconds <= 0:
            return f"{low:g}-{high:g} s of speech"
        than = "more than" if self.min_exclusive else "at least"
        return f"{than} {self.min_seconds:g} s of speech ({low:g}-{high:g} s work best)"

    def as_json(self, needs_reference: bool) -> dict[str, Any]:
        return {
            "required": needs_reference,
            "min_seconds": self.min_seconds,
            "min_exclusive": self.min_exclusive,
            "max_seconds": self.max_seconds,
            "best_seconds": list(self.best_seconds),
            "transcript": self.transcript,
            "sample_rate": self.sample_rate,
        }


DEFAULT_REFERENCE = ReferenceNeeds()


@dataclass
class Voice:
    """A backend-specific voice, built once per reference clip and cached by the engine."""

    backend: str
    data: Any  # what the backend needs to speak (eSpeak settings, a Qwen3 voice prompt)
    summary: dict[str, Any] = field(default_factory=dict)  # shown to the user


@dataclass
class BackendChunk:
    """One piece of audio from a backend, in order."""

    audio: np.ndarray  # (N,) float32 mono at the backend's sample_rate
    independent: bool = False  # starts a separately synthesized phrase: crossfade into it
    frames: int | None = None  # codec frames, for frame-based backends
    stop_reason: str | None = None  # set on the backend's last chunk when it knows why it stopped
    batch_size: int | None = None  # streams computed together when this audio was made


@runtime_checkable
class Backend(Protocol):
    name: str  # "espeak", "qwen3"
    model_name: str  # what was loaded (repo id, path or "espeak-ng 1.52")
    device: str
    can_clone: bool
    needs_reference: bool
    sample_rate: int  # rate of the float32 mono audio `stream` yields (its native rate)
    frame_samples: int  # audio samples per "frame" at sample_rate, the chunk-size unit
    description: str  # what this backend does with the reference, in plain words
    default_concurrency: int
    knobs: tuple[Knob, ...]  # what it reads besides the shared knobs (engine/knobs.py)
    capabilities: Capabilities  # what it can do, declared on the class (capabilities.py)
    # what was loaded: "float32", "int8", ... (None: no neural weights), why (quantize "auto"'s
    # decision, or ""), how a decode step runs ("CUDA graphs" / "eager"; None: no such steps)
    weight_format: str | None
    weight_format_reason: str
    decode_step: str | None

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: (N,) float32 mono reference at tts_core.audio.SAMPLE_RATE (24 kHz), or None
        for the backend's default voice."""
        ...

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """Yield audio as it is produced; stop soon after `cancel` is set. Knob values are read
        by name from `params` (`params.values_of(self.knobs)`, `params.seed`, ...)."""
        ...

    def sampling_defaults(self) -> dict[str, Any]:
        """Each of its knobs -> its default (a knob declared with default None: the loaded
        model's own); empty for a backend without knobs."""
        ...

    # Optional: `reference` (ReferenceNeeds, what it asks of a clip: reference_needs(); its
    # transcript "ignored" hides the page's transcript box). With
    # `capabilities.takes_text_pieces`: stream_fed(text: TextInlet, voice, params, cancel),
    # whose audio equals `stream`'s of the whole text (it attaches a TextSink and may speak
    # before the text is complete); any other backend gets the whole text at done.


class TextSink(Protocol):
    """What a backend's request that reads text as it arrives takes (Qwen3's FedRequest)."""

    def feed(self, piece: str) -> None: ...

    def done(self) -> None: ...


class TextTooLong(InputError):
    """Text in pieces went past the engine's per-request limit (an HTTP route's 413)."""


CANCEL_POLL_S = 0.1  # a wait for text also ends this soon after `cancel` is set elsewhere (a
# shutdown's cancel_all sets it without waking the waiter)


class TextInlet:
    """One request's text as it arrives, cleaned exactly as `validation.clean_text` cleans the
    whole (`printable`: control and format characters dropped, whitespace runs -> one space,
    none at either end), so the pieces joined equal the text a one-shot request would speak.

    The feeder `push`es raw pieces and says `finish`; the backend either `attach`es a sink (the
    text so far goes to it at once, then each piece as it is pushed, on the pusher's thread) or
    waits for the whole (`wait_whole`). A sink that raises fails the inlet: `failure` holds the
    error for the backend to raise, and nothing more is forwarded. Thread-safe.
    """

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._cond = Condition()  # wait_whole on the event loop is awaited (awaiting.py)
        self._text = ""  # cleaned text so far (a held-back space not included)
        self._space = False  # whitespace seen after the last visible character
        self._sent = 0  # characters of _text handed to the sink
        self._done = self._done_sent = False
        self._sink: TextSink | None = None
        self.failure: BaseException | None = None

    @property
    def text(self) -> str:
        return self._text

    @property
    def forwarded(self) -> bool:
        """A sink is attached and has taken all the text so far (its feed returned)."""
        with self._cond:
            return self._sink is not None and self._sent == len(self._text)

    def push(self, piece: str) -> None:
        """More text; InputError once the cleaned text is longer than `max_chars`."""
        if not isinstance(piece, str):
            raise InputError("Text must be a string.", "text")
        with self._cond:
            if self._done:
                raise InputError("The text was already complete (done).", "text")
            self._text += self._clean(piece)
            if len(self._text) > self._max_chars:
                raise TextTooLong(
                    f"The text is longer than {self._max_chars} characters; the "
                    "limit is per request.",
                    "text",
                )
            self._forward()

    def finish(self) -> None:
        """No more text; InputError when nothing visible came."""
        with self._cond:
            if not self._text:
                raise InputError("Please enter some text to speak.", "text")
            self._done = True
            self._forward()
            self._cond.notify_all()

    def attach(self, sink: TextSink) -> None:
        """From now on the text goes to `sink` (the text so far first, as one piece)."""
        with self._cond:
            self._sink = sink
            self._forward()

    def wait_whole(self, cancel: threading.Event) -> str | None:
        """The whole text once `finish`ed; None if `cancel` is set first."""
        with self._cond:
            while not self._done and not cancel.is_set():
                self._cond.wait(CANCEL_POLL_S)
            return None if cancel.is_set() else self._text

    def _clean(self, piece: str) -> str:
        out: list[str] = []
        for ch in piece:
            if ch not in "\n\t" and unicodedata.category(ch)[0] == "C":
                continue  # as printable(): control, format, surrogate, unassigned
            if ch.isspace():  # str.split()'s whitespace
                self._space = bool(self._text or out)
                continue
            if self._space:
                out.append(" ")
                self._space = False
            out.append(ch)
        return "".join(out)

    def _forward(self) -> None:
        sink = self._sink
        if sink is None or self.failure is not None:
            return
        try:
            if len(self._text) > self._sent:
                sink.feed(self._text[self._sent :])
                self._sent = len(self._text)
            if self._done and not self._done_sent:
                self._done_sent = True
                sink.done()
        except BaseException as exc:  # noqa: BLE001 - raised by the backend's stream
            self.failure = exc
            self._cond.notify_all()


def reads_transcript(backend: object | None) -> bool:
    """Whether `backend` uses a reference clip's transcript (None: not loaded yet, so the page
    keeps the box): its `reads_transcript` attribute where it has one (Chatterbox's is made
    from its declaration), else its declared `reference.transcript`, else True."""
    said = getattr(backend, "reads_transcript", None)
    if said is not None:
        return bool(said)
    needs = getattr(backend, "reference", None)
    return needs.transcript != "ignored" if isinstance(needs, ReferenceNeeds) else True


def reference_needs(backend: object | None) -> ReferenceNeeds:
    """What `backend` asks of a reference clip (its `reference`; DEFAULT_REFERENCE for one that
    declares none, or None: not loaded yet)."""
    needs = getattr(backend, "reference", None)
    return needs if isinstance(needs, ReferenceNeeds) else DEFAULT_REFERENCE
