"""Download progress of a Hub checkpoint, for whoever waits on it (the page, /v1/models).

`resolve_checkpoint` passes `progress_bar()` to `huggingface_hub.snapshot_download` as its
tqdm class and calls `download_finished()` after it. Inside `reporting_to(report)` (a context of the loading thread) every bar it opens
forwards to `report("downloading", done=, total=, unit=)`: the byte bar where this
huggingface_hub version has one (2.x aggregates every file into one), else the file count.
Outside such a context it is huggingface_hub's own terminal bar, unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

DOWNLOADING, LOADING = "downloading", "loading"  # EngineSlot's phases
Report = Callable[..., None]

_report: contextvars.ContextVar[Report | None] = contextvars.ContextVar(
    "download_report", default=None
)


@contextlib.contextmanager
def reporting_to(report: Report) -> Iterator[None]:
    """Within the block, Hub downloads on this thread call `report` as bytes arrive."""
    token = _report.set(report)
    try:
        yield
    finally:
        _report.reset(token)


def download_finished() -> None:
    """The files are here: what follows is reading them (LOADING)."""
    report = _report.get()
    if report is not None:
        report(LOADING)


def progress_bar() -> type | None:
    """The tqdm class for snapshot_download: None (its default) unless someone listens."""
    report = _report.get()
    if report is None:
        return None
    from huggingface_hub.utils import tqdm as hub_tqdm

    totals = _Totals(report)

    class ReportingBar(hub_tqdm):
        # a bar that is not shown (no terminal) does not count: keep our own count
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.counted = float(kwargs.get("initial", 0) or 0)
            self.in_bytes = kwargs.get("unit") == "B"
            super().__init__(*args, **kwargs)
            totals.opened(self)

        def update(self, n: float | None = 1) -> bool | None:
            self.counted += float(n or 0)
            shown = super().update(n)
            totals.changed(self)
            return shown

        def refresh(self, *args: Any, **kwargs: Any) -> None:  # a total raised by a new file
            super().refresh(*args, **kwargs)
            if hasattr(self, "counted"):
                totals.changed(self)

    return ReportingBar


class _Totals:
    """The most telling of the open bars: bytes over files; with bytes, the larger total
    (2.x opens a transfer and a reconstruction bar over the same files)."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._lock = threading.Lock()
        self._bars: list[Any] = []

    def opened(self, bar: Any) -> None:
        with self._lock:
            self._bars.append(bar)
        self.changed(bar)

    def changed(self, _bar: Any) -> None:
        with self._lock:
            bars = list(self._bars)
        by_bytes = [b for b in bars if b.in_bytes and (b.total or 0) > 0]
        pool = by_bytes or [b for b in bars if (b.total or 0) > 0]
        if not pool:
            return
        best = max(pool, key=lambda b: b.total)
        unit = "B" if by_bytes else "files"
        self._report(DOWNLOADING, done=best.counted, total=float(best.total), unit=unit)
