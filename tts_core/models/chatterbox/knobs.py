"""Both Chatterbox models' knobs by name, declared once and without torch: the backends' knobs
are made from these at import (engine/knobs.py `knobs_of`). sampling.py's TurboSampling and
EnglishSampling add the logits processors to these values."""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import knob
from .chunking import ChunkKnobs


@dataclass(frozen=True)
class TurboSamplingKnobs:
    """`T3.inference_turbo`'s processors' defaults: temperature, top-k, top-p, penalty."""

    temperature: float = 0.8
    top_k: int = 1000
    top_p: float = 0.95
    repetition_penalty: float = 1.2


@dataclass(frozen=True)
class EnglishSamplingKnobs:
    """The English generate()'s defaults (tts.py)."""

    cfg_weight: float = knob(
        0.5,
        0.0,
        2.0,
        label="CFG weight",
        step=0.05,
        ui_range=(0.0, 1.0),
        help="Classifier-free guidance on the text: lower speaks slower and looser; 0 turns "
        "guidance off (one pass instead of two).",
    )
    temperature: float = 0.8
    min_p: float = 0.05
    top_p: float = 1.0
    repetition_penalty: float = 1.2

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_p <= 1.0 and 0.0 <= self.top_p <= 1.0):
            raise ValueError(f"min_p and top_p must lie in [0, 1] (got {self.min_p}, {self.top_p})")
        if self.cfg_weight < 0 or self.temperature <= 0 or self.repetition_penalty <= 0:
            raise ValueError("cfg_weight must be >= 0, temperature and repetition_penalty > 0")


@dataclass(frozen=True)
class TurboKnobs(ChunkKnobs, TurboSamplingKnobs):
    """Turbo's `stream` / `request` knobs by name: its sampling's, then the chunk sizes."""


@dataclass(frozen=True)
class EnglishKnobs(ChunkKnobs, EnglishSamplingKnobs):
    """The English `stream` / `request` knobs by name: its sampling's, then the chunk sizes."""


@dataclass(frozen=True)
class Exaggeration:
    """The English `stream`'s own argument (T3's emotion conditioning)."""

    exaggeration: float = knob(
        0.5,
        0.0,
        2.0,
        label="Exaggeration",
        step=0.05,
        ui_range=(0.25, 2.0),
        help="Emotion intensity: 0.5 is neutral, higher is more expressive.",
    )


@dataclass(frozen=True)
class Watermark:
    """The backends' own (audio/perth_watermark.py, applied to each streamed chunk)."""

    watermark: int = knob(
        1,
        0,
        1,
        label="Perth watermark (1: on)",
        step=1,
        help="1: the streamed audio carries Resemble's Perth watermark, as the official marks "
        "its clips (needs the package resemble-perth); 0: no watermark.",
    )


# What each backend serves, in this order (the Gradio API's positional parameters): a dataclass
# collects its bases' fields last base first (English: exaggeration, cfg_weight, the sampling...)
@dataclass(frozen=True)
class TurboServed(Watermark, TurboKnobs):
    """Turbo's backend's knobs."""


@dataclass(frozen=True)
class EnglishServed(Watermark, EnglishKnobs, Exaggeration):
    """The English backend's knobs."""
