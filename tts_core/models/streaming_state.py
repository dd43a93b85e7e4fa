"""Streaming state any causal decoder keeps between calls, model-agnostic: a causal conv's
input history and a sliding attention window, each allocated once and written in place, with
reset()/clone()/to_(). Qwen3-TTS's codec decoder (qwen3_tts/codec/streaming.DecoderState) and
VoxCPM2's AudioVAE decoder (voxcpm/vae_streaming.py) are built from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ConvHistory:
    """The last `n` input samples of one causal (transposed) conv: (B, C, n)."""

    buffer: torch.Tensor

    @property
    def size(self) -> int:
        return self.buffer.shape[-1]

    def push(self, x: torch.Tensor) -> torch.Tensor:
        """Return history ++ x along time (B, C, n + t) and keep its last n samples."""
        if self.size == 0:
            return x
        joined = torch.cat([self.buffer, x], dim=-1)
        self.buffer.copy_(joined[..., -self.size :])
        return joined

    def reset(self) -> None:
        self.buffer.zero_()

    def clone(self) -> ConvHistory:
        return ConvHistory(self.buffer.clone())

    def to_(self, dtype: torch.dtype, device: torch.device) -> None:
        self.buffer = self.buffer.to(dtype=dtype, device=device)


@dataclass
class KVWindow:
    """Un-rotated keys and values of the last `capacity` frames of one attention layer.

    keys / values: (B, H_kv, capacity, D) with capacity = sliding_window - 1; the first `length`
    slots hold the newest frames in time order. Keys are stored before RoPE and rotated with
    positions local to each step, so angles stay small however long the stream runs.
    """

    keys: torch.Tensor
    values: torch.Tensor
    length: int = 0

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def extend(
        self, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Join the cached frames with t new ones; return (keys, values, number cached before)."""
        cached = self.length
        all_keys = torch.cat([self.keys[:, :, :cached], keys], dim=2)
        all_values = torch.cat([self.values[:, :, :cached], values], dim=2)
        keep = min(self.capacity, all_keys.shape[2])
        if keep > 0:
            self.keys[:, :, :keep].copy_(all_keys[:, :, -keep:])
            self.values[:, :, :keep].copy_(all_values[:, :, -keep:])
        self.length = keep
        return all_keys, all_values, cached

    def reset(self) -> None:
        self.keys.zero_()
        self.values.zero_()
        self.length = 0

    def clone(self) -> KVWindow:
        return KVWindow(self.keys.clone(), self.values.clone(), self.length)

    def to_(self, dtype: torch.dtype, device: torch.device) -> None:
        self.keys = self.keys.to(dtype=dtype, device=device)
        self.values = self.values.to(dtype=dtype, device=device)
