"""Where a model's computations run.

A CPU build of torch runs its ops on OpenMP teams; a team belongs to the thread that made it and
lives as long as that thread. With two live teams in a process (more OpenMP threads than cores),
libgomp stops spinning between parallel regions and every region then pays a sleep and a
wake-up: on a 2-core box a 0.6B Qwen3 stream took ~1.7x as long per frame once another thread
had run a single parallel op, even with that thread idle since. So a served model computes on
one long-lived thread, its EngineLoop's (`EngineLoop.call`), whichever thread asks; one-off
work (loading, building caches) runs on a thread that then ends (`run_on_passing_thread`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_on_passing_thread(fn: Callable[[], T]) -> T:
    """fn() on a new thread that then ends, its result (or exception) here: work done once,
    such as building caches, whose OpenMP team should not outlive it."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = fn()
        except BaseException as error:  # noqa: BLE001 - raised below, on the caller's thread
            box["error"] = error

    thread = threading.Thread(target=work, name="tts-passing")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
