"""Continuous batching: one thread steps every active Qwen3-TTS stream together.

scheduler = Scheduler(model, max_batch=8)
for chunk in scheduler.submit("Hello", voice, seed=1):   # same chunks as model.stream
    play(chunk.audio)

Each scheduler step: drop the rows that were stopped or cancelled (their row and span are free
at once) -> admit waiting requests while a row and a span of the KV arena are free -> run one
prefill chunk (at most `prefill_chunk` prompt positions) of the oldest joining request -> one
decode step for every decoding row (or, while a row has not delivered its first chunk, for the
rows in that state alone: FIRST_CHUNK_PRIORITY_FRAMES): c0 per row, one batched 15-pass code
predictor, chunks whose cadence is due decoded and handed to their consumers, one batched talker
step. A joining request thus delays the running ones by one prefill chunk per step and a few
steps of its own, never by its whole prompt.

Every model computation of the served model runs on this one thread: the steps, and, through
`call`, each request's prompt and each voice. A CPU build of torch parallelizes its ops with
OpenMP, whose team of worker threads belongs to the thread that made it and lives as long as
it; once two such teams exist in a process (more OpenMP threads than cores), libgomp stops
spinning between parallel regions and every region pays a sleep and wake-up. Measured here
(2 cores, 0.6B int8): one stream took 107 ms a frame alone and ~200 ms after any other thread
had run one parallel op, even with that thread idle.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import torch

from ....audio.cadence import Cadence
from ....engine.model_thread import run_on_passing_thread
from ..decode_loop import step_input
from ..model import AudioChunk, Qwen3TTSModel, Voice
from ..sampling import draw_rows
from .model_runner import ModelRunner
from .sequence import Sequence, Status

log = logging.getLogger(__name__)

DEFAULT_POSITIONS_PER_ROW = 1024  # arena size per row of --max-batch: ~80 s of audio per row
DEFAULT_PREFILL_CHUNK = 128  # prompt positions per step while other rows decode
# A row that has not delivered its first chunk steps alone (with other such rows) for up to this
# many frames: a joiner hears its first audio after steps at its own batch size, not at the
# full batch's, while the running rows wait those few cheap steps (their gap grows by that
# much, far less than one steady chunk). Rows are batch-invariant, so no codes change. However
# many requests keep joining, the running rows are never held back more than this many steps
# in a row.
FIRST_CHUNK_PRIORITY_FRAMES = 4


class Scheduler:
    def __init__(
        self,
        model: Qwen3TTSModel,
        max_batch: int = 8,
        cache_positions: int | None = None,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
    ) -> None:
        """cache_positions: the talker KV arena shared by all rows (default
        max_batch * 1024); a request reserves its prompt + frame limit there when admitted."""
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        self.model = model
        self.prefill_chunk = int(prefill_chunk)
        self._waiting: deque[Sequence] = deque()
        self._prefilling: list[Sequence] = []
        self._decoding: list[Sequence] = []
        self._calls: deque[tuple[Future, Callable[[], Any]]] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._held_back = 0  # consecutive steps that left running rows out (priority steps)
        capacity = cache_positions or max_batch * DEFAULT_POSITIONS_PER_ROW
        # built on a thread that ends (its RoPE table is a parallel op: see the module doc); the
        # loop thread starts on first use, so a scheduler never used holds no thread
        self.runner = run_on_passing_thread(lambda: ModelRunner(model, max_batch, capacity))
        self.max_batch = self.runner.max_batch

    # ------------------------------------------------------------------ consumer side
    def submit(
        self,
        text: str,
        voice: Voice,
        language: str | None = "auto",
        *,
        first_chunk_frames: int = 2,
        chunk_frames: int = 6,
        should_stop: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> SequenceStream:
        """Validate now (ValueError / TypeError, as `model.stream`) and queue the request; the
        returned stream yields its AudioChunks. `kwargs`: those of `model.stream`."""
        cadence = Cadence(first_chunk_frames, chunk_frames)  # ValueError below 1
        prompt, settings = self.call(self.model.plan, text, voice, language, **kwargs)
        self.model._codec()  # no codec: fail now
        seq = Sequence(self.model.talker, prompt, settings, voice,
                       cadence, should_stop or _never)  # fmt: skip
        if seq.prompt_len + 1 > self.runner.capacity:
            raise ValueError(
                f"the prompt takes {seq.prompt_len} positions; the cache holds "
                f"{self.runner.capacity}: use a shorter reference clip or text"
            )
        seq.cap_to(self.runner.capacity)
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._waiting.append(seq)
            self._start()
            self._cond.notify_all()
        return SequenceStream(seq, self._cond)

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` run on the scheduler's thread between two steps (see the module
        doc: the served model computes on one thread); its result, or its exception, here."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._calls.append((future, lambda: fn(*args, **kwargs)))
            self._start()
            self._cond.notify_all()
        return future.result()

    @property
    def active(self) -> int:
        """Rows in use (prefilling or decoding)."""
        return len(self._prefilling) + len(self._decoding)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def close(self) -> None:
        """Stop the thread; requests still queued or running end without a final chunk."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    # ------------------------------------------------------------------ the loop
    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tts-scheduler", daemon=True)
            self._thread.start()

    def _has_work(self) -> bool:
        return bool(self._calls or self._waiting or self._prefilling or self._decoding)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._has_work() and not self._closed:
                    self._cond.wait()
                if self._closed:
                    break
            try:
                self._step()
            except Exception as error:  # noqa: BLE001 - a bug outside a guarded step: fail
                log.exception("scheduler step failed; ending every request")
                with self._cond:
                    failed = [*self._waiting, *self._prefilling, *self._decoding]
                    self._waiting.clear()
                for seq in failed:
                    self._finish(seq, error)
        for seq in [*self._waiting, *self._prefilling, *self._decoding]:
            self._finish(seq)
        with self._cond:
            calls, self._calls = list(self._calls), deque()
        for future, _ in calls:
            future.set_exception(RuntimeError("the scheduler is closed"))

    def _run_calls(self) -> None:
        """The calls queued before this step; later ones wait for the next (a voice made here
        pauses the running rows for its own time, as it used to slow them from a second thread)."""
        with self._cond:
            calls, self._calls = list(self._calls), deque()
        for future, work in calls:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as error:  # noqa: BLE001 - raised to the caller
                    future.set_exception(error)

    def _step(self) -> None:
        self._run_calls()
        if not (self._waiting or self._prefilling or self._decoding):
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
        c0 = torch.cat(c0s)
        codes = self.runner.predict(going, c0, _row_chooser(going))
        stepping, inputs = [], []
        for row, seq in enumerate(going):
            frame = torch.cat([c0[row : row + 1], codes[row]])  # (G,)
            seq.add_frame(frame, rows)
            if seq.at_limit:
                self._deliver(seq, seq.limit_reason)
                continue
            if seq.chunk_due:
                self._deliver(seq, None)
            stepping.append(seq)
            inputs.append(self._step_input(seq, frame))
        if stepping:
            self.runner.talker_step(stepping, torch.cat(inputs))

    def _step_input(self, seq: Sequence, frame: torch.Tensor) -> torch.Tensor:
        model = self.model
        return step_input(model.talker, model.special, seq.prompt, frame, seq.frames - 1)

    def _deliver(self, seq: Sequence, stop_reason: str | None) -> None:
        """Decode the pending frames into the next chunk; with a stop reason it is the last."""
        frames, waited_s, batch = seq.take_chunk()
        chunk = self.model.decode_chunk(seq.decoder_state, frames, waited_s, stop_reason, batch)
        seq.outbox.put(chunk)
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


def _row_chooser(seqs: list[Sequence]) -> Callable[[torch.Tensor], torch.Tensor]:
    """(R, V) logits of one code-predictor pass -> (R,) ids, each row with its own sampling
    parameters and generator (draw_rows: the same ids as each row drawn alone)."""
    params = [seq.settings.subtalker for seq in seqs]
    generators = [seq.generator for seq in seqs]
    return lambda logits: draw_rows(logits, params, generators)


class SequenceStream:
    """The chunks of one submitted request, in order. Closing it (or dropping it) stops the
    request: the scheduler frees its row at its next step."""

    def __init__(self, seq: Sequence, wake: threading.Condition) -> None:
        self._seq = seq
        self._wake = wake
        self._closed = False

    def __iter__(self) -> Iterator[AudioChunk]:
        return self

    def __next__(self) -> AudioChunk:
        if self._closed:
            raise StopIteration
        return self._seq.outbox.get()

    def close(self) -> None:
        if not (self._closed or self._seq.outbox.finished):
            self._closed = True
            self._seq.cancelled.set()
            with self._wake:
                self._wake.notify_all()

    def __del__(self) -> None:
        self._seq.cancelled.set()


def _never() -> bool:
    return False
