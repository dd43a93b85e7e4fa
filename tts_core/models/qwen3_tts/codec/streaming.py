"""Typed per-stream state of the exact streaming codec decoder.

Every buffer is allocated once by `CodecDecoder.init_state` and then written in place, so a long
stream never grows memory. Zero-filled histories reproduce the zero left padding of the full pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ...streaming_state import ConvHistory, KVWindow

__all__ = ["ConvHistory", "ConvWindow", "DecoderState", "KVWindow"]


@dataclass
class ConvWindow(ConvHistory):
    """A causal conv's history (`buffer`, (B, C, n)) and the window it reads each step,
    history ++ the step's t inputs, (B, C, n + t): one buffer, kept while t stays the same
    (a stream's steady chunk), into which the layer before writes the step's input straight
    after the history. That replaces ConvHistory.push's joined copy of the whole step (the
    decoder's 96-channel convs read ~11,600 samples a 6-frame chunk) by two copies of n."""

    window: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def open(self, steps: int) -> torch.Tensor:
        """The (B, C, steps) part of the window where this step's input goes; the history is
        already in front of it. Write it, then `close`."""
        size, buffer = self.size, self.buffer
        shape = (*buffer.shape[:2], size + steps)
        window = self.window
        if (
            window is None
            or window.shape != shape
            or window.dtype != buffer.dtype
            or window.device != buffer.device
        ):
            window = self.window = buffer.new_empty(shape)
        window[..., :size].copy_(buffer)
        return window[..., size:]

    def close(self) -> torch.Tensor:
        """The whole window (B, C, n + t), its last n samples kept as the next history. It is
        overwritten by the next step: read it before then."""
        self.buffer.copy_(self.window[..., self.window.shape[-1] - self.size :])
        return self.window

    def clone(self) -> ConvWindow:
        return ConvWindow(self.buffer.clone())

    def to_(self, dtype: torch.dtype, device: torch.device) -> None:
        super().to_(dtype, device)
        self.window = None


@dataclass
class DecoderState:
    """Everything one stream needs between `decode_step` calls."""

    convs: list[ConvWindow]
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
