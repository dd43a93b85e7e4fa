"""The contract between the engine and a voice backend (eSpeak NG, Qwen3-TTS, ...)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

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
    """One request's settings: its language and its knob values by name (engine/knobs.py:
    the shared seed and chunk sizes, and each backend's own knobs). A knob that is left out, or
    None, takes its default: the declared one, else the backend's own. `Engine.prepare` checks
    the values against the shared knobs and the backend's (`check_params`)."""

    def __init__(self, language: str = "auto", **values: Any) -> None:
        self.language = language
        self.values: dict[str, Any] = {k: v for k, v in values.items() if v is not None}

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the knob `name`, or `default` when it is not set."""
        return self.values.get(name, default)

    def values_of(self, knobs: Iterable[Knob]) -> dict[str, Any]:
        """The set values of `knobs`, by name: keyword arguments for a model call."""
        return {knob.name: self.values[knob.name] for knob in knobs if knob.name in self.values}

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
    independent_phrases: bool  # True: chunks marked `independent` start a new synthesis
    sample_rate: int  # rate of the float32 mono audio `stream` yields (its native rate)
    frame_samples: int  # audio samples per "frame" at sample_rate, the chunk-size unit
    description: str  # what this backend does with the reference, in plain words
    default_concurrency: int
    # the request settings it reads besides the shared ones (knobs.shared_knobs), declared once
    # on the class: the API, the page and the validation are made from them
    knobs: tuple[Knob, ...]

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
