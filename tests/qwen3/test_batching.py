"""Continuous batching: a request's codes and audio do not depend on who else is served.

On the tiny checkpoints, both clone modes, greedy and seeded sampling: the scheduler alone gives
the very chunks `model.stream` gives, and 8 requests with other texts, voices, seeds and lengths,
joining at different times, each give exactly what they give alone. Exact equality of every
bit is the claim for the int8 layers (exact integer sums, per-row activation scales, attention
and float heads row by row; see serving/model_runner.py). Float layers (`quantize="none"`, what
a CPU without an int8 matmul serves) run batched GEMMs that round by batch shape: their rows
agree within float32 rounding (bounded in the step test), which is far from any code decision
of these requests, so their codes and audio are equal too. The tests that compare batched with
alone run on both weight formats (int8 where the CPU has it); the others on the format this CPU
serves. Rows leave on EOS, cap, stop, cancel or failure and give their row and cache span back
at once.
"""

from __future__ import annotations

import threading
import time
from functools import cache

import numpy as np
import pytest
import torch

from tts_core.backends.qwen3 import served_loop
from tts_core.models.qwen3_tts.model import load_model
from tts_core.models.qwen3_tts.serving.kv_arena import Span, SpanAllocator
from tts_core.models.qwen3_tts.serving.runner import Qwen3Runner
from tts_core.models.qwen3_tts.serving.sequence import Qwen3Sequence
from tts_core.serving import EngineLoop

from .conftest import (
    check_audio,
    fixture_path,
    fp32_pair_bound,
    load_goldens,
    load_ref_clip,
    served_weights,
    weight_formats,
)

WEIGHTS = weight_formats("the int8 layers' batch invariance (bit for bit) is")

TEXTS = [
    "Hello there, how are you today?",
    "The quick brown fox.",
    "One two three four five six seven.",
    "Many listeners at the cost of one.",
    "Short.",
    "Another sentence to speak right now, please.",
    "Yes.",
    "Testing, testing, one two.",
]
DECODE = {"max_new_tokens": 32}


def served_model(name: str, weights: str | None = None):
    """The tiny checkpoint as served: `weights` "int8" or "none" (None: what this CPU serves);
    one model per checkpoint and format."""
    return _model(name, weights or served_weights())


@cache
def _model(name: str, weights: str):
    return load_model(fixture_path(name), quantize=weights, warm_chunks=())


@cache
def voices(name: str) -> tuple:
    model = served_model(name)
    audio, rate = load_ref_clip()
    return model.create_voice(audio, rate, ref_text="a short reference"), model.create_voice(
        audio, rate
    )


def request(i: int, name: str) -> tuple[str, object, dict]:
    """Request i: its own text, voice (ICL for odd i), seed, greedy for every third."""
    icl, xvec = voices(name)
    kwargs = {**DECODE, "seed": 100 + i, "greedy": i % 3 == 0}
    return TEXTS[i % len(TEXTS)], icl if i % 2 else xvec, kwargs


def collect(chunks) -> tuple[torch.Tensor, np.ndarray, list]:  # noqa: ANN001
    chunks = list(chunks)
    codes = torch.cat([c.codes for c in chunks])
    return codes, np.concatenate([c.audio for c in chunks]), chunks


@pytest.fixture(params=["qwen3-tiny-a", "qwen3-tiny-b"], scope="module")
def name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("weights", WEIGHTS)
def test_scheduler_alone_gives_the_chunks_of_model_stream(name, weights):
    model = served_model(name, weights)
    scheduler = served_loop(model, max_batch=4, prefill_chunk=10_000)
    try:
        for i in (0, 1, 2):  # x-vector greedy, ICL sampled, x-vector sampled
            text, voice, kwargs = request(i, name)
            ours = collect(scheduler.submit(text, voice, **kwargs))
            reference = collect(model.stream(text, voice, **kwargs))
            assert torch.equal(ours[0], reference[0])
            assert np.array_equal(ours[1], reference[1])
            assert [c.frames for c in ours[2]] == [c.frames for c in reference[2]]
            assert ours[2][-1].stop_reason == reference[2][-1].stop_reason
    finally:
        scheduler.close()


