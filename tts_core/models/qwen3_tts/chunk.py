"""What a Qwen3-TTS stream hands out: its chunks (the runner's `deliver`) and, collected, the
whole utterance (`model.generate`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

SAMPLE_RATE = 24000


@dataclass
class AudioChunk:
    audio: np.ndarray  # float32 (frames * 1920,) at 24 kHz
    frames: int
    compute_s: float
    final: bool
    stop_reason: str | None
    codes: torch.Tensor  # (frames, G) int64
    batch_size: int = 1  # rows decoded together when this chunk's frames were made


@dataclass
class GenerationResult:
    audio: np.ndarray  # float32 (N * 1920,), reference removed
    codes: torch.Tensor  # (N, G) int64
    stop_reason: str
    sample_rate: int = SAMPLE_RATE
    seed: int | None = None  # the seed used: passed back, the same audio (models/contract.py)
