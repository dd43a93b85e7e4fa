"""`tts_core.serving.EngineLoop` on its own thread with a fake model (tests/serving_fake.py):
joins mid-stream, cancel and disconnect, rows waiting for input (the loop sleeps until woken),
close. The test holds the loop thread at a chosen decode step through events, so what it checks
does not depend on how fast the machine is; every wait has HANG_S as a hang detector only."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from serving_fake import FakeRequest, FakeRunner, expected_chunks

from tts_core.serving import EngineLoop

ROOT = Path(__file__).resolve().parents[1]

HANG_S = 30.0  # only a stuck loop takes this long; every wait below ends on an event
THREAD = "tts-serving-test"


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def loop(runner: FakeRunner):
    served = EngineLoop(runner, thread_name=THREAD)
    yield served
    served.close()


def alone(seq: FakeRequest) -> list:
    return expected_chunks(seq.seed, seq.wanted, seq.cadence)


class Hold:
    """Holds the loop thread before the decode step that makes `seed`'s frame `frame`:
    `arrived` is set once it is held there, and it goes on when `go_on` is set."""

    def __init__(self, runner: FakeRunner, seed: int, frame: int) -> None:
        self.arrived, self.go_on = threading.Event(), threading.Event()
        self.seed, self.frame = seed, frame
        runner.on_decode = self.maybe_hold

    def maybe_hold(self, seqs: list[FakeRequest]) -> None:
        if any(seq.seed == self.seed and seq.frames == self.frame for seq in seqs):
            self.arrived.set()
            assert self.go_on.wait(HANG_S), "the test never let the loop go on"

    def reached(self) -> None:
        assert self.arrived.wait(HANG_S), "hang: the loop never reached the held step"


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, f"hang: {what}"
        time.sleep(0.001)


def calls_of(thread: threading.Thread) -> list[str]:
    """The functions `thread` is in now, innermost first."""
    frame, names = sys._current_frames().get(thread.ident), []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names


def loop_is_asleep() -> bool:
    """The loop thread is parked in a condition wait (nothing to step), not stepping (the fake
    runner waits on nothing unless a test holds it)."""
    thread = next(t for t in threading.enumerate() if t.name == THREAD)
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code is threading.Condition.wait.__code__


def test_a_request_joining_while_another_decodes_gets_its_chunks_alone(loop, runner):
    running, joiner = FakeRequest(1, wanted=20), FakeRequest(2, wanted=11, prompt=200)
    hold = Hold(runner, seed=1, frame=5)  # the running row is past its first chunk
    first = loop.enqueue(running)
    assert next(first) == alone(running)[0]
    hold.reached()
    second = loop.enqueue(joiner)
    hold.go_on.set()
    assert list(second) == alone(joiner)
    assert [next(first), *first] == alone(running)[1:]
    assert [1, 2] in runner.batches  # it did join the running row


@pytest.mark.parametrize("how", ["close", "drop"])
def test_a_consumer_that_stops_frees_its_row_at_the_next_step(loop, runner, how):
    """RequestStream.close (the client cancelled) or the stream dropped (it disconnected):
    the row is released at the next step; the other request is served to its end."""
    cancelled, other = FakeRequest(1, wanted=40), FakeRequest(2, wanted=9)
    hold = Hold(runner, seed=1, frame=6)
    stream = loop.enqueue(cancelled)
    other_stream = loop.enqueue(other)
    assert next(stream) == alone(cancelled)[0]
    hold.reached()
    if how == "close":
        stream.close()
        assert list(stream) == []
    else:
        del stream
    hold.go_on.set()
    assert runner.wait_released(1, HANG_S)
    assert cancelled.frames == 7  # the step in progress made frame 6; none after it
    assert list(other_stream) == alone(other)


def test_a_row_waiting_for_input_keeps_its_place_and_the_loop_sleeps(loop, runner):
    text_in = FakeRequest(1, wanted=8)
    text_in.ready.clear()  # its text has not come yet
    stream = loop.enqueue(text_in)
    wait_until(lambda: runner.prefills and loop_is_asleep(), "the loop never went to sleep")
    assert runner.batches == [] and loop.active == 1  # admitted, prefilled, holding its row
    other = FakeRequest(2, wanted=6)
    assert list(loop.enqueue(other)) == alone(other)  # the loop serves on meanwhile
    wait_until(loop_is_asleep, "the loop never went back to sleep")
    assert text_in.frames == 0 and loop.active == 1 and 1 not in runner.released
    text_in.ready.set()  # the text came
    loop.wake()
    assert list(stream) == alone(text_in)


def test_a_consumer_that_disconnects_while_its_row_waits_for_input_frees_the_row(loop, runner):
    text_in = FakeRequest(1, wanted=8)
    text_in.ready.clear()
    stream = loop.enqueue(text_in)
    wait_until(lambda: runner.prefills and loop_is_asleep(), "the loop never went to sleep")
    del stream
    assert runner.wait_released(1, HANG_S)  # a hang guard: the disconnect wakes the loop


def test_a_failing_request_does_not_stop_the_loop(loop, runner):
    failing = loop.enqueue(FakeRequest(1, wanted=10, fail_at=3))
    with pytest.raises(RuntimeError, match="decode failed for request 1"):
        list(failing)
    later = FakeRequest(2, wanted=5)
    assert list(loop.enqueue(later)) == alone(later)


def test_closing_the_loop_ends_every_request_without_a_final_chunk():
    runner = FakeRunner(max_batch=1)
    loop = EngineLoop(runner, thread_name=THREAD)
    hold = Hold(runner, seed=1, frame=3)
    running, queued = FakeRequest(1, wanted=20), FakeRequest(2, wanted=5)
    stream, queued_stream = loop.enqueue(running), loop.enqueue(queued)
    assert next(stream) == alone(running)[0]
    hold.reached()
    closer = threading.Thread(target=loop.close)
    closer.start()
    wait_until(lambda: "join" in calls_of(closer), "close never waited for the loop thread")
    hold.go_on.set()
    closer.join(HANG_S)
    assert not closer.is_alive()
    assert list(stream) == [] and list(queued_stream) == []  # ended, no last chunk
    assert sorted(runner.released) == [1, 2] and runner.admitted == [1]
    with pytest.raises(RuntimeError, match="closed"):
        loop.enqueue(FakeRequest(3))


def test_a_loop_left_running_is_stopped_at_interpreter_exit(tmp_path):
    """A script that ends without closing its loop: the loop's thread is stopped and joined at
    exit (atexit), before the interpreter cuts daemon threads off, since one cut off inside a
    torch op aborts the process ("terminate called without an active exception", -6). Seen by
    an exit hook registered before the loop module's, so it runs after it."""
    import subprocess

    code = (
        "import atexit, threading\n"
        "atexit.register(lambda: print('left', [t.name for t in threading.enumerate()"
        " if t.name == 'test-loop']))\n"
        "from serving_fake import FakeRunner\n"
        "from tts_core.serving import EngineLoop\n"
        "loop = EngineLoop(FakeRunner(), thread_name='test-loop')\n"
        "loop.call(lambda: None)\n"
        "print('running', [t.name for t in threading.enumerate() if t.name == 'test-loop'])\n"
    )
    tests = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([tests, str(ROOT)])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["running ['test-loop']", "left []"], done.stdout
