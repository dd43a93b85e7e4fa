"""`tts_core.serving.BatchEngine` on its own, stepped by the test with a fake model
(tests/serving_fake.py): admission, joins mid-stream, first-chunk priority, cancel and
disconnect, a stop that raises, failures kept to the rows they touched, rows waiting for input.
Every step is the test's own call, so nothing here depends on timing."""

from __future__ import annotations

import threading

from serving_fake import FakeRequest, FakeRunner, expected_chunks

from tts_core.audio.cadence import Cadence
from tts_core.serving import FIRST_CHUNK_PRIORITY_FRAMES, BatchEngine, RequestStream, Status

STEPS_BOUND = 1000  # far more than any test here takes: a bug fails the test, it does not hang


def run_out(engine: BatchEngine) -> None:
    """Step until every request has ended."""
    for _ in range(STEPS_BOUND):
        if not engine.has_requests():
            return
        engine.step()
    raise AssertionError("the engine did not finish its requests")


def outcome(seq: FakeRequest) -> tuple[list, BaseException | None]:
    """The chunks a finished request handed out, and the error it ended with (None: clean)."""
    chunks: list = []
    try:
        chunks.extend(seq.outbox)
    except Exception as error:  # noqa: BLE001 - the request's own failure, returned
        return chunks, error
    return chunks, None


def alone(seq: FakeRequest) -> tuple[list, None]:
    return expected_chunks(seq.seed, seq.wanted, seq.cadence), None


def stream_of(seq: FakeRequest) -> RequestStream:
    """The consumer's handle of a request stepped by the test (its wake-up goes nowhere)."""
    return RequestStream(seq, threading.Condition())


def test_a_request_alone_hands_out_its_frames_at_the_cadence():
    runner = FakeRunner()
    engine = BatchEngine(runner)
    seq = FakeRequest(1, wanted=9)
    engine.add(seq)
    run_out(engine)
    assert outcome(seq) == alone(seq)
    assert seq.status is Status.DONE and runner.released == [1]


# ---------------------------------------------------------------------------- admission
def test_at_most_max_batch_rows_run_and_the_rest_join_first_come_first_served():
    runner = FakeRunner(max_batch=2)
    engine = BatchEngine(runner)
    seqs = [FakeRequest(seed, wanted=3 + seed) for seed in range(5)]
    for seq in seqs:
        engine.add(seq)
    most = 0
    for _ in range(STEPS_BOUND):
        if not engine.has_requests():
            break
        engine.step()
        most = max(most, engine.active)
    assert most == 2 and max(len(batch) for batch in runner.batches) == 2
    assert runner.admitted == [0, 1, 2, 3, 4]
    for seq in seqs:
        assert outcome(seq) == alone(seq)


def test_a_runner_without_room_keeps_the_line_in_order():
    """The runner says "no room" (its cache is full) below max_batch: the head of the line
    waits for room to free, and a smaller request behind it, which would fit, waits too."""
    runner = FakeRunner(max_batch=4, room=2)
    engine = BatchEngine(runner)
    running, large, small = FakeRequest(1, wanted=4), FakeRequest(2, size=2), FakeRequest(3)
    for seq in (running, large, small):
        engine.add(seq)
    for _ in range(3):
        engine.step()
        assert (engine.active, engine.waiting) == (1, 2) and runner.admitted == [1]
    run_out(engine)
    assert runner.admitted == [1, 2, 3]
    assert runner.batches[:4] == [[1]] * 4 and [2, 3] not in runner.batches  # one at a time
    for seq in (running, large, small):
        assert outcome(seq) == alone(seq)


def test_a_request_whose_admission_raises_ends_alone_and_the_line_moves_on():
    class FailingAdmit(FakeRunner):
        def admit(self, seq):  # noqa: ANN001, ANN202
            if seq.seed == 2:
                raise MemoryError("no cache for request 2")
            return super().admit(seq)

    engine = BatchEngine(FailingAdmit())
    first, failing, third = (FakeRequest(seed, wanted=4) for seed in (1, 2, 3))
    for seq in (first, failing, third):
        engine.add(seq)
    run_out(engine)
    chunks, error = outcome(failing)
    assert chunks == [] and isinstance(error, MemoryError)
    assert outcome(first) == alone(first) and outcome(third) == alone(third)


