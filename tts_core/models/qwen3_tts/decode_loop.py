"""Deprecated: the single-stream decode loop is gone; every request runs the serving engine.

Left only for callers not yet moved (quantize.calibrate): `FrameLoop(...).frames()` is now
`model.frames(prompt, settings)` (serving/engine.py `frames_alone`: a one-row engine on the
calling thread), and `resolve_settings` lives in decode_settings.py. Delete this module once
nothing imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .decode_settings import DecodeSettings, resolve_settings
from .prompt import Prompt, SpecialTextVectors
from .talker import Talker

__all__ = ["FrameLoop", "resolve_settings"]


@dataclass
class _TalkerOnly:
    """What the engine reads of a model for a codes-only request."""

    talker: Talker
    special: SpecialTextVectors
    quantization: object = None

    @property
    def device(self) -> torch.device:
        return self.talker.device

    @property
    def dtype(self) -> torch.dtype:
        return self.talker.dtype


class FrameLoop:
    """The code frames of one planned request through the engine (see the module doc)."""

    def __init__(
        self, talker: Talker, special: SpecialTextVectors, prompt: Prompt, settings: DecodeSettings
    ) -> None:
        self._model = _TalkerOnly(talker, special)
        self.prompt, self.settings = prompt, settings
        self._frames: Iterator[torch.Tensor] | None = None

    def frames(self) -> Iterator[torch.Tensor]:
        from .serving.engine import frames_alone

        self._frames = frames_alone(self._model, self.prompt, self.settings)
        return self._frames

    def release(self) -> None:
        if self._frames is not None:
            self._frames.close()
