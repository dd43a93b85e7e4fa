"""The fixed work every benchmark shares (both environments import this; no torch here)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REF_CLIP = REPO / "tests" / "fixtures" / "ref_clip_24k.wav"  # 3 s, 24 kHz mono
REF_TEXT = "This is the reference transcript of the clip."
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away."
LANGUAGE = "english"
FRAME_S = 0.08  # one codec frame: 1920 samples at 24 kHz


def mean_ms(seconds: list[float]) -> float:
    return 1000.0 * sum(seconds) / len(seconds) if seconds else 0.0


@dataclass
class Calls:
    """Wall time of every call of one wrapped method, with a size per call."""

    seconds: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # perf_counter at each call's start

    def clear(self) -> None:
        self.seconds.clear()
        self.sizes.clear()
        self.starts.clear()

    def ms(self, keep: Callable[[int], bool] = lambda n: True) -> list[float]:
        return [1000 * s for s, n in zip(self.seconds, self.sizes, strict=True) if keep(n)]


def wrap(owner: object, name: str, size_of: Callable = lambda args, kwargs: 1) -> Calls:
    """Replace owner.name by a timed pass-through (an instance attribute); size_of(args,
    kwargs) labels each call."""
    inner = getattr(owner, name)
    calls = Calls()

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            calls.seconds.append(time.perf_counter() - start)
            calls.sizes.append(size_of(args, kwargs))
            calls.starts.append(start)

    setattr(owner, name, timed)
    return calls
