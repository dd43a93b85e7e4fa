"""`EngineLoop.submit`: the one generic way a served model's request is built and queued (the
request made on the loop thread from the caller's arguments; a refused request queues nothing)."""

import threading

import pytest

from tts_core.audio.cadence import Cadence
from tts_core.serving import EngineLoop, Sequence


class CountingRunner:
    """A StepModel whose rows emit frames 0, 1, ... and stop after `frames` of them."""

    max_batch = 2

    def admit(self, seq):
        return True

    def prefill(self, seq, positions):
        return True

    def decode(self, seqs, out):
        for seq in seqs:
            last = seq.frames + 1 == seq.wanted
            out.emit(seq, seq.frames, len(seqs), "done" if last else None)

    def deliver(self, seq, frames, compute_s, stop_reason, batch):
        return list(frames)

    def release(self, seq):
        pass


def counting_request(frames: int, built_on: list) -> Sequence:
    if frames < 1:
        raise ValueError("frames must be >= 1")
    built_on.append(threading.current_thread().name)
    seq = Sequence(Cadence(1, 2), lambda: False, limit=100, limit_reason="limit")
    seq.wanted = frames
    return seq


def test_submit_builds_on_the_loop_thread_and_streams_the_chunks():
    loop = EngineLoop(CountingRunner(), thread_name="tts-test", make_request=counting_request)
    built_on: list = []
    try:
        chunks = list(loop.submit(5, built_on))
    finally:
        loop.close()
    assert chunks == [[0], [1, 2], [3, 4]]
    assert built_on == ["tts-test"]


def test_a_refused_request_raises_to_the_caller_and_the_loop_serves_on():
    loop = EngineLoop(CountingRunner(), make_request=counting_request)
    try:
        with pytest.raises(ValueError, match="frames must be"):
            loop.submit(0, [])
        assert loop.waiting == 0 and loop.active == 0
        assert list(loop.submit(1, [])) == [[0]]
    finally:
        loop.close()


def test_submit_needs_make_request():
    loop = EngineLoop(CountingRunner())
    with pytest.raises(TypeError, match="make_request"):
        loop.submit(1, [])