# ---------------------------------------------------------------------------- joins
def test_a_request_joining_mid_stream_gets_what_it_gets_alone():
    """A joiner with a long prompt (3 prefill chunks) while another row decodes: the prompt
    goes in a chunk a step, the running row decodes on meanwhile, and each request's chunks
    are the ones it gets alone."""
    runner = FakeRunner()
    engine = BatchEngine(runner, prefill_chunk=128)
    running = FakeRequest(1, wanted=20)
    engine.add(running)
    for _ in range(5):
        engine.step()
    assert running.frames == 5 and not running.before_first_chunk
    joiner = FakeRequest(2, wanted=8, prompt=300)
    engine.add(joiner)
    run_out(engine)
    assert [done for seed, done in runner.prefills if seed == 2] == [128, 256, 300]
    assert runner.batches[5:7] == [[1], [1]]  # decoding went on while the prompt went in
    assert [1, 2] in runner.batches  # they did step together
    assert outcome(running) == alone(running) and outcome(joiner) == alone(joiner)


# ---------------------------------------------------------------------------- first-chunk priority
def started(engine: BatchEngine, seq: FakeRequest, steps: int) -> FakeRequest:
    engine.add(seq)
    for _ in range(steps):
        engine.step()
    return seq


def test_a_joiner_steps_alone_until_its_first_chunk():
    runner = FakeRunner()
    engine = BatchEngine(runner)
    running = started(engine, FakeRequest(1, wanted=30), steps=4)
    joiner = FakeRequest(2, wanted=10)  # its first chunk: 2 frames (CADENCE.first)
    engine.add(joiner)
    before = len(runner.batches)
    for _ in range(3):
        engine.step()
    assert runner.batches[before:] == [[2], [2], [1, 2]]
    run_out(engine)
    assert outcome(running) == alone(running) and outcome(joiner) == alone(joiner)


def test_a_joiner_with_a_long_first_chunk_steps_alone_for_the_priority_frames_only():
    runner = FakeRunner()
    engine = BatchEngine(runner)
    started(engine, FakeRequest(1, wanted=30), steps=4)
    late = Cadence(first=FIRST_CHUNK_PRIORITY_FRAMES + 3, steady=3)
    engine.add(FakeRequest(2, wanted=12, cadence=late))
    before = len(runner.batches)
    for _ in range(FIRST_CHUNK_PRIORITY_FRAMES + 1):
        engine.step()
    assert runner.batches[before:] == [[2]] * FIRST_CHUNK_PRIORITY_FRAMES + [[1, 2]]


def test_joiners_never_hold_the_running_rows_back_more_than_the_priority_frames():
    """A new request joins at every step: the running row is left out of at most
    FIRST_CHUNK_PRIORITY_FRAMES steps in a row (and it is left out: the joiners come first)."""
    runner = FakeRunner(max_batch=64)
    engine = BatchEngine(runner)
    running = started(engine, FakeRequest(1, wanted=60), steps=3)
    joiners = []
    gap, longest = 0, 0
    for seed in range(100, 140):
        joiners.append(FakeRequest(seed, wanted=3))
        engine.add(joiners[-1])
        engine.step()
        gap = 0 if 1 in runner.batches[-1] else gap + 1
        longest = max(longest, gap)
    assert longest == FIRST_CHUNK_PRIORITY_FRAMES
    run_out(engine)
    for seq in [running, *joiners]:
        assert outcome(seq) == alone(seq)


# ---------------------------------------------------------------------------- cancel, disconnect
def test_closing_the_stream_frees_the_row_at_the_next_step():
    runner = FakeRunner()
    engine = BatchEngine(runner)
    cancelled, other = FakeRequest(1, wanted=20), FakeRequest(2, wanted=9)
    engine.add(cancelled)
    engine.add(other)
    for _ in range(4):
        engine.step()
    stream = stream_of(cancelled)
    assert next(stream) == ((1000, 1001), None)
    stream.close()
    frames = cancelled.frames
    engine.step()
    assert runner.released == [1] and engine.active == 1 and cancelled.frames == frames
    assert list(stream) == []  # a closed stream ends at once
    run_out(engine)
    assert outcome(other) == alone(other)


def test_a_dropped_stream_frees_the_row_at_the_next_step():
    """The consumer went away (its stream object was dropped, not closed)."""
    runner = FakeRunner()
    engine = BatchEngine(runner)
    dropped, other = FakeRequest(1, wanted=20), FakeRequest(2, wanted=9)
    engine.add(dropped)
    engine.add(other)
    stream = stream_of(dropped)
    for _ in range(4):
        engine.step()
    del stream
    engine.step()
    assert runner.released == [1] and engine.active == 1
    run_out(engine)
    assert outcome(other) == alone(other)


