"""Adapter: our Chatterbox original English model (tts_core.models.chatterbox.english) -> the
engine's Backend interface.

Streamed as Turbo streams (models/chatterbox/streaming.py): T3 draws the official's tokens for
the seed, S3Gen (the regular 10-step CFM with guidance) re-runs over prompt + tokens so far and
hands out the stable audio, HiFT carried across chunks; the clip approximates the whole pass and
carries the Perth watermark per chunk as Turbo's (knob `watermark`). The rest, the served loop
included (the model's requests `EnglishSequence`), is Turbo's backend (chatterbox.py), whose
subclass this is. Cloning takes the reference clip alone (no transcript, no length limit: the
English prepare_conditionals has none); with no clip the checkpoint's built-in voice speaks.
"""

from __future__ import annotations

from typing import Any

from ..engine.backend import ReferenceNeeds
from ..engine.knobs import knobs_of
from ..models.chatterbox.knobs import EnglishServed
from .chatterbox import ChatterboxBackend

KNOBS = knobs_of(EnglishServed)  # the English generate()'s, Turbo's chunk sizes and watermark

DESCRIPTION = (
    "Chatterbox (original English model) voice cloning from the reference clip alone (a "
    "transcript is not used), with emotion exaggeration and classifier-free guidance. With no "
    "clip it speaks in the checkpoint's built-in voice. Audio streams while the tokens are "
    "drawn (S3Gen in chunks: close to, not bit-equal to, the whole-clip pass); the streamed "
    "audio carries the Perth watermark (knob watermark)."
)


class ChatterboxEnglishBackend(ChatterboxBackend):
    """Turbo's backend (voices, streams through the served loop) with the English model and
    its knobs."""

    name, title = "chatterbox-english", "Chatterbox"
    # no shortest clip (the English model's prepare_conditionals asserts none); T3 reads the
    # first 6 s, S3Gen the first 10 s
    reference = ReferenceNeeds(sample_rate=24_000, transcript="ignored", best_seconds=(6.0, 10.0))
    description = DESCRIPTION
    knobs = KNOBS

    @staticmethod
    def load_model(name_or_path: str, device: str, dtype: Any) -> Any:
        """A folder in the English release layout, float32 (dtype does not apply; no 8-bit
        path for this model: its spec passes no quantize)."""
        from ..models.chatterbox.english import ChatterboxEnglishModel

        return ChatterboxEnglishModel.from_pretrained(name_or_path, device=device)