@pytest.mark.parametrize("weights", WEIGHTS)
def test_eight_requests_in_a_batch_give_what_they_give_alone(name, weights):
    """Chunked prefill (5 positions a step) and staggered joins: rows enter while others run."""
    model = served_model(name, weights)
    scheduler = served_loop(model, max_batch=8, prefill_chunk=5)
    try:
        alone = [collect(submit(scheduler, i, name)) for i in range(8)]
        results: dict[int, tuple] = {}

        def run(i: int) -> None:
            time.sleep(0.02 * (i % 4))  # some join while others are decoding
            results[i] = collect(submit(scheduler, i, name))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for i in range(8):
            assert torch.equal(results[i][0], alone[i][0]), f"request {i}: codes differ"
            assert np.array_equal(results[i][1], alone[i][1]), f"request {i}: audio differs"
            check_audio(results[i][1])
        batch_sizes = [c.batch_size for i in range(8) for c in results[i][2]]
        assert max(batch_sizes) > 1  # they really ran together
        assert all(c.batch_size == 1 for a in alone for c in a[2])
        assert scheduler.active == 0 and _arena_free(scheduler)
    finally:
        scheduler.close()


def test_the_int8_stacks_step_in_one_native_call_where_it_runs(name):
    """What the tests of this file exercise where the native decode step runs (AVX-512 VNNI,
    models/stack_step.py): the tiny int8 talker's and code predictor's stacks are each one C
    call a step on tiny-a, so the rows alone and batched compared here are that call's; tiny-b's
    talker (width 24, heads of 8: not the multiples of 16 the call takes) runs layer by layer, so
    both paths are held to it."""
    from tts_core.models import native, stack_step

    if stack_step._kernel(native.generation) is None:
        pytest.skip("no native decode step here: the stacks run layer by layer")
    talker = served_model(name, "int8").talker
    for stack in (talker.model, talker.code_predictor.model):
        x = torch.zeros(1, 1, stack.cfg.hidden_size)
        native_shapes = stack.cfg.hidden_size % 16 == 0 and stack.cfg.head_dim % 16 == 0
        planned = stack_step._plan(stack, x) is not None
        assert planned == native_shapes and planned == (name == "qwen3-tiny-a"), name


@pytest.mark.parametrize("weights", WEIGHTS)
def test_each_row_of_a_batched_step_is_the_row_alone(name, weights):
    """The mechanism under the tests above, at the float level where codes cannot show it: the
    talker step's logits and hidden states and every code-predictor pass's logits of a row at its
    own position, alone and in a batch of 4 (rows at 4 different positions): the same bits with
    int8 layers; with float ones, two float32 evaluations of the same network (conftest's error
    model: <= 2 x 4 E, E of the golden talker logits and hidden states; the code predictor has
    no golden of its own: its stack is the talker's size on tiny-a and smaller on tiny-b, so the
    talker's logits E stands in) and the same codes."""
    model = served_model(name, weights)
    runner = Qwen3Runner(model, max_batch=4, capacity=1024)
    hidden = model.talker.cfg.stack.hidden_size
    filler = torch.randn(1, 1, hidden, generator=torch.Generator().manual_seed(1))
    seqs = []
    for i in range(4):
        text, voice, kwargs = request(i, name)
        prompt, settings = model.plan(text, voice, **kwargs)
        seq = Qwen3Sequence(model.talker, prompt, settings, voice, (2, 6), lambda: False)
        assert runner.admit(seq) and runner.prefill(seq, 10_000)
        for frames in range(1, 1 + i):  # i frames out: rows at different positions, whose
            seq.frames = frames  # keys are written (the arena is never cleared)
            runner.talker_step([seq], filler)
        seq.frames = 1 + i
        seqs.append(seq)
    embeds = torch.randn(4, 1, hidden, generator=torch.Generator().manual_seed(0))
    c0 = torch.tensor([5, 17, 300, 42])

    def run(rows: list[Qwen3Sequence], rows_embeds: torch.Tensor, rows_c0: torch.Tensor) -> tuple:
        seen: list[torch.Tensor] = []

        def choose(logits: torch.Tensor) -> torch.Tensor:
            seen.append(logits.clone())
            return logits.argmax(dim=-1)

        runner.talker_step(rows, rows_embeds)
        step = [(s.logits.clone(), s.hidden.clone()) for s in rows]
        codes = runner.predict(rows, rows_c0, choose)
        return step, torch.stack(seen, 1), codes  # passes: (R, 15, V)

    goldens = load_goldens(name)
    logits_bound, hidden_bound = (
        max(fp32_pair_bound(goldens, f"{mode}_{key}") for mode in ("icl", "xvec"))
        for key in ("prefill_logits", "past_hidden")
    )

    def same(alone: torch.Tensor, batched: torch.Tensor, bound: float) -> bool:
        if weights == "int8":
            return torch.equal(alone, batched)
        return float((alone - batched).abs().max()) <= bound

    batch_step, batch_passes, batch_codes = run(seqs, embeds, c0)
    for r, seq in enumerate(seqs):
        step, passes, codes = run([seq], embeds[r : r + 1], c0[r : r + 1])
        assert same(step[0][0], batch_step[r][0], logits_bound), f"row {r}: talker logits"
        assert same(step[0][1], batch_step[r][1], hidden_bound), f"row {r}: talker hidden"
        assert same(passes[0], batch_passes[r], logits_bound), f"row {r}: predictor logits"
        assert torch.equal(codes[0], batch_codes[r]), f"row {r}: codes"


