"""The one decode engine of Qwen3-TTS: the books of every active request and one step of them.

nano-vllm's shape: a step = schedule (rows that stopped leave, waiting requests join, who steps)
-> run (the ModelRunner's batched calls) -> postprocess (frames appended, chunks handed out).
Two drivers, the same step:

* served: `Scheduler` (scheduler.py) steps a BatchEngine of `max_batch` rows over the shared KV
  arena on its own loop thread, for every request of the app;
* alone: `model.stream` / `model.generate` / `model.frames` step a private one-row engine
  (`run_alone`) on the caller's thread, one step per frame as the consumer asks for chunks;
  its talker cache is made for that request (prompt + frame limit positions) and dropped when
  the request ends or its generator is closed. No thread is started.

A step: drop the rows that were stopped or cancelled (row and span free at once) -> admit
waiting requests while a row and a span are free -> one prefill chunk (at most `prefill_chunk`
prompt positions) of the oldest joining request -> one decode step for every decoding row (or,
while a row has not delivered its first chunk, for the rows in that state alone:
FIRST_CHUNK_PRIORITY_FRAMES). A decode step: the talker step each row's last frame left
pending (one batched call), c0 per row, the code predictor's 15 passes for all rows at once,
frames appended and the chunks that are due decoded and handed out. The talker step of a frame
runs at the start of the row's next step, so a chunk leaves as soon as its last frame exists (a
consumer on the stepping thread gets it one talker step sooner) and a row that leaves after its
chunk never pays for that step.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from ....audio.cadence import Cadence
from ..prompt import step_input
from ..sampling import draw_rows
from .model_runner import ModelRunner
from .sequence import Sequence, Status

if TYPE_CHECKING:
    from ..decode_settings import DecodeSettings
    from ..model import Qwen3TTSModel
    from ..prompt import Prompt

log = logging.getLogger(__name__)

DEFAULT_PREFILL_CHUNK = 128  # prompt positions per step while other rows decode
# A row that has not delivered its first chunk steps alone (with other such rows) for up to this
# many frames: a joiner hears its first audio after steps at its own batch size, not at the
# full batch's, while the running rows wait those few cheap steps (their gap grows by that
# much, far less than one steady chunk). Rows are batch-invariant, so no codes change. However
# many requests keep joining, the running rows are never held back more than this many steps
# in a row.
FIRST_CHUNK_PRIORITY_FRAMES = 4


class BatchEngine:
    def __init__(
        self,
        model: Qwen3TTSModel,
        runner: ModelRunner,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        isolate_failures: bool = True,
    ) -> None:
        """isolate_failures: a step that raises ends only the requests it touched, each with
        the error (served); False: the error leaves `step` (one request on its caller's thread)."""
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        self.model = model
        self.runner = runner
        self.max_batch = runner.max_batch
        self.prefill_chunk = int(prefill_chunk)
        self.isolate_failures = isolate_failures
        self._waiting: deque[Sequence] = deque()
        self._prefilling: list[Sequence] = []
        self._decoding: list[Sequence] = []
        self._cond = threading.Condition()  # guards _waiting (requests arrive from any thread)
        self._held_back = 0  # consecutive steps that left running rows out (priority steps)

    @classmethod
    def for_request(cls, model: Qwen3TTSModel, seq: Sequence) -> BatchEngine:
        """A private one-row engine for `seq` alone: its own talker cache of prompt + frame
        limit positions, the whole prompt in one prefill call (nothing else waits for it), the
        step's errors raised to the caller."""
        runner = ModelRunner.for_request(model, seq.positions_needed())
        return cls(model, runner, prefill_chunk=seq.prompt_len, isolate_failures=False)

    def add(self, seq: Sequence) -> None:
        """Queue a request (any thread); it joins at a step when a row and a span are free."""
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
            self._guarded(self._rows_to_step(), self._decode_step)

    def _rows_to_step(self) -> list[Sequence]:
        """Rows before their first chunk alone (see FIRST_CHUNK_PRIORITY_FRAMES), else all."""
        fresh = [seq for seq in self._decoding
                 if seq.before_first_chunk and seq.frames < FIRST_CHUNK_PRIORITY_FRAMES]  # fmt: skip
        if fresh and len(fresh) < len(self._decoding):
            if self._held_back < FIRST_CHUNK_PRIORITY_FRAMES:
                self._held_back += 1
                return fresh
        self._held_back = 0
        return list(self._decoding)

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
                    return  # first come, first served: wait until a span frees
                self._waiting.popleft()
            self._prefilling.append(seq)

    def _prefill(self, seqs: list[Sequence]) -> None:
        seq = seqs[0]
        if self.runner.prefill(seq, self.prefill_chunk):
            self._prefilling.remove(seq)
            seq.status = Status.DECODING
            self._decoding.append(seq)

    @torch.inference_mode()
    def _decode_step(self, seqs: list[Sequence]) -> None:
        behind = [seq for seq in seqs if seq.awaiting_step is not None]
        if behind:  # the talker steps the previous frames left pending, for all rows at once
            inputs = [self._step_input(seq) for seq in behind]
            self.runner.talker_step(behind, torch.cat(inputs) if len(inputs) > 1 else inputs[0])
            for seq in behind:
                seq.awaiting_step = None
        going, c0s = [], []
        for seq in seqs:
            c0 = seq.choose_c0()
            if seq.is_stop(c0):
                self._deliver(seq, "eos")
            else:
                going.append(seq)
                c0s.append(c0)
        if not going:
            return
        rows = len(going)
        c0 = torch.cat(c0s) if rows > 1 else c0s[0]
        codes = self.runner.predict(going, c0, _row_chooser(going))
        for row, seq in enumerate(going):
            frame = torch.cat([c0[row : row + 1], codes[row]])  # (G,)
            seq.add_frame(frame, rows)
            if seq.at_limit:
                self._deliver(seq, seq.limit_reason)
                continue
            seq.awaiting_step = frame
            if seq.chunk_due:
                self._deliver(seq, None)

    def _step_input(self, seq: Sequence) -> torch.Tensor:
        """The talker's input for `seq`'s last frame (index frames - 1)."""
        model = self.model
        frame = seq.awaiting_step
        return step_input(model.talker, model.special, seq.prompt, frame, seq.frames - 1)

    def _deliver(self, seq: Sequence, stop_reason: str | None) -> None:
        """Decode the pending frames into the next chunk; with a stop reason it is the last.
        A codes-only request (`audio=False`) gets the frames themselves."""
        frames, waited_s, batch = seq.take_chunk()
        if seq.audio:
            chunk = self.model.decode_chunk(seq.decoder_state, frames, waited_s, stop_reason,
                                            batch)  # fmt: skip
            seq.outbox.put(chunk)
        else:
            seq.outbox.put(frames)
        if stop_reason is not None:
            self._finish(seq)

    def _finish(self, seq: Sequence, failure: BaseException | None = None) -> None:
        """Take `seq` out of the batch, free its row and span, and end its stream (with
        `failure` raised to its consumer)."""
        for group in (self._prefilling, self._decoding):
            if seq in group:
                group.remove(seq)
        self.runner.release(seq)
        seq.outbox.end(failure)

    def _finish_all(self, failure: BaseException | None = None) -> None:
        """End every request, queued or running (no final chunk; `failure` raised to each)."""
        with self._cond:
            everyone = [*self._waiting, *self._prefilling, *self._decoding]
            self._waiting.clear()
        for seq in everyone:
            self._finish(seq, failure)


def _row_chooser(seqs: list[Sequence]) -> Callable[[torch.Tensor], torch.Tensor]:
    """(R, V) logits of one code-predictor pass -> (R,) ids, each row with its own sampling
    parameters and generator (draw_rows: the same ids as each row drawn alone)."""
    params = [seq.settings.subtalker for seq in seqs]
    generators = [seq.generator for seq in seqs]
    return lambda logits: draw_rows(logits, params, generators)


# ---------------------------------------------------------------------- one request, inline
class InlineOutbox:
    """The outbox of a request stepped by its own consumer (`run_alone`): what the step hands
    out waits here until the consumer's generator yields it; no thread, no lock."""

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.ended = False
        self.error: BaseException | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)

    def end(self, error: BaseException | None = None) -> None:
        self.ended, self.error = True, error


