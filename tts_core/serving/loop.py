"""The served driver of the engine: one thread steps every active request of a model together.

`EngineLoop` is a BatchEngine stepped on its own loop thread while there is work, for any model:
made with the model's runner (its `StepModel`) and its `make_request` (the caller's arguments ->
a checked request), `submit` builds a request on the loop thread and queues it; each request's
chunks reach its consumer through its RequestStream.

Every computation of the served model runs on this one thread: the steps, and, through `call`,
each request's prompt and each voice. A CPU build of torch parallelizes its ops with OpenMP,
whose team of worker threads belongs to the thread that made it and lives as long as it; once
two such teams exist in a process (more OpenMP threads than cores), libgomp stops spinning
between parallel regions and every region pays a sleep and wake-up. Measured here (2 cores,
Qwen3 0.6B int8): one stream took 107 ms a frame alone and ~200 ms after any other thread had
run one parallel op, even with that thread idle.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from ..engine.awaiting import wait_future
from .batch import DEFAULT_PREFILL_CHUNK, BatchEngine, StepModel
from .sequence import Sequence

log = logging.getLogger(__name__)

# Loops whose thread runs: stopped at interpreter exit, before daemon threads are cut off. A
# loop thread still inside a torch op then would be ended by pthread_exit unwinding through a
# C++ noexcept frame: "terminate called without an active exception", exit status -6 (seen
# when a script exited right after its last request, on a loaded box).
_RUNNING: weakref.WeakSet[EngineLoop] = weakref.WeakSet()


@atexit.register
def _stop_running_loops() -> None:
    for loop in list(_RUNNING):
        loop.close()


class EngineLoop(BatchEngine):
    def __init__(
        self,
        runner: StepModel,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        thread_name: str = "tts-scheduler",
        make_request: Callable[..., Sequence] | None = None,
    ) -> None:
        """make_request: what `submit` calls (on the loop thread) with its arguments to build a
        checked request. The loop thread starts on first use, so a loop never used holds no
        thread."""
        super().__init__(runner, prefill_chunk)
        self._make_request = make_request
        self._calls: deque[tuple[Future, Callable[[], Any]]] = deque()
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name
        self._closed = False

    # ------------------------------------------------------------------ consumer side
    def submit(self, *args: Any, **kwargs: Any) -> RequestStream:
        """Build the request from these arguments on the loop thread (its errors raised here:
        nothing is queued) and queue it; its chunks come through the returned stream."""
        if self._make_request is None:
            raise TypeError("this loop was made without make_request: use enqueue")
        return self.enqueue(self.call(self._make_request, *args, **kwargs))

    def enqueue(self, seq: Sequence) -> RequestStream:
        """Queue a checked request; its chunks come through the returned stream."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._waiting.append(seq)
            self._start()
            self._cond.notify_all()
        return RequestStream(seq, self._cond)

    def wake(self) -> None:
        """Input arrived for a waiting row (Sequence.input_ready): step again (any thread)."""
        with self._cond:
            self._cond.notify_all()

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` run on the loop thread between two steps (see the module
        doc: the served model computes on one thread); its result, or its exception, here
        (awaited, not blocking, for a caller on the event loop: engine/awaiting.py)."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._calls.append((future, lambda: fn(*args, **kwargs)))
            self._start()
            self._cond.notify_all()
        return wait_future(future)

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
            self._thread = threading.Thread(target=self._loop, name=self._thread_name, daemon=True)
            self._thread.start()
            _RUNNING.add(self)

    def _has_work(self) -> bool:
        return bool(self._calls) or self.has_work()

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


class RequestStream:
    """The chunks of one enqueued request, in order. Closing it (or dropping it) stops the
    request: the loop frees its row at its next step."""

    def __init__(self, seq: Sequence, wake: threading.Condition) -> None:
        self._seq = seq
        self._wake = wake
        self._closed = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
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
        """A consumer gone without close: stop the request and wake the loop (it may be
        asleep with every row waiting for input, this one included)."""
        self._seq.cancelled.set()
        with self._wake:
            self._wake.notify_all()