def test_a_cancelled_row_leaves_at_once_and_the_others_are_unchanged():
    name = "qwen3-tiny-a"
    model = served_model(name)
    scheduler = served_loop(model, max_batch=4)
    try:
        alone = [collect(submit(scheduler, i, name)) for i in (1, 2)]
        stop_after = {"asked": 0}

        def should_stop() -> bool:
            stop_after["asked"] += 1
            return stop_after["asked"] > 4

        text, voice, kwargs = request(3, name)
        stopped = scheduler.submit(text, voice, should_stop=should_stop, **kwargs)
        closed = submit(scheduler, 4, name)
        running = [submit(scheduler, i, name) for i in (1, 2)]
        next(closed)  # one chunk, then the consumer goes away
        closed.close()
        results = [collect(stream) for stream in running]
        list(stopped)  # ends without a final chunk
        for got, expected in zip(results, alone, strict=True):
            assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
        assert stop_after["asked"] == 5
        _wait_until(lambda: scheduler.active == 0)
        assert _arena_free(scheduler)
    finally:
        scheduler.close()


def test_a_failing_request_ends_alone():
    name = "qwen3-tiny-a"
    model = served_model(name)
    scheduler = served_loop(model, max_batch=4)
    try:
        expected = collect(submit(scheduler, 2, name))

        def broken() -> bool:
            raise RuntimeError("consumer bug")

        text, voice, kwargs = request(5, name)
        failing = scheduler.submit(text, voice, should_stop=broken, **kwargs)
        healthy = submit(scheduler, 2, name)
        with pytest.raises(RuntimeError, match="consumer bug"):
            list(failing)
        got = collect(healthy)
        assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    finally:
        scheduler.close()


def test_a_full_cache_makes_a_request_wait_its_turn():
    """A cache holding one request at a time: the second waits for the span, then runs."""
    name = "qwen3-tiny-b"
    model = served_model(name)
    text, voice, kwargs = request(1, name)
    probe = served_loop(model, max_batch=1)
    need = probe.submit(text, voice, **kwargs)
    seq_positions = need._seq.positions_needed()
    collect(need)
    probe.close()
    scheduler = served_loop(model, max_batch=4, cache_positions=seq_positions + 10)
    try:
        first = scheduler.submit(text, voice, **kwargs)
        second = scheduler.submit(text, voice, **kwargs)
        a, b = collect(first), collect(second)
        assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert all(c.batch_size == 1 for c in a[2] + b[2])  # never together
    finally:
        scheduler.close()


