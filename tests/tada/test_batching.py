"""TADA on the one engine (models/tada/runner.py): a request's chunks do not depend on who else
is served.

On both tiny checkpoints, four requests with other texts, seeds, guidance (CFG on: two LM rows;
off: one), extra steps, chunk cadences and decoder windows give, in a batch of 4 with two of
them joining at any of several steps, exactly the bytes and chunking they give alone
(`model.stream`, the one-row engine): bit-equality is the claim, and the random tiny weights
amplify any last-bit difference token after token. The engine is stepped by the test (no
thread), so the join step is exact; the served EngineLoop (its own thread) gives one request
the chunks of model.stream too. Alone, the engine's frames are generate()'s (acoustic vectors
and durations equal) and its audio has generate()'s length."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts_core.models.tada.flow_head import FlowOptions
from tts_core.models.tada.generate import GenerateOptions, generate
from tts_core.models.tada.model import TadaModel
from tts_core.models.tada.runner import TadaRunner
from tts_core.models.tada.text import normalize_text
from tts_core.serving.alone import InlineOutbox
from tts_core.serving.batch import BatchEngine
from tts_core.serving.loop import EngineLoop

from .test_generate import TEXT, prompt_of

TEXTS = [
    TEXT,
    "Ask Stella to call her, and bring these things.",
    "Bring the things.",
    "Please, these things.",
]


@pytest.fixture(scope="module")
def models() -> dict:
    return {}


def model_of(models: dict, folder) -> TadaModel:  # noqa: ANN001
    if folder not in models:
        models[folder] = TadaModel.from_folders(folder / "model", folder / "codec")
    return models[folder]


def request_args(i: int) -> dict:
    """Request i: its own text, seed, guidance (every fourth without CFG), extra steps, cadence
    and decoder window (noise temperature 0.5: see tools/oracle/tada/README.md)."""
    flow = FlowOptions(noise_temperature=0.5, acoustic_cfg=1.0 if i % 4 == 3 else 1.6)
    return {
        "text": TEXTS[i % len(TEXTS)],
        "options": GenerateOptions(flow=flow, extra_steps=2 if i % 2 else 0),
        "seed": 100 + i,
        "first_chunk_tokens": 1 + i % 2,
        "chunk_tokens": 2 + i % 3,
        "context": (20, 10)[i % 2],
        "lookahead": (15, 10)[i % 2],
    }


def alone(model: TadaModel, voice, i: int) -> list:  # noqa: ANN001
    return list(model.stream(voice, **request_args(i)))


def same(got: list, expected: list) -> bool:
    """The same bytes in the same chunks (tokens each) with the same stop reason."""
    return (
        [c.audio.tobytes() for c in got] == [c.audio.tobytes() for c in expected]
        and [c.tokens for c in got] == [c.tokens for c in expected]
        and got[-1].stop_reason == expected[-1].stop_reason == "end_of_text"
    )


def drained(seq) -> list:  # noqa: ANN001
    assert seq.outbox.ended and seq.outbox.error is None
    return list(seq.outbox.items)


@pytest.mark.parametrize("join", [0, 1, 4, 9])
def test_a_batch_of_four_gives_each_request_what_it_gives_alone(tiny_folder, goldens, models, join):
    """Requests 0 and 1 (the longer texts) start; 2 and 3 join after `join` engine steps (0: all
    four at once) while both still run."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    expected = [alone(model, voice, i) for i in range(4)]
    engine = BatchEngine(TadaRunner(model, 4), isolate_failures=False)
    seqs = [model.request(voice, **request_args(i), outbox=InlineOutbox()) for i in range(4)]
    for seq in seqs[:2]:
        engine.add(seq)
    steps = 0
    while engine.has_requests() or steps <= join:
        if steps == join:
            assert not any(seq.outbox.ended for seq in seqs[:2])
            for seq in seqs[2:]:
                engine.add(seq)
        engine.step()
        steps += 1
    got = [drained(seq) for seq in seqs]
    for i in range(4):
        assert same(got[i], expected[i]), f"request {i} differs from itself alone (join {join})"
    assert max(c.batch_size for c in got[2]) == 4  # the joiners stepped with the running rows
    assert all(c.batch_size == 1 for e in expected for c in e)
    assert len({sum(c.audio.size for c in g) for g in got}) > 1  # different lengths


