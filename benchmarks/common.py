"""The fixed work every benchmark shares (both environments import this; no torch here)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REF_CLIP = REPO / "tests" / "fixtures" / "ref_clip_24k.wav"  # 3 s, 24 kHz mono
REF_TEXT = "This is the reference transcript of the clip."
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away."
LANGUAGE = "english"
FRAME_S = 0.08  # one codec frame: 1920 samples at 24 kHz


def mean_ms(seconds: list[float]) -> float:
    return 1000.0 * sum(seconds) / len(seconds) if seconds else 0.0