def test_the_cache_caps_a_request_and_refuses_a_prompt_it_cannot_hold():
    name = "qwen3-tiny-a"
    model = served_model(name)
    text, voice, kwargs = request(1, name)  # ICL: a prompt of a few dozen positions
    prompt_len = model.plan(text, voice, **kwargs)[0].prefill.shape[1]
    scheduler = served_loop(model, max_batch=2, cache_positions=prompt_len + 3)
    try:
        codes, _, chunks = collect(scheduler.submit(text, voice, **{**kwargs, "greedy": True}))
        assert chunks[-1].stop_reason == "length_cap" and codes.shape[0] == 3  # 3 positions left
    finally:
        scheduler.close()
    too_small = served_loop(model, max_batch=1, cache_positions=prompt_len)  # no room for a frame
    with pytest.raises(ValueError, match="cache holds"):
        too_small.submit(text, voice, **kwargs)


def test_bad_requests_are_refused_before_they_queue():
    model = served_model("qwen3-tiny-a")
    _, voice, _ = request(0, "qwen3-tiny-a")
    scheduler = served_loop(model, max_batch=2)
    try:
        with pytest.raises(ValueError):
            scheduler.submit("   ", voice)
        with pytest.raises(TypeError):
            scheduler.submit("Hello.", voice, not_a_setting=1)
        with pytest.raises(ValueError):
            scheduler.submit("Hello.", voice, first_chunk_frames=0)
        assert scheduler.waiting == 0 and scheduler.active == 0
    finally:
        scheduler.close()


def test_span_allocator_first_fit_merge_and_double_free():
    spans = SpanAllocator(100)
    a, b, c = spans.allocate(30), spans.allocate(30), spans.allocate(30)
    assert (a, b, c) == (Span(0, 30), Span(30, 30), Span(60, 30))
    assert spans.allocate(20) is None and spans.free_positions == 10
    spans.free(b)
    assert spans.allocate(31) is None
    assert spans.allocate(25) == Span(30, 25)  # first fit, inside b's old place
    spans.free(a)
    spans.free(c)
    spans.free(Span(30, 25))
    assert spans.free_positions == 100 and spans.allocate(100) == Span(0, 100)
    spans.free(Span(0, 100))
    with pytest.raises(ValueError, match="freed twice"):
        spans.free(Span(10, 5))


def submit(scheduler: EngineLoop, i: int, name: str, **extra):  # noqa: ANN003, ANN201
    """Request i (see `request`) through `scheduler`."""
    text, voice, kwargs = request(i, name)
    return scheduler.submit(text, voice, **kwargs, **extra)


def _arena_free(scheduler: EngineLoop) -> bool:
    return scheduler.runner.arena.free_positions == scheduler.runner.capacity