def test_alone_the_engine_makes_generates_frames_and_length(tiny_folder, goldens, models):
    """The one-row engine's frames (frames-only request) are generate()'s decoded acoustic
    vectors and durations, bit for bit; its joined audio has generate()'s length."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    args = request_args(1)
    with torch.no_grad():
        out = generate(
            model.lm,
            model.tokenizer,
            voice,
            normalize_text(args["text"]),
            args["options"],
            torch.Generator().manual_seed(args["seed"]),
        )
    seq = model.request(voice, **args, audio=False, outbox=InlineOutbox())
    engine = BatchEngine(TadaRunner(model, 1), isolate_failures=False)
    engine.add(seq)
    while engine.has_requests():
        engine.step()
    frames = [frame for chunk in drained(seq) for frame in chunk.frames]
    assert torch.equal(torch.stack([f.vector for f in frames]), out.encoded)
    assert [f.before for f in frames] == out.time_before[0, :-1].tolist()
    audio = model.generate(voice, args["text"], args["options"], seed=args["seed"])
    streamed = np.concatenate([c.audio for c in alone(model, voice, 1)])
    assert streamed.shape == audio.shape


@pytest.mark.parametrize("window", [(20, 15), (40, 30), (4, 1)])
def test_the_first_chunk_carries_audio(tiny_folder, goldens, models, window):
    """The first chunk waits for samples past the lookahead and the leading silence (it would
    be empty at 2 tokens); later chunks keep the cadence; the length is generate()'s."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    args = request_args(0) | {"context": window[0], "lookahead": window[1]}
    chunks = list(model.stream(voice, **args))
    assert chunks[0].audio.size > 0
    assert chunks[0].tokens >= args["first_chunk_tokens"]
    assert all(c.tokens == args["chunk_tokens"] for c in chunks[1:-1])
    full = model.generate(voice, args["text"], args["options"], seed=args["seed"])
    assert sum(c.audio.size for c in chunks) == full.size
    print(f"window {window}: first chunk after {chunks[0].tokens} tokens")


def test_after_prefill_every_decode_step_is_one_lm_step(tiny_folder, goldens, models):
    """The runner's prefill runs the transition steps too: each later step decodes a frame."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    seq = model.request(voice, **request_args(0), outbox=InlineOutbox())
    TadaRunner(model, 1).prefill(seq, 1)
    run, frames = seq.generation, 0
    while not run.done:
        position = run.position
        with torch.inference_mode():  # as the runner's decode
            assert run.next_frame() is not None and run.position == position + 1
        frames += 1
    assert frames == run.decoded_frames == seq.limit


def test_the_scheduler_gives_the_chunks_of_model_stream(tiny_folder, goldens, models):
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    scheduler = EngineLoop(model.runner(4), make_request=model.request)
    try:
        streams = [scheduler.submit(voice, **request_args(i)) for i in (0, 2)]
        got = [list(stream) for stream in streams]
    finally:
        scheduler.close()
    assert same(got[0], alone(model, voice, 0)) and same(got[1], alone(model, voice, 2))


def test_a_stopped_request_leaves_and_the_others_are_unchanged(tiny_folder, goldens, models):
    """Request 1 is stopped after its first chunk: it ends without a final chunk, its caches
    are dropped, and request 0 still gives its bytes alone."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    engine = BatchEngine(TadaRunner(model, 4), isolate_failures=False)
    keep = model.request(voice, **request_args(0), outbox=InlineOutbox())
    stopped = model.request(
        voice,
        **request_args(1),
        outbox=InlineOutbox(),
        should_stop=lambda: bool(stopped.outbox.items),
    )
    engine.add(keep)
    engine.add(stopped)
    while engine.has_requests():
        engine.step()
    assert same(drained(keep), alone(model, voice, 0))
    chunks = drained(stopped)
    assert len(chunks) == 1 and chunks[0].stop_reason is None
    assert stopped.generation.caches is None and stopped.decoder_state is None


def test_bad_requests_are_refused_before_they_queue(tiny_folder, goldens, models):
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    with pytest.raises(ValueError, match="chunk"):
        model.request(voice, "Hello.", chunk_tokens=0)
    with pytest.raises(ValueError, match="lookahead"):
        model.request(voice, "Hello.", lookahead=-1)
    with pytest.raises(ValueError, match="lookahead >= 1"):  # would lose the CNN's last samples
        model.request(voice, "Hello.", lookahead=0)
