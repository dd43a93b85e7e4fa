"""Typed per-stream state of the exact streaming codec decoder.

Every buffer is allocated once by `CodecDecoder.init_state` and then written in place, so a long
stream never grows memory. Zero-filled histories reproduce the zero left padding of the full pass.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ...streaming_state import ConvHistory, KVWindow

__all__ = ["ConvHistory", "DecoderState", "KVWindow"]


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
        attention = [window.clone() for window in self.attention]
        return replace(self, convs=[history.clone() for history in self.convs], attention=attention)
