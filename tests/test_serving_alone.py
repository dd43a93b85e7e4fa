"""`tts_core.serving.run_alone` (what every model's `stream`/`generate` steps) with a fake model
(tests/serving_fake.py): the chunks of the served loop, on the caller's thread, its errors
raised to the caller, and a closed generator frees the request's row at once."""

from __future__ import annotations

import gc
import threading

import pytest
from serving_fake import FakeRequest, FakeRunner, expected_chunks

from tts_core.serving import BatchEngine, EngineLoop, InlineOutbox, run_alone


def request(seed: int, **kwargs) -> FakeRequest:  # noqa: ANN003 - FakeRequest's
    return FakeRequest(seed, outbox=InlineOutbox(), **kwargs)


def alone(runner: FakeRunner, seq: FakeRequest):  # noqa: ANN201 - the generator
    """`seq` stepped by a private one-row engine that raises its errors (as a model does)."""
    return run_alone(lambda: BatchEngine(runner, isolate_failures=False), seq)


def test_run_alone_hands_out_the_served_chunks_on_the_callers_thread():
    runner = FakeRunner()
    threads: set[str] = set()
    runner.on_decode = lambda seqs: threads.add(threading.current_thread().name)
    chunks = list(alone(runner, request(1, wanted=10, prompt=300)))
    assert chunks == expected_chunks(1, 10)
    assert threads == {threading.current_thread().name}
    loop = EngineLoop(FakeRunner())
    try:
        assert list(loop.enqueue(FakeRequest(1, wanted=10, prompt=300))) == chunks
    finally:
        loop.close()
    assert runner.released == [1]


def test_the_engine_is_made_at_the_first_next():
    made = []

    def make_engine() -> BatchEngine:
        made.append(True)
        return BatchEngine(FakeRunner(), isolate_failures=False)

    chunks = run_alone(make_engine, request(1))
    assert made == []
    next(chunks)
    assert made == [True]


def test_a_decode_error_is_raised_to_the_caller_after_the_chunks_before_it():
    runner = FakeRunner()
    chunks = alone(runner, request(1, wanted=10, fail_at=4))
    assert next(chunks) == expected_chunks(1, 10)[0]
    with pytest.raises(RuntimeError, match="decode failed for request 1"):
        next(chunks)
    assert runner.released == [1]


def test_an_admission_error_is_raised_to_the_caller():
    class Full(FakeRunner):
        def admit(self, seq):  # noqa: ANN001, ANN202
            raise MemoryError("no cache left")

    with pytest.raises(MemoryError, match="no cache left"):
        next(alone(Full(), request(1)))


def test_closing_the_generator_frees_the_row_at_once():
    runner = FakeRunner()
    chunks = alone(runner, request(1, wanted=40))
    next(chunks)
    assert runner.released == []
    chunks.close()
    assert runner.released == [1]


def test_a_dropped_generator_frees_the_row():
    runner = FakeRunner()
    chunks = alone(runner, request(1, wanted=40))
    next(chunks)
    del chunks
    gc.collect()  # (CPython frees it at once; a collection makes sure on any interpreter)
    assert runner.released == [1]


def test_a_stopped_request_ends_without_a_final_chunk_or_error():
    seq = request(1, wanted=40, should_stop=lambda: seq.frames >= 5)
    chunks = list(alone(FakeRunner(), seq))
    assert chunks == expected_chunks(1, 40)[:2]  # frames 0-4, the chunks they made; no end


def test_run_alone_needs_an_inline_outbox():
    with pytest.raises(TypeError, match="InlineOutbox"):
        alone(FakeRunner(), FakeRequest(1))
