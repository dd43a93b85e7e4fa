"""When a stream hands out a chunk: the one rule every model and the engine follow."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cadence:
    """A first chunk after `first` frames (small: low time to first audio), then one every
    `steady` frames (larger: fewer, cheaper decoder calls)."""

    first: int = 2
    steady: int = 6

    def __post_init__(self) -> None:
        if self.first < 1 or self.steady < 1:
            raise ValueError("first_chunk_frames and chunk_frames must be >= 1")

    def frames(self, chunks_out: int) -> int:
        """Frames of the chunk after `chunks_out` chunks were handed out."""
        return self.first if chunks_out == 0 else self.steady

    def due(self, pending: float, chunks_out: int) -> bool:
        """`pending` frames (a fraction for sample-counted audio) make the next chunk."""
        return pending >= self.frames(chunks_out)
