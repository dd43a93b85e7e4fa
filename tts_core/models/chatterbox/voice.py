"""A Chatterbox voice: what `prepare_conditionals` makes from a reference clip and `conds.pt`
stores (spec chatterbox.md 2, 3). T3 needs the VoiceEncoder embedding and the prompt's S3
tokens; S3Gen needs the prompt's 24 kHz mel, its S3 tokens and the CAMPPlus x-vector."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch


class VoiceFileError(ValueError):
    """conds.pt is unreadable or lacks a field."""


@dataclass
class ChatterboxVoice:
    speaker_emb: torch.Tensor  # (1, 256) VoiceEncoder embedding (T3's speaker position)
    t3_prompt_tokens: torch.Tensor  # (1, P) int64 S3 tokens of the first 15 s, P <= 375
    prompt_token: torch.Tensor  # (1, Tp) int64 S3 tokens of the first 10 s (S3Gen prompt)
    prompt_feat: torch.Tensor  # (1, Tm, 80) float 24 kHz log-mel of the first 10 s
    embedding: torch.Tensor  # (1, E) CAMPPlus x-vector (E = 192 released)

    @classmethod
    def from_conds(cls, path: str | Path) -> ChatterboxVoice:
        """The official `Conditionals.save` layout: dict(t3=T3Cond.__dict__, gen=ref_dict)."""
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            t3, gen = data["t3"], data["gen"]
            return cls(
                speaker_emb=t3["speaker_emb"].float().reshape(1, -1),
                t3_prompt_tokens=t3["cond_prompt_speech_tokens"].long().reshape(1, -1),
                prompt_token=gen["prompt_token"].long().reshape(1, -1),
                prompt_feat=gen["prompt_feat"].float(),
                embedding=gen["embedding"].float().reshape(1, -1),
            )
        except (OSError, RuntimeError, KeyError, TypeError, AttributeError) as error:
            raise VoiceFileError(f"{path}: not a Chatterbox conds file ({error})") from error

    def to(self, device: torch.device | str) -> ChatterboxVoice:
        return ChatterboxVoice(*(getattr(self, field.name).to(device) for field in fields(self)))
