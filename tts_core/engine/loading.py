"""The engine while its model downloads and loads: the server is up at once.

`EngineSlot` holds the engine once it exists and, before that, where its loading stands
(`LoadProgress`: downloading n of m bytes, then loading). A request that arrives meanwhile
gets `ModelLoading`, an `EngineBusy`: HTTP 503 with Retry-After, "the model is loading
(n %)" in the page. Every surface takes the engine from the slot per request, so nothing is
captured before it is ready.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from .admission import CLOSED_RETRY_AFTER_S
from .engine import Engine
from .errors import BackendError, EngineBusy, redact_paths
from .model_thread import run_on_passing_thread

log = logging.getLogger(__name__)

STARTING, DOWNLOADING, LOADING, WARMING, FALLING_BACK, READY, FAILED = (
    "starting",
    "downloading",
    "loading",
    "warming",
    "falling_back",
    "ready",
    "failed",
)
RETRY_AFTER_S = 5  # what a request during loading is told; the page polls on its own
SHUTTING_DOWN = "The server is shutting down; please retry in a few seconds."
CANCEL_GRACE_S = 5.0  # cancelled requests stop within a chunk: this bounds a stuck backend

# Background loads: at interpreter exit each is stopped at its next step (its next `report`
# raises LoadCancelled) and joined, before the interpreter cuts daemon threads off: a load cut
# off inside a torch op aborts the process (pthread_exit unwinding through a C++ noexcept frame:
# "terminate called without an active exception"), as a loop would (serving/loop.py).
_LOADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_EXITING = threading.Event()


class LoadCancelled(BaseException):
    """The process is exiting. Not an Exception: no `except Exception` on its way (the fallback
    to eSpeak) takes it for a failed load."""


@atexit.register
def _stop_loads() -> None:
    _EXITING.set()
    for thread in list(_LOADS):
        # no timeout: cutting it off is the abort avoided here. It stops at its next report
        # (the download's next bytes, the end of reading the weights); Ctrl+C ends the wait
        thread.join()


@dataclass(frozen=True)
class LoadProgress:
    phase: str  # STARTING -> DOWNLOADING (Hub only) -> LOADING -> WARMING (the built-in
    # voices are prepared) -> READY, or FAILED; or
    model: str  # ... -> FALLING_BACK (the offline voice starts instead) -> READY
    done: float = 0.0  # downloaded so far, in `unit`
    total: float | None = None  # None: not known (yet)
    unit: str = "B"  # "B" (bytes) or "files" (huggingface_hub versions without a bytes bar)
    error: str | None = None  # FAILED: why, in plain words

    @property
    def fraction(self) -> float | None:
        """Of the download (None while its size is unknown, 1.0 once past it)."""
        if self.phase in (LOADING, WARMING, READY):
            return 1.0
        if self.phase != DOWNLOADING or not self.total:
            return None
        return min(1.0, self.done / self.total)

    def describe(self) -> str:
        """'downloading 0.6 of 2.4 GB (25 %)', 'loading the model', ..."""
        if self.phase == DOWNLOADING:
            if self.unit == "B" and self.total:
                return (
                    f"downloading {self.done / 1e9:.2f} of {self.total / 1e9:.2f} GB "
                    f"({100 * (self.fraction or 0):.0f} %)"
                )
            if self.total:
                return f"downloading ({self.done:.0f} of {self.total:.0f} files)"
            return "downloading"
        return {
            STARTING: "starting",
            LOADING: "loading the model into memory",
            WARMING: "preparing the built-in voices",
            FALLING_BACK: f"{self.model} could not be loaded; starting the offline eSpeak "
            "voice instead",
            READY: "ready",
            FAILED: f"failed: {self.error}",
        }[self.phase]

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.phase,
            "model": self.model,
            "progress": self.fraction,
            "downloaded": self.done if self.phase == DOWNLOADING else None,
            "download_size": self.total if self.phase == DOWNLOADING else None,
            "unit": self.unit,
            "message": self.describe(),
            "error": self.error,
        }


class ModelLoading(EngineBusy):
    """A request came before the model was ready: retry after `retry_after_s`."""

    def __init__(self, progress: LoadProgress) -> None:
        super().__init__(
            f"The model is still loading ({progress.describe()}); try again in a few seconds.",
            RETRY_AFTER_S,
        )
        self.progress = progress


Report = Callable[..., None]  # report(phase, done=..., total=..., unit=...)
Build = Callable[[Report], Engine]


class EngineSlot:
    """The engine, or how far its loading has come. Thread-safe; the engine is set once."""

    def __init__(self, model: str, engine: Engine | None = None) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._engine: Engine | None = None
        self._failure: str | None = None
        self._progress = LoadProgress(STARTING, model)
        self._closing = False
        if engine is not None:
            self.set(engine)

    @classmethod
    def holding(cls, engine: Engine) -> EngineSlot:
        """A slot that is ready from the start (an engine built by the caller)."""
        return cls(engine.backend.model_name, engine)

    # ------------------------------------------------------------------ loading
    def load(self, build: Build, background: bool = True) -> threading.Thread | None:
        """Run `build(report)` on a thread and hold the engine it returns; without `background`,
        wait for it here and raise what it raised.

        `build` calls `report(phase, done=, total=, unit=)` as it goes. An exception marks the
        slot FAILED: requests then get a BackendError saying why (logged with its traceback).
        A thread even when waiting: it ends after loading, and so does the OpenMP team torch made
        for it, which would otherwise slow every later parallel op (serving/scheduler.py).
        """
        if not background:
            run_on_passing_thread(partial(self._build, build, reraise=True))
            return None
        thread = threading.Thread(
            target=self._build, args=(build,), name="tts-model-load", daemon=True
        )
        _LOADS.add(thread)
        thread.start()
        return thread

    def _build(self, build: Build, reraise: bool = False) -> None:
        try:
            self.set(build(self.report))
        except LoadCancelled:
            self.fail("the process is exiting")
        except BaseException as exc:  # even KeyboardInterrupt: never "loading" forever
            log.exception("the model could not be loaded")
            self.fail(f"{type(exc).__name__}: {redact_paths(str(exc))}")
            if reraise or not isinstance(exc, Exception):
                raise

    def report(
        self, phase: str, done: float = 0.0, total: float | None = None, unit: str = "B"
    ) -> None:
        if _EXITING.is_set():
            raise LoadCancelled
        with self._lock:
            if self._progress.phase in (READY, FAILED):
                return
            self._progress = replace(
                self._progress, phase=phase, done=float(done), total=total, unit=unit
            )

    def set(self, engine: Engine) -> None:
        """Hold `engine` (also replaces a held one: tests switch backends this way)."""
        with self._lock:
            self._engine = engine
            self._progress = LoadProgress(READY, engine.backend.model_name)
        self._ready.set()

    def fail(self, reason: str) -> None:
        with self._lock:
            self._failure = reason
            self._progress = replace(self._progress, phase=FAILED, error=reason)
        self._ready.set()

    # ------------------------------------------------------------------ shutdown
    def close(self, timeout_s: float) -> bool:
        """Stop admitting (every later request: ShuttingDown), let the requests in line and
        running finish for up to `timeout_s`, then cancel what is left. True when all ended
        on their own; returns once every request has let go of the engine or shortly after."""
        self._closing = True
        engine = self._engine
        if engine is None:
            return True
        admission = engine.admission
        admission.close(SHUTTING_DOWN)
        if admission.wait_idle(timeout_s):
            return True
        log.warning(
            "shutdown: cancelling %d request(s) still running after %.0f s",
            admission.cancel_all(),
            timeout_s,
        )
        admission.wait_idle(CANCEL_GRACE_S)
        return False

    # ------------------------------------------------------------------ use
    @property
    def engine(self) -> Engine:
        """The engine; ModelLoading while it loads, BackendError if loading failed,
        ShuttingDown once closed."""
        if self._closing:
            raise EngineBusy(SHUTTING_DOWN, CLOSED_RETRY_AFTER_S)
        engine = self._engine
        if engine is not None:
            return engine
        progress = self.progress
        if progress.phase == FAILED:
            raise BackendError(
                f"The model could not be loaded ({progress.error}); see the server log."
            )
        raise ModelLoading(progress)

    @property
    def ready(self) -> bool:
        return self._engine is not None

    @property
    def progress(self) -> LoadProgress:
        with self._lock:
            return self._progress

    def wait(self, timeout: float | None = None) -> Engine:
        """Block until loading ended: the engine, or its error (as `engine`)."""
        self._ready.wait(timeout)
        return self.engine

    def info(self) -> dict[str, Any]:
        """engine.info() with the loading status; while loading, the status alone."""
        status = self.progress.as_json()
        engine = self._engine
        return {**engine.info(), "status": status} if engine else {"status": status}
