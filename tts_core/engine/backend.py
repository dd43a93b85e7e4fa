"""The contract between the engine and a voice backend (eSpeak NG, Qwen3-TTS, ...)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np

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


QWEN3_SAMPLING = ("temperature", "top_k", "top_p", "repetition_penalty")
VOXCPM_SAMPLING = ("cfg_value", "inference_timesteps")


@dataclass
class SynthesisParams:
    """Per-request knobs. Sampling values of None mean "the backend's default"."""

    language: str = "auto"
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    first_chunk_frames: int = 2  # frames of the first chunk (small: low time to first audio)
    chunk_frames: int = 6  # frames of every later chunk
    cfg_value: float | None = None  # VoxCPM2: classifier-free guidance strength
    inference_timesteps: int | None = None  # VoxCPM2: diffusion (flow-matching) steps

    def sampling_kwargs(self, names: tuple[str, ...] = QWEN3_SAMPLING) -> dict[str, Any]:
        """The set ones among `names`, as keyword arguments for a model call."""
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


# The request schema, once: every surface (page, PCM route, /v1, gradio_client) takes these
# names; a backend reads the ones it knows (see Backend.sampling_defaults).
PARAM_FIELDS = tuple(f.name for f in fields(SynthesisParams) if f.name != "language")


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

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: (N,) float32 mono reference at tts_core.audio.SAMPLE_RATE (24 kHz), or None
        for the backend's default voice."""
        ...

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """Yield audio as it is produced; stop soon after `cancel` is set."""
        ...

    def sampling_defaults(self) -> dict[str, Any]:
        """Defaults for the UI's sampling controls (empty if the backend does not sample)."""
        ...
