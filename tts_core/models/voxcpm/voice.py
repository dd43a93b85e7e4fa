"""Reference audio -> a VoxCPM2 voice (spec voxcpm2.md sections 5, 13 and 14).

Audio at any rate is resampled as the official `librosa.load(path, sr=16000, mono=True)`
does (soxr "HQ", then the length fixed to ceil(N * (16000 / sr)), librosa's float ratio),
padded with zeros to whole patches (at the end for the reference, at the start for the
continuation prompt) and encoded to latent patches (T, P, D).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...audio import analysis
from .vae_streaming import VAEDecoderState


@dataclass
class Voice:
    """ref_patches (T_ref, P, D): the reference (right-padded); with a transcript also
    prompt_patches (T_prompt, P, D) (left-padded) and the decoder state warmed on the context
    patches (`warm_decoder`, cloned by every stream)."""

    ref_patches: torch.Tensor
    ref_text: str | None = None
    prompt_patches: torch.Tensor | None = None
    context_patches: torch.Tensor | None = None  # (ctx, P, D): decoded before the output
    warm_decoder: VAEDecoderState | None = None


def to_mono(audio: np.ndarray | torch.Tensor) -> np.ndarray:
    """(N,) or (N, C) samples -> float32 (N,) (channel mean, as librosa's to_mono)."""
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu().numpy()
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=1, dtype=np.float32)
    if audio.ndim != 1 or audio.size == 0:
        raise ValueError(f"audio must be (N,) or (N, channels) with N > 0, got {audio.shape}")
    return audio


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """librosa.resample(res_type="soxr_hq") on float32 mono audio (analysis.resample: its
    length from librosa's float ratio, e.g. 241 samples, not 240, for 441 at 44.1 -> 24 kHz)."""
    out = analysis.resample(np.asarray(audio, dtype=np.float32), rate, target)
    return np.ascontiguousarray(out, dtype=np.float32)


def pad_to_patches(audio: torch.Tensor, patch_samples: int, left: bool) -> torch.Tensor:
    pad = -audio.shape[-1] % patch_samples
    return torch.nn.functional.pad(audio, (pad, 0) if left else (0, pad))
