"""The one decode engine of every neural model: the books of every active request and one step
of them (nano-vllm's engine/ shape: schedule -> run -> postprocess, step-driven).

A model plugs in through a `StepModel` (its "runner"): admit a request (its cache and decoder
state), prefill its prompt, one decode step for a batch of rows, a row's pending frames
delivered as a chunk (audio decoded on the row's own decoder state), release. The engine owns
the rest, the same for Qwen3-TTS and VoxCPM2:

* a step: drop the rows that were stopped or cancelled (their resources free at once) -> admit
  waiting requests while fewer than `max_batch` rows run and the runner has room (first come,
  first served) -> one prefill chunk (at most `prefill_chunk` prompt positions) of the oldest
  joining request -> one decode step for every decoding row, or, while a row has not delivered
  its first chunk, for the rows in that state alone (FIRST_CHUNK_PRIORITY_FRAMES);
* a decode step's outcome per row (`emit`): its new frame appended, the request ended at its
  frame limit or with the model's stop reason, the chunk handed out when its cadence is due;
* failures: a step that raises ends only the requests it touched, each with the error
  (`isolate_failures`; False: the error leaves `step`, for one request on its caller's thread).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from .sequence import Sequence, Status

log = logging.getLogger(__name__)

DEFAULT_PREFILL_CHUNK = 128  # prompt positions per step while other rows decode
# A row before its first chunk steps alone (with other such rows) for up to this many frames:
# a joiner hears its first audio after steps at its own batch size, while the running rows wait
# those few steps (far less than one steady chunk; rows are batch-invariant, so no frame
# changes), never more than this many steps in a row however many requests keep joining.
FIRST_CHUNK_PRIORITY_FRAMES = 4


class StepModel(Protocol):
    """What a model implements to run on the engine (Qwen3's `Qwen3Runner`, VoxCPM2's
    `VoxRunner`). Every method runs on the stepping thread."""

    max_batch: int

    def admit(self, seq: Any) -> bool:
        """Give `seq` what it needs to run (cache, decoder state); False: no room yet."""

    def prefill(self, seq: Any, positions: int) -> bool:
        """Up to `positions` more prompt positions of `seq`; True when its prompt is done."""

    def decode(self, seqs: list[Any], out: BatchEngine) -> None:
        """One decode step of these rows together; each row's outcome to `out.emit`."""

    def deliver(
        self, seq: Any, frames: list[Any], compute_s: float, stop_reason: str | None, batch: int
    ) -> Any:
        """`seq`'s next chunk from its pending `frames` (may be none, on a final chunk)."""

    def release(self, seq: Any) -> None:
        """Free what `admit` and the steps gave `seq` (called once or more: idempotent)."""


