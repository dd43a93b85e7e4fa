"""TADA's durations as Gray-coded bits (hume-tada tada/utils/gray_code.py): a duration d in
[0, 2^n) is the n bits (most significant first) of d ^ (d >> 1), each as -1.0 / +1.0; the flow
head predicts them as floats and `decode` rounds them back."""

from __future__ import annotations

import torch


def encode(frames: torch.Tensor, bits: int) -> torch.Tensor:
    """(...,) int -> (..., bits) float in {-1, 1} (clamped to [0, 2^bits))."""
    frames = frames.clamp(min=0, max=2**bits - 1)
    gray = frames ^ (frames >> 1)
    shifts = torch.arange(bits - 1, -1, -1, device=frames.device)
    return ((gray[..., None] >> shifts) & 1).float() * 2.0 - 1.0


def decode(values: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., bits) float -> (...,) int64: each value to round((v + 1) / 2) (half to even, as
    torch.round; a value below -2 or from 2 up gives a "bit" outside {0, 1}, and then often a
    duration outside [0, 2^bits), exactly as the official), then Gray to binary."""
    raw = ((values + 1.0) / 2.0).round().long()
    gray = torch.zeros(values.shape[:-1], dtype=torch.long, device=values.device)
    for i in range(bits):
        gray += raw[..., bits - 1 - i] << i
    binary, shift = gray, 1
    while shift < 32:
        binary = binary ^ (binary >> shift)
        shift <<= 1
    return binary