def _wait_until(condition, timeout: float = 60.0) -> None:  # noqa: ANN001
    """A hang detector (a loaded machine may take seconds), not a speed bound."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_served_model_computes_on_the_scheduler_thread_only():
    """Prompts, voices, steps and decoding all run on the scheduler's thread, whoever asks:
    torch's OpenMP team stays with the thread that made it, and a second live team makes
    libgomp sleep between parallel regions (one stream ~1.7x slower here; scheduler.py)."""
    from tts_core.backends.qwen3 import Qwen3Backend
    from tts_core.engine.backend import SynthesisParams

    model = load_model(fixture_path("qwen3-tiny-a"), quantize=served_weights(), warm_chunks=())
    backend = Qwen3Backend(model, "qwen3-tiny-a", "cpu", max_batch=2)
    seen: set[int] = set()
    parts = (model.talker, model.speaker_encoder, model.speech_tokenizer)
    hooks = [
        module.register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
        for part in parts
        for module in part.modules()
    ]
    audio, _ = load_ref_clip()  # the backend takes 24 kHz clips
    results: list = []

    def listener(i: int) -> None:
        voice = backend.create_voice(audio, "a short reference" if i else None)
        cancel = threading.Event()
        chunks = backend.stream(TEXTS[i], voice, SynthesisParams(seed=i), cancel)
        results.append(next(chunks))
        cancel.set()  # two chunks are enough
        results.append(next(chunks, None))
        chunks.close()

    try:
        threads = [threading.Thread(target=listener, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(results) == 6 and results[0] is not None
        assert seen == {backend.loop._thread.ident}
    finally:
        for hook in hooks:
            hook.remove()
        backend.loop.close()


def test_scheduler_call_returns_raises_and_refuses_after_close():
    scheduler = served_loop(served_model("qwen3-tiny-a"), max_batch=1)
    assert scheduler._thread is None  # a scheduler never used holds no thread
    assert scheduler.call(lambda a, b=0: (threading.get_ident(), a + b), 1, b=2)[1] == 3
    with pytest.raises(ZeroDivisionError):
        scheduler.call(lambda: 1 / 0)
    thread = scheduler._thread
    scheduler.close()
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.call(lambda: None)


def test_a_joiner_steps_alone_until_its_first_chunk_and_changes_no_codes():
    """Two long rows run; a third joins: its first frames are stepped without the running rows
    (its first audio at a 1-row step's cost), then it rides with them; every stream's codes
    equal the same request alone (rows are batch-invariant)."""
    name = "qwen3-tiny-a"
    model = served_model(name)
    scheduler = served_loop(model, max_batch=3)
    steps: list[tuple[list[Qwen3Sequence], list[Qwen3Sequence]]] = []  # (stepped, decoding then)
    original = scheduler._decode_step

    def recording(seqs: list[Qwen3Sequence]) -> None:
        steps.append((list(seqs), list(scheduler._decoding)))
        original(seqs)

    scheduler._decode_step = recording
    _, voice, _ = request(1, name)
    long = {"max_new_tokens": 300, "first_chunk_frames": 2, "greedy": True}
    texts = (TEXTS[0], TEXTS[2])
    try:
        alone = [collect(scheduler.submit(text, voice, **long)) for text in texts]
        alone.append(collect(submit(scheduler, 5, name, first_chunk_frames=2)))
        steps.clear()
        running = [scheduler.submit(text, voice, **long) for text in texts]
        first = [next(stream) for stream in running]  # both are past their first chunk
        joiner = submit(scheduler, 5, name, first_chunk_frames=2)
        got = [collect(joiner)]
        got[:0] = [collect([chunk, *stream]) for chunk, stream in zip(first, running, strict=True)]
        for (codes, audio, _), (want_codes, want_audio, _) in zip(got, alone, strict=True):
            assert torch.equal(codes, want_codes) and np.array_equal(audio, want_audio)
        joined = [(stepped, decoding) for stepped, decoding in steps if joiner._seq in stepped]
        for stepped, decoding in joined[:2]:  # its 2-frame first chunk, alone
            assert stepped == [joiner._seq] and len(decoding) == 3
        assert len(joined[2][0]) == 3  # then with the running rows
        assert got[2][2][0].batch_size == 1
    finally:
        scheduler.close()


def test_joiners_never_hold_the_running_rows_back_more_than_the_cap():
    """However many fresh rows there are, a full step comes after at most the cap."""
    from tts_core.serving import batch as module

    scheduler = served_loop(served_model("qwen3-tiny-a"), max_batch=4)
    row = {"input_ready": True}  # what every Sequence has (serving/sequence.py)
    running = type("Row", (), {**row, "before_first_chunk": False, "frames": 10})()
    fresh = [type("Row", (), {**row, "before_first_chunk": True, "frames": 0})() for _ in range(3)]
    scheduler._decoding = [running, *fresh]
    chosen = [scheduler._rows_to_step() for _ in range(2 * module.FIRST_CHUNK_PRIORITY_FRAMES + 2)]
    cap = module.FIRST_CHUNK_PRIORITY_FRAMES
    assert chosen[:cap] == [fresh] * cap and len(chosen[cap]) == 4
    assert chosen[cap + 1 : 2 * cap + 1] == [fresh] * cap and len(chosen[2 * cap + 1]) == 4
    scheduler._decoding = []
    scheduler.close()
