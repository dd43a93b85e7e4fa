"""Typed per-stream state of the exact streaming AudioVAE V2 decoder.

The official streaming decoder (voxcpm PR #212) keeps its conv histories in a dict installed on
the shared modules by monkeypatching their forwards, so one model serves one stream at a time.
Here the state is a plain object owned by the stream: `AudioVAE.init_state()` allocates every
buffer once (zeros = the zero left padding of a full decode) and `decode_step` writes them in
place, so any number of streams can share one model and a long stream never grows memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..streaming_state import ConvHistory  # the same causal-conv history as Qwen3's codec


@dataclass
class VAEDecoderState:
    """Everything one stream needs between `AudioVAE.decode_step` calls.

    `histories[i]` belongs to the decoder conv whose `slot` is i (every conv with left padding
    and every transposed conv, in module order). For the released decoder that is the first
    depthwise conv (6 frames), per block the transposed conv (1 frame) and the three residual
    units' dilated convs (6, 18, 54 frames), and the last conv (6 frames).
    """

    histories: list[ConvHistory]
    batch_size: int
    frames_seen: int = 0

    @property
    def dtype(self) -> torch.dtype:
        return self.histories[0].buffer.dtype

    @property
    def device(self) -> torch.device:
        return self.histories[0].buffer.device

    def reset(self) -> None:
        """Forget the stream: equivalent to a fresh `init_state`, without reallocating."""
        for history in self.histories:
            history.reset()
        self.frames_seen = 0

    def clone(self) -> VAEDecoderState:
        """An independent copy: a state warmed once (e.g. on a voice's context latents) can
        start many streams without decoding the warm-up again."""
        return replace(self, histories=[history.clone() for history in self.histories])
