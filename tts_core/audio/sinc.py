"""torchaudio's sinc resampler (transforms.Resample, sinc_interp_hann) in plain torch, the same op
order and dtypes, so torchaudio is not needed at run time: Chatterbox's 24 -> 16 kHz front ends
(models/chatterbox/features.py) and TADA's aligner input and clip rate (models/tada)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def sinc_kernel(orig: int, new: int, width_zeros: int = 6, rolloff: float = 0.99):
    """torchaudio _get_sinc_resample_kernel (sinc_interp_hann, dtype None): float64 built,
    float32 returned; orig/new already divided by their gcd."""
    base = min(orig, new) * rolloff
    width = math.ceil(width_zeros * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1)[:, None, None] / new + idx
    t *= base
    t = t.clamp_(-width_zeros, width_zeros)
    window = torch.cos(t * math.pi / width_zeros / 2) ** 2
    t *= math.pi
    kernels = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernels *= window * (base / orig)
    return kernels.to(dtype=torch.float32), width


def resample(wav: torch.Tensor, orig_sr: int, new_sr: int) -> torch.Tensor:
    """torchaudio.transforms.Resample(orig_sr, new_sr) on (..., S) float32."""
    if orig_sr == new_sr:
        return wav
    gcd = math.gcd(orig_sr, new_sr)
    orig, new = orig_sr // gcd, new_sr // gcd
    kernel, width = sinc_kernel(orig, new)
    shape = wav.shape
    flat = wav.reshape(-1, shape[-1])
    length = flat.shape[1]
    out = F.conv1d(F.pad(flat, (width, width + orig))[:, None], kernel.to(wav.device), stride=orig)
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    target = int(torch.ceil(torch.as_tensor(new * length / orig)).long())
    return out[..., :target].reshape(*shape[:-1], -1)
