"""The engine's voices, built once per clip and transcript: a small LRU keyed by the clip's
samples (digest) and the transcript, shared by every request of the engine."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from .backend import Voice


class VoiceCache:
    def __init__(self, size: int) -> None:
        self.size = size
        self._voices: OrderedDict[tuple, Voice] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_build(
        self, reference: np.ndarray | None, reference_text: str | None, build: Callable[[], Voice]
    ) -> Voice:
        """The cached voice of this clip and transcript, or `build()` (called outside the
        lock: building may take seconds), kept as the most recent; the oldest beyond `size`
        are dropped."""
        key = (_digest(reference), reference_text)
        with self._lock:
            if key in self._voices:
                self._voices.move_to_end(key)
                return self._voices[key]
        voice = build()
        with self._lock:
            self._voices[key] = voice
            while len(self._voices) > self.size:
                self._voices.popitem(last=False)
        return voice


def _digest(audio: np.ndarray | None) -> str | None:
    if audio is None:
        return None
    return hashlib.sha1(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()