class BatchEngine:
    def __init__(
        self,
        runner: StepModel,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        isolate_failures: bool = True,
    ) -> None:
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        self.runner = runner
        self.max_batch = runner.max_batch
        self.prefill_chunk = int(prefill_chunk)
        self.isolate_failures = isolate_failures
        self._waiting: deque[Sequence] = deque()
        self._prefilling: list[Sequence] = []
        self._decoding: list[Sequence] = []
        self._cond = threading.Condition()  # guards _waiting (requests arrive from any thread)
        self._held_back = 0  # consecutive steps that left running rows out (priority steps)

    def add(self, seq: Sequence) -> None:
        """Queue a request (any thread); it joins at a step when a row is free."""
        with self._cond:
            self._waiting.append(seq)

    @property
    def active(self) -> int:
        """Rows in use (prefilling or decoding)."""
        return len(self._prefilling) + len(self._decoding)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def has_requests(self) -> bool:
        return bool(self._waiting or self._prefilling or self._decoding)

    # ------------------------------------------------------------------ one step
    def step(self) -> None:
        """Schedule -> run -> postprocess, once (see the module doc)."""
        if not self.has_requests():
            return
        self._drop_stopped()
        self._admit()
        if self._prefilling:
            self._guarded(self._prefilling[:1], self._prefill)
        if self._decoding:
            rows = self._rows_to_step()
            if rows:
                self._guarded(rows, self._decode_step)

    def has_work(self) -> bool:
        """Anything a step would do now: requests to admit or prefill, a decoding row whose
        input is there, or one to drop (rows waiting for input alone leave nothing to do)."""
        with self._cond:
            if self._waiting:
                return True
        if self._prefilling:
            return True
        return any(seq.input_ready or seq.cancelled.is_set() for seq in self._decoding)

    def _rows_to_step(self) -> list[Sequence]:
        """The rows whose input is there (`Sequence.input_ready`; the others wait, holding their
        cache and state); of those, rows before their first chunk alone (see
        FIRST_CHUNK_PRIORITY_FRAMES), else all."""
        ready = [seq for seq in self._decoding if seq.input_ready]
        fresh = [
            seq
            for seq in ready
            if seq.before_first_chunk and seq.frames < FIRST_CHUNK_PRIORITY_FRAMES
        ]
        if fresh and len(fresh) < len(ready):
            if self._held_back < FIRST_CHUNK_PRIORITY_FRAMES:
                self._held_back += 1
                return fresh
        self._held_back = 0
        return ready

    def _guarded(self, seqs: list[Sequence], work: Callable[[list[Sequence]], None]) -> None:
        """Run `work`; if it raises, the rows it touched fail with the error, the rest go on."""
        if not self.isolate_failures:
            work(seqs)
            return
        try:
            work(seqs)
        except Exception as error:  # noqa: BLE001 - handed to each consumer, raised there
            log.exception("batch step failed for %d request(s)", len(seqs))
            for seq in seqs:
                self._finish(seq, error)

    def _drop_stopped(self) -> None:
        """Rows whose consumer closed the stream or whose should_stop answers True leave now
        (a should_stop that raises ends its own request with that error, no other)."""
        with self._cond:
            everyone = [*self._waiting, *self._prefilling, *self._decoding]
        for seq in everyone:
            try:
                stop, failure = seq.stopped, None
            except Exception as error:  # noqa: BLE001 - the consumer's callback failed
                stop, failure = True, error
            if stop:
                with self._cond:
                    if seq in self._waiting:
                        self._waiting.remove(seq)
                self._finish(seq, failure)

    def _admit(self) -> None:
        while self.active < self.max_batch:
            with self._cond:
                if not self._waiting:
                    return
                seq = self._waiting[0]
                try:
                    admitted = self.runner.admit(seq)
                except Exception as error:  # noqa: BLE001 - e.g. the voice's decoder state
                    self._waiting.popleft()
                    self._finish(seq, error)
                    continue
                if not admitted:
                    return  # first come, first served: wait until room frees
                self._waiting.popleft()
            seq.status = Status.PREFILL
            self._prefilling.append(seq)

    def _prefill(self, seqs: list[Sequence]) -> None:
        seq = seqs[0]
        if self.runner.prefill(seq, self.prefill_chunk):
            self._prefilling.remove(seq)
            seq.status = Status.DECODING
            self._decoding.append(seq)

    def _decode_step(self, seqs: list[Sequence]) -> None:
        self.runner.decode(seqs, self)

    def emit(self, seq: Sequence, frame: Any, batch: int, stop_reason: str | None = None) -> None:
        """One row's outcome of a decode step: its new `frame` (made in a batch of `batch`
        rows), or None when it ends without one; `stop_reason`: the model ended it (after the
        frame, if any). The frame limit ends it too; a due chunk is handed out now."""
        if frame is not None:
            seq.add_frame(frame, batch)
            if stop_reason is None and seq.at_limit:
                stop_reason = seq.limit_reason
        if stop_reason is not None:
            self._deliver(seq, stop_reason)
        elif seq.chunk_due:
            self._deliver(seq, None)

    def _deliver(self, seq: Sequence, stop_reason: str | None) -> None:
        """The pending frames as the next chunk; with a stop reason it is the last."""
        frames, waited_s, batch = seq.take_chunk()
        seq.outbox.put(self.runner.deliver(seq, frames, waited_s, stop_reason, batch))
        if stop_reason is not None:
            self._finish(seq)

    def _finish(self, seq: Sequence, failure: BaseException | None = None) -> None:
        """Take `seq` out of the batch, free its row, and end its stream (with `failure`
        raised to its consumer)."""
        for group in (self._prefilling, self._decoding):
            if seq in group:
                group.remove(seq)
        self.runner.release(seq)
        seq.status = Status.DONE
        seq.outbox.end(failure)

    def _finish_all(self, failure: BaseException | None = None) -> None:
        """End every request, queued or running (no final chunk; `failure` raised to each)."""
        with self._cond:
            everyone = [*self._waiting, *self._prefilling, *self._decoding]
            self._waiting.clear()
        for seq in everyone:
            self._finish(seq, failure)
