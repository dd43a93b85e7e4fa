"""One line for every surface: at most `slots` run, at most `queue_size` wait, first come
first served; a cancelled or abandoned request gives its place back at once."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from tts_core.engine import Engine, EngineBusy, EngineConfig, SynthesisRequest
from tts_core.engine.admission import Admission, Ticket

TEXT = "Hello there, this is a short test of the engine."


def test_slots_then_line_then_busy():
    admission = Admission(slots=1, queue_size=2)
    tickets = [admission.reserve() for _ in range(3)]
    with pytest.raises(EngineBusy, match="busy"):
        admission.reserve()
    assert tickets[0].wait_turn(threading.Event())
    assert (admission.running, admission.waiting) == (1, 2)
    tickets[1].release()  # a waiter that gives up
    assert (admission.running, admission.waiting) == (1, 1)
    tickets[0].release()
    tickets[0].release()  # idempotent
    assert tickets[2].wait_turn(threading.Event())
    assert (admission.running, admission.waiting) == (1, 0)
    tickets[2].release()
    assert (admission.running, admission.waiting) == (0, 0)


def test_first_come_first_served():
    admission = Admission(slots=1, queue_size=5)
    first = admission.reserve()
    assert first.wait_turn(threading.Event())
    order: list[int] = []
    tickets = [admission.reserve() for _ in range(4)]

    def run(i: int) -> None:
        assert tickets[i].wait_turn(threading.Event())
        order.append(i)
        tickets[i].release()

    threads = [threading.Thread(target=run, args=(i,)) for i in (3, 1, 0, 2)]  # start shuffled
    for thread in threads:
        thread.start()
    wait_until(lambda: all(map(waiting_for_its_turn, threads)))  # all in line, then the turn
    first.release()
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3]


def wait_until(condition, hang_s: float = 30.0) -> None:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + hang_s
    while not condition():
        assert time.monotonic() < deadline, "hang"
        time.sleep(0.001)


def waiting_for_its_turn(thread: threading.Thread) -> bool:
    """`thread` is blocked in Ticket.wait_turn (its place in the line)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code is Ticket.wait_turn.__code__:
            return True
        frame = frame.f_back
    return False


def test_cancel_while_waiting_leaves_the_line():
    admission = Admission(slots=1, queue_size=1)
    running = admission.reserve()
    assert running.wait_turn(threading.Event())
    waiter, cancel = admission.reserve(), threading.Event()
    threading.Timer(0.1, cancel.set).start()
    assert not waiter.wait_turn(cancel)
    assert (admission.running, admission.waiting) == (1, 0)


def test_engine_counts_every_request_and_refuses_beyond_the_line(espeak_backend):
    engine = Engine(espeak_backend, EngineConfig(max_concurrent=1, max_queue=1))
    a = engine.stream(SynthesisRequest(TEXT))
    b = engine.stream(SynthesisRequest(TEXT))
    with pytest.raises(EngineBusy):
        engine.stream(SynthesisRequest(TEXT))
    b.close()  # never iterated: its place comes back all the same
    c = engine.stream(SynthesisRequest(TEXT))
    assert sum(e.audio.size for e in a) > 0 and sum(e.audio.size for e in c) > 0
    assert (engine.active_requests, engine.waiting_requests) == (0, 0)


def test_bad_input_takes_no_place(espeak_backend):
    engine = Engine(espeak_backend, EngineConfig(max_concurrent=1, max_queue=0))
    for _ in range(3):
        with pytest.raises(ValueError):
            engine.stream(SynthesisRequest(""))
    assert sum(e.audio.size for e in engine.stream(SynthesisRequest(TEXT))) > 0


def test_cancel_before_the_first_audio_ends_as_cancelled(espeak_backend):
    """It ended with "The voice produced no audio for this text."."""
    engine = Engine(espeak_backend)
    cancel = threading.Event()
    cancel.set()
    events = list(engine.stream(SynthesisRequest(TEXT), cancel))
    assert len(events) == 1 and events[0].final and events[0].audio.size == 0
    assert events[0].stats["stop_reason"] == "cancelled"
    # and while waiting for a slot
    engine = Engine(espeak_backend, EngineConfig(max_concurrent=1))
    holder = engine.stream(SynthesisRequest(TEXT))
    next(holder)
    cancel = threading.Event()
    waiting = engine.stream(SynthesisRequest(TEXT), cancel)
    threading.Timer(0.2, cancel.set).start()
    events = list(waiting)
    assert [e.stats["stop_reason"] for e in events] == ["cancelled"]
    holder.close()
    assert (engine.active_requests, engine.waiting_requests) == (0, 0)


def test_abandoned_stream_is_given_back_by_the_garbage_collector(espeak_backend):
    import gc

    engine = Engine(espeak_backend, EngineConfig(max_concurrent=1, max_queue=0))
    engine.stream(SynthesisRequest(TEXT))  # dropped unread
    gc.collect()
    assert np.concatenate([e.audio for e in engine.stream(SynthesisRequest(TEXT))]).size > 0
