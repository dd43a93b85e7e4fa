"""Joins streamed pieces into one continuous signal, with Hann crossfades at independent joins.

Pieces come from a backend in order. A piece flagged `independent` starts a new, separately
synthesized phrase: its head is overlap-added onto the previous phrase's tail. Pieces that
continue the same synthesis (a neural decoder's exact chunks) are concatenated untouched. The
very first samples fade in and the very last fade out. To do both, the joiner always holds
back the last `max(overlap, fade)` samples until it knows what follows them.
"""

from __future__ import annotations

import numpy as np

from .pcm import hann_rise

_EMPTY = np.zeros(0, dtype=np.float32)


class ChunkJoiner:
    def __init__(self, overlap: int, fade: int) -> None:
        self.overlap = max(0, int(overlap))
        self.fade = max(0, int(fade))
        self._hold = max(self.overlap, self.fade)
        self._held = _EMPTY
        self._faded_in = 0  # how many leading samples already went through the fade-in

    @property
    def held(self) -> int:
        """Samples received but not yet released (they wait for what follows them)."""
        return int(self._held.size)

    def push(self, piece: np.ndarray, independent: bool = False) -> np.ndarray:
        """Add a piece; returns the samples that are now final (may be empty)."""
        piece = self._fade_in(np.asarray(piece, dtype=np.float32).copy())
        if piece.size == 0:
            return _EMPTY
        if independent and self.overlap > 0 and self._held.size > 0:
            joined = self._crossfade(self._held, piece)
        else:
            joined = np.concatenate([self._held, piece])
        cut = max(0, joined.size - self._hold)
        self._held = joined[cut:]
        return joined[:cut]

    def finish(self) -> np.ndarray:
        """Flush the held tail, faded out."""
        tail, self._held = self._held, _EMPTY
        if self.fade > 0 and tail.size > 0:
            length = min(self.fade, tail.size)
            tail = tail.copy()
            tail[-length:] *= hann_rise(length)[::-1]
        return tail

    def _fade_in(self, piece: np.ndarray) -> np.ndarray:
        if self._faded_in >= self.fade or piece.size == 0:
            return piece
        window = hann_rise(self.fade)[self._faded_in : self._faded_in + piece.size]
        piece[: window.size] *= window
        self._faded_in += window.size
        return piece

    def _crossfade(self, held: np.ndarray, piece: np.ndarray) -> np.ndarray:
        length = min(self.overlap, held.size, piece.size)
        rise = hann_rise(length)
        mixed = held[held.size - length :] * (1.0 - rise) + piece[:length] * rise
        return np.concatenate([held[: held.size - length], mixed, piece[length:]])
