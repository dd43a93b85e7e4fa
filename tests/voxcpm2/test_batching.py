"""Continuous batching of VoxCPM2 (models/voxcpm/runner.py): a request's audio does not depend on
who else is served.

On both tiny checkpoints, at 1 and at 2 threads (the kernels' batch dependence changes with the
thread count, tts_core/serving/rows.py), requests with other texts, voices (none, reference,
reference + transcript), seeds, guidance, diffusion steps, chunk sizes and lengths, some joining
while others run, each give exactly the bytes they give alone (`model.stream`): bit-equality is
the claim, and the random tiny weights amplify any last-bit difference patch after patch (the
plain batched LocDiT pass, which the same comparison catches, is shown to differ). Rows leave on
their stop head, their length cap, a stop, a closed stream or a failure, and their state is
dropped at once.
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np
import pytest
import torch
from qwen3.conftest import check_audio, load_goldens

from tts_core.models.voxcpm import minicpm
from tts_core.models.voxcpm import runner as vox_runner
from tts_core.models.voxcpm.runner import VoxRunner
from tts_core.serving import EngineLoop
from tts_core.serving.rows import rows_invariant

from .conftest import FIXTURES, MODEL_CHECKPOINTS, shared_model

TEXTS = [
    "Hello world, this is a test.",
    "Short one.",
    "Another, longer sentence to speak right now, please.",
    "Four five six seven eight nine ten.",
    "Yes.",
    "A middling sentence, with a comma.",
]


@pytest.fixture(params=MODEL_CHECKPOINTS, scope="module")
def name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=[1, 2])
def threads(request: pytest.FixtureRequest):
    """torch's thread count for the test (the session runs at 1: tests/voxcpm2/conftest.py);
    a scheduler made inside the test steps at it."""
    previous = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(previous)


def served_loop(model, max_batch: int) -> EngineLoop:  # noqa: ANN001
    """The loop the backend serves VoxCPM2 with (backends/voxcpm.py)."""
    return EngineLoop(model.runner(max_batch), make_request=model.request, thread_name="tts-voxcpm")


@cache
def voices(name: str) -> tuple:
    model, goldens = shared_model(FIXTURES / name), load_goldens(f"{name}-model")
    clip, rate = goldens["ref_clip"].numpy(), goldens.meta["clip_rate"]
    return None, model.create_voice(clip, rate), model.create_voice(clip, rate, "a reference")


def request(i: int, name: str) -> tuple[str, object, dict]:
    """Request i: its own text, voice, seed, guidance, diffusion steps (10, or 7 for every fourth:
    rows with other steps solve their CFM apart), chunk
    sizes; every third is capped at 3 patches (a length-cap ending: the stop head is read from
    the 4th patch on)."""
    kwargs = {
        "seed": 100 + i,
        "cfg_value": (2.0, 1.5, 2.5)[i % 3],
        "inference_timesteps": 7 if i % 4 == 3 else 10,
        "first_chunk_patches": 1 + i % 2,
        "chunk_patches": 1 + i % 3,
    }
    if i % 3 == 2:
        kwargs["max_len"] = 3
    return TEXTS[i % len(TEXTS)], voices(name)[i % 3], kwargs


def collect(chunks) -> tuple[np.ndarray, list]:  # noqa: ANN001
    chunks = list(chunks)
    return np.concatenate([c.audio for c in chunks]), chunks


@cache
def alone(name: str, i: int, threads: int) -> tuple[np.ndarray, list]:
    """Request i through `model.stream` (the engine with one row, on this thread)."""
    assert torch.get_num_threads() == threads
    text, voice, kwargs = request(i, name)
    return collect(shared_model(FIXTURES / name).stream(text, voice, **kwargs))


def submit(scheduler: EngineLoop, i: int, name: str, **extra):  # noqa: ANN003, ANN201
    text, voice, kwargs = request(i, name)
    return scheduler.submit(text, voice, **kwargs, **extra)


def same(got: tuple[np.ndarray, list], expected: tuple[np.ndarray, list]) -> bool:
    """The same bytes, the same chunks (patches each) and the same stop reason."""
    return (
        got[0].tobytes() == expected[0].tobytes()
        and [c.patches for c in got[1]] == [c.patches for c in expected[1]]
        and got[1][-1].stop_reason == expected[1][-1].stop_reason
    )


@pytest.fixture
def dit_calls(monkeypatch) -> list[int]:
    """Requests per batched LocDiT pass (MiniCPMStack.run_requests), as they happen."""
    calls: list[int] = []
    run = minicpm.MiniCPMStack.run_requests

    def counting(self, requests):  # noqa: ANN001, ANN202
        calls.append(len(requests))
        return run(self, requests)

    monkeypatch.setattr(minicpm.MiniCPMStack, "run_requests", counting)
    return calls


def test_four_concurrent_streams_give_what_they_give_alone(name, threads, dit_calls):
    """Two streams run; the moment the first has delivered its first chunk, two more join (queued
    from its should_stop, which the loop asks before each step): all four, of different lengths
    (stop head and length cap), equal themselves alone, byte for byte."""
    model = shared_model(FIXTURES / name)
    expected = [alone(name, i, threads) for i in range(4)]
    scheduler = served_loop(model, max_batch=4)
    joiners: list = []

    def join_after_first_chunk() -> bool:
        if not joiners and not first.before_first_chunk:
            for i in (2, 3):
                text, voice, kwargs = request(i, name)
                joiners.append(scheduler.enqueue(model.request(text, voice, **kwargs)))
        return False

    text, voice, kwargs = request(0, name)
    first = model.request(text, voice, **kwargs, should_stop=join_after_first_chunk)
    try:
        running = [scheduler.enqueue(first), submit(scheduler, 1, name)]
        got = [collect(stream) for stream in running]
        assert len(joiners) == 2  # request 0 outlived its first chunk: they joined
        got += [collect(stream) for stream in joiners]
        for i in range(4):
            assert same(got[i], expected[i]), f"request {i} differs from itself alone"
            check_audio(got[i][0])
        assert len({g[0].size for g in got}) > 1  # different lengths
        assert {g[1][-1].stop_reason for g in got} == {"stop_head", "length_cap"}
        batch = [max(c.batch_size for c in g[1]) for g in got]
        assert batch == [4, 4, 4, 4]  # the joiners decoded with the running rows
        assert all(c.batch_size == 1 for e in expected for c in e[1])
        runner: VoxRunner = scheduler.runner
        if rows_invariant(runner.dit_linears, runner.dit_rows, 2):  # at the loop's thread count
            assert max(dit_calls) == 3, "the LocDiT never ran the rows of 10 steps together"
        else:  # this CPU's BLAS rounds these rows by batch: the LocDiT runs per request
            print(f"{name}: LocDiT GEMMs not row-invariant at {threads} threads, run per request")
        _wait_until(lambda: scheduler.active == 0)
    finally:
        scheduler.close()


def test_the_batched_locdit_pass_is_each_request_alone(name, threads):
    """The mechanism under the test above, on the LocDiT's transformer: 4 requests' tokens (a
    CFM row pair each) through `run_requests` give each request the bits of its own pass. The
    plain batched pass (norms, activation and attention over all rows at once) is run on the
    same tokens and counted: where it differs, the comparison is shown able to fail."""
    model = shared_model(FIXTURES / name)
    runner = VoxRunner(model, 4)
    if not rows_invariant(runner.dit_linears, runner.dit_rows, 4):
        pytest.skip(
            f"the LocDiT's GEMMs are not row-invariant here at {threads} threads: "
            "it runs per request (run_requests is not used)"
        )
    stack = runner.dit
    generator = torch.Generator().manual_seed(threads)
    hidden, rows = stack.cfg.hidden_size, runner.dit_rows // 2
    plain_differs = 0
    for trial in range(3):
        requests = [torch.randn(2, rows, hidden, generator=generator) for _ in range(4)]
        with torch.inference_mode():
            together = stack.run_requests(requests)
            each = [stack.run(x, causal=False) for x in requests]
            plain = stack.run(torch.cat(requests), causal=False).split(2)
        for r in range(4):
            assert torch.equal(together[r], each[r]), (trial, r)
            plain_differs += not torch.equal(plain[r], each[r])
    print(f"{name}, {threads} threads: the plain batched pass differs in {plain_differs} of 12")


def test_a_cpu_that_rounds_rows_by_batch_gets_the_locdit_per_request(name, monkeypatch, dit_calls):
    """Where rows_invariant answers no, no pass is batched and the streams are still exact."""
    monkeypatch.setattr(vox_runner, "rows_invariant", lambda *args: False)
    model = shared_model(FIXTURES / name)
    scheduler = served_loop(model, max_batch=3)
    try:
        streams = [submit(scheduler, i, name) for i in range(3)]
        got = [collect(stream) for stream in streams]
    finally:
        scheduler.close()
    assert dit_calls == []
    for i in range(3):
        assert same(got[i], alone(name, i, 1))
    assert max(c.batch_size for g in got for c in g[1]) > 1


def test_the_scheduler_alone_gives_the_chunks_of_model_stream(name):
    scheduler = served_loop(shared_model(FIXTURES / name), max_batch=2)
    try:
        for i in (0, 1, 2):
            assert same(collect(submit(scheduler, i, name)), alone(name, i, 1))
    finally:
        scheduler.close()


def test_stopped_closed_and_failing_rows_leave_and_the_others_are_unchanged(name):
    """One stream is stopped by its should_stop at its 4th ask (at most 3 patches, no final
    chunk), one closed
    after its first chunk, one fails in its should_stop; two others run on unchanged. Every
    row's state is dropped when it leaves."""
    model = shared_model(FIXTURES / name)
    scheduler = served_loop(model, max_batch=5)
    asked = {"n": 0}

    def stop_after_three() -> bool:
        asked["n"] += 1
        return asked["n"] > 3  # asked before each step: three patches are made

    def broken() -> bool:
        raise RuntimeError("consumer bug")

    try:
        stopped = submit(scheduler, 3, name, should_stop=stop_after_three)
        closed = submit(scheduler, 4, name)
        failing = submit(scheduler, 5, name, should_stop=broken)
        running = [submit(scheduler, i, name) for i in (0, 1)]
        next(closed)
        closed.close()
        with pytest.raises(RuntimeError, match="consumer bug"):
            list(failing)
        got = [collect(stream) for stream in running]
        cut = list(stopped)
        for g, i in zip(got, (0, 1), strict=True):
            assert same(g, alone(name, i, 1))
        assert sum(c.patches for c in cut) <= 3 and all(c.stop_reason is None for c in cut)
        assert asked["n"] == 4
        _wait_until(lambda: scheduler.active == 0 and scheduler.waiting == 0)
        for stream in (stopped, closed, failing, *running):
            seq = stream._seq
            assert seq.state is None and seq.decoder_state is None and seq.awaiting is None
    finally:
        scheduler.close()


def test_bad_requests_are_refused_before_they_queue(name):
    scheduler = served_loop(shared_model(FIXTURES / name), max_batch=2)
    try:
        for bad in ({"max_len": 0}, {"inference_timesteps": 0}, {"chunk_patches": 0}):
            with pytest.raises(ValueError):
                scheduler.submit("Hello.", None, **bad)
        assert scheduler.waiting == 0 and scheduler.active == 0
    finally:
        scheduler.close()


def _wait_until(condition, timeout: float = 60.0) -> None:  # noqa: ANN001
    """A hang detector (a loaded machine may take seconds), not a speed bound."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
