"""Log-mel front end of the speaker encoder (the official `mel_spectrogram`).

Reflect-pad (n_fft - hop) / 2 on both sides, STFT with center=False and a Hann window, magnitude
sqrt(re^2 + im^2 + 1e-9), librosa Slaney mel filters (ours, equal bit for bit:
audio.analysis.mel_filters), log(clamp(mel, 1e-5)). The official code
passes these numbers as literals (`extract_speaker_embedding`); they are not in any JSON file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ...audio.analysis import mel_filters


@dataclass(frozen=True)
class MelConfig:
    sample_rate: int = 24000
    n_fft: int = 1024
    win_size: int = 1024
    hop_size: int = 256
    n_mels: int = 128
    fmin: float = 0.0
    fmax: float = 12000.0

    @property
    def padding(self) -> int:
        return (self.n_fft - self.hop_size) // 2


@lru_cache(maxsize=4)
def _filterbank(cfg: MelConfig) -> np.ndarray:
    return mel_filters(cfg.sample_rate, cfg.n_fft, cfg.n_mels, fmin=cfg.fmin, fmax=cfg.fmax)


def mel_filterbank(cfg: MelConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.from_numpy(_filterbank(cfg)).float().to(device)


def log_mel_spectrogram(audio: torch.Tensor, cfg: MelConfig | None = None) -> torch.Tensor:
    """(B, N) or (N,) float audio at cfg.sample_rate -> (B, n_mels, frames) float32 log-mels."""
    cfg = cfg or MelConfig()
    if audio.dim() == 1:
        audio = audio[None]
    if audio.shape[-1] <= cfg.padding:
        raise ValueError(
            f"audio too short for the mel front end: {audio.shape[-1]} samples, need more than "
            f"{cfg.padding}"
        )
    audio = audio.float()
    padded = torch.nn.functional.pad(audio[:, None], (cfg.padding, cfg.padding), mode="reflect")
    window = torch.hann_window(cfg.win_size, device=audio.device)
    spec = torch.stft(
        padded[:, 0],
        cfg.n_fft,
        hop_length=cfg.hop_size,
        win_length=cfg.win_size,
        window=window,
        center=False,
        return_complex=True,
    )  # (B, n_fft // 2 + 1, frames)
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.matmul(mel_filterbank(cfg, audio.device), magnitude)
    return torch.log(torch.clamp(mel, min=1e-5))
