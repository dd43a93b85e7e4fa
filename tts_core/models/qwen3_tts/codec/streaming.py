"""Typed per-stream state of the exact streaming codec decoder.

Every buffer is allocated once by `CodecDecoder.init_state` and then written in place, so a long
stream never grows memory. Zero-filled histories reproduce the zero left padding of the full pass.
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


@dataclass
class DecoderState:
    """Everything one stream needs between `decode_step` calls."""

    convs: list[ConvHistory]
    attention: list[KVWindow]
    batch_size: int
    frames_seen: int = 0

    @property
    def dtype(self) -> torch.dtype:
        return self.attention[0].keys.dtype if self.attention else self.convs[0].buffer.dtype

    @property
    def device(self) -> torch.device:
        return self.attention[0].keys.device if self.attention else self.convs[0].buffer.device

    def to_(
        self, dtype: torch.dtype | None = None, device: torch.device | str | None = None
    ) -> DecoderState:
        """Convert every buffer in place (reallocating once); returns self."""
        dtype = self.dtype if dtype is None else dtype
        device = self.device if device is None else torch.device(device)
        for part in [*self.convs, *self.attention]:
            part.to_(dtype, device)
        return self

    def reset(self) -> None:
        """Forget the stream: equivalent to a fresh `init_state`, without reallocating."""
        for history in self.convs:
            history.reset()
        for window in self.attention:
            window.reset()
        self.frames_seen = 0

    def clone(self) -> DecoderState:
        """An independent copy: a stream warmed once (e.g. on a voice's reference frames)
        can start many streams without decoding the warm-up again."""
        return DecoderState(
            convs=[history.clone() for history in self.convs],
            attention=[window.clone() for window in self.attention],
            batch_size=self.batch_size,
            frames_seen=self.frames_seen,
        )
