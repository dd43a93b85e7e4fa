"""Per-request latency bookkeeping: time to first audio, per-chunk compute, real-time factor."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestStats:
    backend: str
    model: str
    device: str
    sample_rate: int
    weight_format: str | None = None  # "float32", "bfloat16", "int8"; None: no neural weights
    started: float = field(default_factory=time.perf_counter)
    queue_wait_s: float = 0.0
    voice_s: float = 0.0
    time_to_first_audio_s: float | None = None
    chunk_compute_s: list[float] = field(default_factory=list)
    chunk_audio_s: list[float] = field(default_factory=list)
    chunk_batch_size: list[int | None] = field(default_factory=list)  # None: not batched
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (wall s, audio s so far)
    stop_reason: str | None = None
    done: bool = False
    notices: list[str] = field(default_factory=list)
    voice: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None  # set when the request finishes
    seed: int | None = None  # the seed the request ran on: passed back, the same audio
    # as_dict's per-chunk lists, rounded once as each chunk comes: every event carries its
    # request's stats so far, which rounded afresh cost O(chunks) a chunk on the event loop
    _rounded: dict[str, list] = field(
        default_factory=lambda: {"chunk_compute_s": [], "chunk_audio_s": [], "timeline": []},
        repr=False,
    )

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def add_chunk(self, samples: int, compute_s: float, batch_size: int | None = None) -> None:
        now = self.elapsed()
        if self.time_to_first_audio_s is None:
            self.time_to_first_audio_s = now
        self.chunk_compute_s.append(compute_s)
        self.chunk_audio_s.append(samples / self.sample_rate)
        self.chunk_batch_size.append(batch_size)
        audio_s = self.audio_s
        self.timeline.append((now, audio_s))
        rounded = self._rounded
        rounded["chunk_compute_s"].append(_round(compute_s))
        rounded["chunk_audio_s"].append(_round(self.chunk_audio_s[-1]))
        rounded["timeline"].append((_round(now), _round(audio_s)))

    def finish(self, stop_reason: str) -> None:
        self.stop_reason = stop_reason
        self.done = True
        self.wall_s = self.elapsed()

    @property
    def audio_s(self) -> float:
        return float(sum(self.chunk_audio_s))

    @property
    def compute_s(self) -> float:
        return float(sum(self.chunk_compute_s))

    @property
    def real_time_factor(self) -> float | None:
        """Compute seconds per audio second (< 1: faster than real time)."""
        return self.compute_s / self.audio_s if self.audio_s > 0 else None

    def as_dict(self) -> dict[str, Any]:
        wall = self.wall_s if self.done else self.elapsed()
        rtf = self.real_time_factor
        return {
            "backend": self.backend,
            "model": self.model,
            "device": self.device,
            "weight_format": self.weight_format,
            "sample_rate": self.sample_rate,
            "time_to_first_audio_s": _round(self.time_to_first_audio_s),
            "queue_wait_s": _round(self.queue_wait_s),
            "voice_s": _round(self.voice_s),
            "chunks": len(self.chunk_audio_s),
            "audio_s": _round(self.audio_s),
            "compute_s": _round(self.compute_s),
            "wall_s": _round(wall),
            "real_time_factor": _round(rtf),
            "chunk_compute_s": list(self._rounded["chunk_compute_s"]),
            "chunk_audio_s": list(self._rounded["chunk_audio_s"]),
            "chunk_batch_size": list(self.chunk_batch_size),
            "timeline": [[w, a] for w, a in self._rounded["timeline"]],
            "done": self.done,
            "stop_reason": self.stop_reason,
            "notices": list(self.notices),
            "voice": dict(self.voice),
            "seed": self.seed,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
