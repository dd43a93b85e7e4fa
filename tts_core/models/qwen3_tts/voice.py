"""A Qwen3-TTS voice: what a request speaks with (made by the model, read by its requests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .codec.streaming import DecoderState


@dataclass
class Voice:
    speaker_embedding: torch.Tensor | None  # (H,) x-vector; None: a preset / designed voice
    ref_codes: torch.Tensor | None = None  # (R, G) int64; None = x-vector only
    ref_text: str | None = None
    # ICL: the codec decoder state after the reference frames, computed once per voice and
    # cloned by every stream, so a request does not decode the reference again.
    warm_decoder: tuple[int, DecoderState] | None = field(default=None, repr=False, compare=False)
    speaker: str | None = None  # CustomVoice: the preset's name (a talker_config.spk_id key)
    instruct: str | None = None  # CustomVoice / VoiceDesign: the instruction (None: none)
    model_type: str = "base"  # the tts_model_type this voice is made for

    @property
    def mode(self) -> str:
        if self.model_type == "custom_voice":
            return "preset"
        if self.model_type == "voice_design":
            return "design"
        return "icl" if self.ref_codes is not None else "xvector"
