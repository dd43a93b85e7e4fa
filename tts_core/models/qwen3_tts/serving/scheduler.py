"""Continuous batching, served: one thread steps every active Qwen3-TTS stream together.

scheduler = Scheduler(model, max_batch=8)
for chunk in scheduler.submit("Hello", voice, seed=1):   # same chunks as model.stream
    play(chunk.audio)

The Scheduler is the served driver of the one engine (engine.py: BatchEngine, whose `step` it
runs; `model.stream` steps a one-row engine on its caller's thread instead): `submit` checks a
request and queues it, the loop thread steps while there is work, and each request's chunks
reach its consumer through its SequenceStream. A joining request delays the running ones by one
prefill chunk per step and a few steps of its own, never by its whole prompt.

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

from ....audio.cadence import Cadence
from ....engine.model_thread import run_on_passing_thread
from ..model import AudioChunk, Qwen3TTSModel, Voice
from .engine import DEFAULT_PREFILL_CHUNK, FIRST_CHUNK_PRIORITY_FRAMES, BatchEngine
from .model_runner import ModelRunner
from .sequence import Sequence

__all__ = ["FIRST_CHUNK_PRIORITY_FRAMES", "Scheduler", "SequenceStream"]

log = logging.getLogger(__name__)

DEFAULT_POSITIONS_PER_ROW = 1024  # arena size per row of --max-batch: ~80 s of audio per row


class Scheduler(BatchEngine):
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
        capacity = cache_positions or max_batch * DEFAULT_POSITIONS_PER_ROW
        # built on a thread that ends (its RoPE table is a parallel op: see the module doc); the
        # loop thread starts on first use, so a scheduler never used holds no thread
        runner = run_on_passing_thread(lambda: ModelRunner(model, max_batch, capacity))
        super().__init__(model, runner, prefill_chunk)
        self._calls: deque[tuple[Future, Callable[[], Any]]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False

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
        return bool(self._calls) or self.has_requests()

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
                self._finish_all(error)
        self._finish_all()
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
        self.step()


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