def test_a_request_cancelled_in_line_leaves_it_unadmitted():
    runner = FakeRunner(max_batch=1)
    engine = BatchEngine(runner)
    running, queued = FakeRequest(1, wanted=6), FakeRequest(2, wanted=6)
    engine.add(running)
    engine.add(queued)
    engine.step()
    stream_of(queued).close()
    engine.step()
    assert engine.waiting == 0 and outcome(queued) == ([], None)
    run_out(engine)
    assert runner.admitted == [1] and outcome(running) == alone(running)


def test_a_should_stop_that_raises_ends_only_its_own_request():
    runner = FakeRunner()
    engine = BatchEngine(runner)

    def client_gone() -> bool:
        if failing.frames >= 3:
            raise ConnectionResetError("the client went away")
        return False

    failing = FakeRequest(1, wanted=20, should_stop=client_gone)
    other = FakeRequest(2, wanted=9)
    engine.add(failing)
    engine.add(other)
    run_out(engine)
    chunks, error = outcome(failing)
    assert chunks == alone(failing)[0][:1] and isinstance(error, ConnectionResetError)
    assert outcome(other) == alone(other)


# ---------------------------------------------------------------------------- failures
def test_a_decode_that_raises_ends_the_rows_it_stepped_and_the_others_go_on():
    """A joiner's decode raises in its first step, which it takes alone (first-chunk
    priority): it ends with the error; the running row, not in that step, goes on."""
    runner = FakeRunner()
    engine = BatchEngine(runner)
    running = started(engine, FakeRequest(1, wanted=12), steps=4)
    failing = FakeRequest(2, wanted=6, fail_at=0)
    engine.add(failing)
    run_out(engine)
    chunks, error = outcome(failing)
    assert chunks == [] and "decode failed for request 2" in str(error)
    assert outcome(running) == alone(running)
    assert runner.released == [2, 1]


def test_a_failed_batch_ends_its_rows_only_and_the_engine_serves_on():
    """A batched decode that raises ends every row it stepped (the engine cannot tell which
    row broke a call over all of them); a row waiting for input and a request in line go on."""
    runner = FakeRunner(max_batch=3)
    engine = BatchEngine(runner)
    failing, mate = FakeRequest(1, wanted=10, fail_at=5), FakeRequest(2, wanted=10)
    waiting_for_text = FakeRequest(3, wanted=5)
    waiting_for_text.ready.clear()
    queued = FakeRequest(4, wanted=5)
    for seq in (failing, mate, waiting_for_text, queued):
        engine.add(seq)
    for _ in range(STEPS_BOUND):
        if failing.status is Status.DONE:
            break
        engine.step()
    assert [error is not None for _, error in map(outcome, (failing, mate))] == [True, True]
    waiting_for_text.ready.set()
    run_out(engine)
    assert outcome(waiting_for_text) == alone(waiting_for_text)
    assert outcome(queued) == alone(queued)


def test_a_prefill_that_raises_ends_only_its_request():
    class FailingPrefill(FakeRunner):
        def prefill(self, seq, positions):  # noqa: ANN001, ANN202
            if seq.seed == 2:
                raise RuntimeError("prompt too long for the cache")
            return super().prefill(seq, positions)

    engine = BatchEngine(FailingPrefill())
    running = started(engine, FakeRequest(1, wanted=10), steps=3)
    failing = FakeRequest(2, wanted=5)
    engine.add(failing)
    run_out(engine)
    assert isinstance(outcome(failing)[1], RuntimeError)
    assert outcome(running) == alone(running)


# ---------------------------------------------------------------------------- waiting for input
def test_a_row_waiting_for_input_keeps_its_place_while_the_others_step():
    runner = FakeRunner(max_batch=2)
    engine = BatchEngine(runner)
    text_in = FakeRequest(1, wanted=8)
    other, queued = FakeRequest(2, wanted=6), FakeRequest(3, wanted=4)
    for seq in (text_in, other, queued):
        engine.add(seq)
    for _ in range(3):
        engine.step()
    text_in.ready.clear()  # its text has not come yet
    frames = text_in.frames
    while other.status is not Status.DONE:
        engine.step()
    assert text_in.frames == frames and text_in.status is Status.DECODING  # its row kept
    assert engine.waiting == 1  # the queued request waited for other's row, not text_in's
    engine.step()
    assert runner.admitted == [1, 2, 3] and text_in.frames == frames
    while queued.status is not Status.DONE:
        engine.step()
    assert not engine.has_work()  # only a row waiting for input: nothing to step
    text_in.ready.set()
    assert engine.has_work()
    run_out(engine)
    for seq in (text_in, other, queued):
        assert outcome(seq) == alone(seq)