def run_alone(model: Qwen3TTSModel, seq: Sequence) -> Iterator[Any]:
    """What `seq` hands out (AudioChunks; lists of code frames for `audio=False`), stepped on
    the thread that iterates by a private one-row engine (`for_request`) made at the first
    `next()`. `seq` must have been made with an InlineOutbox. Checks the request's size against
    the talker now. Ends without a final item when the request was stopped; closing the
    generator frees its caches at once."""
    if not isinstance(seq.outbox, InlineOutbox):
        raise TypeError("run_alone needs a Sequence made with outbox=InlineOutbox()")
    model.talker.ensure_rope(seq.positions_needed())  # ValueError now: longer than the talker
    return _stepped_alone(model, seq)


def _stepped_alone(model: Qwen3TTSModel, seq: Sequence) -> Iterator[Any]:
    engine = BatchEngine.for_request(model, seq)
    engine.add(seq)
    outbox: InlineOutbox = seq.outbox
    try:
        while True:
            engine.step()
            if seq.status is Status.WAITING:  # cannot happen: the cache is made for it
                raise RuntimeError("a private engine did not admit its own request")
            while outbox.items:
                yield outbox.items.popleft()
                seq.restart_clock()
            if outbox.ended:
                if outbox.error is not None:
                    raise outbox.error
                return
    finally:
        engine._finish_all()


def frames_alone(
    model: Qwen3TTSModel, prompt: Prompt, settings: DecodeSettings
) -> Iterator[torch.Tensor]:
    """The (G,) int64 code frames of a planned request, without audio (no codec is needed),
    through `run_alone`: `model.frames`."""
    seq = Sequence(model.talker, prompt, settings, None, Cadence(1, 1), _never, audio=False,
                   outbox=InlineOutbox())  # fmt: skip
    runs = run_alone(model, seq)

    def frames() -> Iterator[torch.Tensor]:
        try:
            for chunk in runs:
                yield from chunk
        finally:
            runs.close()

    return frames()


def _never() -> bool:
    return False
