"""A fake model on the serving engine's `StepModel` protocol, for tests/test_serving_*.py: each
request's frames are its own arithmetic (seed * 1000 + index), so a request gives the same
frames and chunks alone and in any batch, and the test sees every call the engine makes."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tts_core.audio.cadence import Cadence
from tts_core.serving import Sequence

CADENCE = Cadence(first=2, steady=3)


class FakeRequest(Sequence):
    """`wanted` frames, then the model's stop ("end"); a prompt of `prompt` positions; its
    decode raises at frame `fail_at`; `ready` cleared: it waits for input (text still to come);
    `size`: the runner's room it takes (cache blocks)."""

    def __init__(
        self,
        seed: int,
        wanted: int = 7,
        *,
        prompt: int = 1,
        fail_at: int | None = None,
        size: int = 1,
        should_stop: Callable[[], bool] = lambda: False,
        cadence: Cadence = CADENCE,
        outbox: object = None,
    ) -> None:
        super().__init__(cadence, should_stop, limit=100, limit_reason="limit", outbox=outbox)
        self.seed, self.wanted, self.prompt, self.fail_at = seed, wanted, prompt, fail_at
        self.size, self.prefilled = size, 0
        self.ready = threading.Event()
        self.ready.set()

    @property
    def input_ready(self) -> bool:
        return self.ready.is_set()

    def frame(self) -> int:
        return self.seed * 1000 + self.frames


class FakeRunner:
    """A StepModel that records what the engine asks of it. `room`: the cache it can give the
    admitted requests at once, in units of FakeRequest.size (None: unbounded); `on_decode(seqs)` runs before each decode step (a test
    holds the stepping thread there)."""

    def __init__(self, max_batch: int = 4, room: int | None = None) -> None:
        self.max_batch = max_batch
        self.room = room
        self.admitted: list[int] = []  # seeds, in the order admitted
        self.used = 0  # room taken by the admitted requests not yet released
        self.released: list[int] = []  # seeds, each once
        self.batches: list[list[int]] = []  # the seeds of each decode step
        self.prefills: list[tuple[int, int]] = []  # (seed, positions done) per prefill call
        self.on_decode: Callable[[list[FakeRequest]], None] = lambda seqs: None
        self.release_seen = threading.Condition()

    def admit(self, seq: FakeRequest) -> bool:
        if self.room is not None and self.used + seq.size > self.room:
            return False
        self.used += seq.size
        self.admitted.append(seq.seed)
        return True

    def prefill(self, seq: FakeRequest, positions: int) -> bool:
        seq.prefilled = min(seq.prompt, seq.prefilled + positions)
        self.prefills.append((seq.seed, seq.prefilled))
        return seq.prefilled == seq.prompt

    def decode(self, seqs: list[FakeRequest], out) -> None:  # noqa: ANN001 - the engine
        self.on_decode(seqs)
        self.batches.append([seq.seed for seq in seqs])
        for seq in seqs:
            if seq.frames == seq.fail_at:
                raise RuntimeError(f"decode failed for request {seq.seed}")
        for seq in seqs:
            last = seq.frames + 1 == seq.wanted
            out.emit(seq, seq.frame(), len(seqs), "end" if last else None)

    def deliver(self, seq, frames, compute_s, stop_reason, batch):  # noqa: ANN001, ANN201
        return (tuple(frames), stop_reason)

    def release(self, seq: FakeRequest) -> None:
        with self.release_seen:
            if seq.seed not in self.released:
                self.released.append(seq.seed)
                self.used -= seq.size if seq.seed in self.admitted else 0
            self.release_seen.notify_all()

    def wait_released(self, seed: int, timeout: float) -> bool:
        """True once `seed`'s row was released (False: not within `timeout`, a hang)."""
        with self.release_seen:
            return self.release_seen.wait_for(lambda: seed in self.released, timeout)


def expected_chunks(seed: int, wanted: int, cadence: Cadence = CADENCE) -> list[tuple]:
    """The chunks of a request alone, from the cadence: `first` frames, then `steady` ones,
    the last chunk with the rest and the stop reason."""
    frames = [seed * 1000 + i for i in range(wanted)]
    chunks, start, size = [], 0, cadence.first
    while start + size < wanted:
        chunks.append((tuple(frames[start : start + size]), None))
        start, size = start + size, cadence.steady
    chunks.append((tuple(frames[start:]), "end"))
    return chunks
