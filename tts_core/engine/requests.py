"""A request on its way in: the engine's settings, what a caller asks for, and what the engine
keeps of it once checked (Engine.prepare)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..models.contract import resolve_seed
from .backend import SynthesisParams, TextInlet
from .validation import Limits


def seeded(params: SynthesisParams) -> SynthesisParams:
    """`params` with the seed the request runs on: its own, or one drawn now (`resolve_seed`). A
    request cut into several (/v1's long input) is seeded once, before the cut: one seed."""
    if params.seed is not None:
        return params
    return SynthesisParams(params.language, **{**params.values, "seed": resolve_seed(None)})


@dataclass
class EngineConfig:
    limits: Limits = field(default_factory=Limits)
    crossfade_ms: float = 20.0  # Hann overlap at joins of independent phrases; 0 disables
    fade_ms: float = 5.0  # fade-in of the first and fade-out of the last samples
    max_concurrent: int | None = None  # None: the backend's default
    max_queue: int = 32  # requests that may wait for a slot; beyond that EngineBusy
    voice_cache_size: int = 16


@dataclass(frozen=True)
class ModelVoice:
    """A voice the served model makes itself, without a clip (Qwen3-TTS CustomVoice: a preset
    `speaker`, optionally with an `instruct`ion; VoiceDesign: `instruct` describes it)."""

    speaker: str | None = None
    instruct: str | None = None


@dataclass
class SynthesisRequest:
    text: str
    reference: str | Path | tuple[int, np.ndarray] | None = None
    reference_text: str | None = None
    params: SynthesisParams = field(default_factory=SynthesisParams)
    model_voice: ModelVoice | None = None  # instead of a reference (backend.model_voice)


@dataclass
class Prepared:
    """A request past validation: what Engine._run works from."""

    text: str | TextInlet  # the whole text, or the text that arrives in pieces (open_fed)
    params: SynthesisParams
    reference: np.ndarray | None
    reference_text: str | None
    notices: list[str]
    model_voice: ModelVoice | None = None
