"""Chatterbox Turbo on the one decode engine (models/chatterbox/runner.py) on the tiny
checkpoints: a request's chunks (audio, tokens, draws, final, stop reason) are `model.stream`'s
bit for bit alone (a private one-row engine) and in a batch with other requests joining at any
step, with S3Gen per row (`s3gen_batching="auto"` on this CPU, where the padded pass is not
bit-identical: `padded_s3gen_exact`) and at the edges (max_new_tokens with a pass on the last
draw, a row stopped mid-batch). The padded S3Gen mode keeps the tokens and the chunk boundaries
and stays within a measured SNR of the exact audio (its per-pass float bounds are derived in
test_batch_leaks.py). The server path (/v1/audio/speech with concurrent requests batched) is
`model.stream` byte for byte.

Every test is bounded by events (engine steps, requests queued), not by wall-clock time.
"""

from __future__ import annotations

import threading
import time
from functools import cache
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from test_openai_api import make_api, serve

from tts_core.audio import to_int16
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.gpt2 import gelu_new
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.models.chatterbox.padded_s3gen import padded_s3gen_exact
from tts_core.models.chatterbox.runner import ChatterboxRunner, t3_rows_invariant
from tts_core.models.chatterbox.sampling import TurboSampling
from tts_core.models.chatterbox.t3 import T3Turbo, TurboRow
from tts_core.serving import BatchEngine, InlineOutbox

from .conftest import FIXTURES, ref_clip, shared_model

TINY_A = FIXTURES / "chatterbox-turbo-tiny-a"
CHUNKING = StreamChunking(6, 10)  # small passes: many S3Gen rounds in a short clip
# (text, seed, chunking, max_new_tokens): clips of different lengths and cadences
REQUESTS = (
    ("how are you today?", 7, CHUNKING, 1000),
    ("Hello there, this is a tiny test.", 3, StreamChunking(4, 7), 1000),
    ("Okay.", 11, CHUNKING, 1000),
    ("One more, cut short by its token limit.", 5, StreamChunking(5, 5), 14),
)
# Padded S3Gen vs per row, joins (0, 1, 1, 4): measured per chunk >= 127.6 dB (tiny-a) and
# >= 129.8 dB (tiny-b), whole streams 129-137 dB (max |difference| 1.6e-7: the padded CFM and
# HiFT calls round differently); a leak moves valid frames by O(1) (test_batch_leaks.py's
# unmasked attention: ~2 on mel values ~5), far below this. The per-pass bounds are derived in
# test_batch_leaks.py.
PADDED_SNR_DB = 90.0


def _chunk_record(chunk) -> tuple:
    return (
        chunk.audio.tobytes(),
        chunk.tokens.tolist(),
        chunk.t3_draws,
        chunk.final,
        chunk.stop_reason,
    )


@cache
def _voice(folder: Path, cloned: bool):
    if not cloned:
        return None
    import librosa

    audio, sr = ref_clip()
    return shared_model(folder).create_voice(
        librosa.resample(audio, orig_sr=sr, target_sr=24000), 24000
    )


@cache
def _model(folder: Path, quantize: str = "none"):
    """The shared float32 model, or one with an int8 T3 ("int8": forced, whatever the bounds)."""
    if quantize == "none":
        return shared_model(folder)
    return ChatterboxTurboModel.from_pretrained(folder, quantize=quantize)


@cache
def _reference(folder: Path, index: int, cloned: bool = False, quantize: str = "none") -> tuple:
    text, seed, chunking, max_new = REQUESTS[index]
    model = _model(folder, quantize)
    chunks = model.stream(
        text, _voice(folder, cloned), seed=seed, chunking=chunking, max_new_tokens=max_new
    )
    return tuple(_chunk_record(c) for c in chunks)


def _run_batch(folder, indices, joins, mode="auto", max_batch=4, stop_after=None, quantize="none"):
    """The requests REQUESTS[i] for i in `indices`, each added before engine step joins[k];
    stop_after {k: n}: request k is stopped after its n-th chunk. Returns (seqs, runner)."""
    model = _model(folder, quantize)
    runner = ChatterboxRunner(model, max_batch, mode)
    engine = BatchEngine(runner, isolate_failures=False)
    seqs = []
    for index in indices:
        text, seed, chunking, max_new = REQUESTS[index]
        seqs.append(
            model.request(
                text, seed=seed, chunking=chunking, max_new_tokens=max_new, outbox=InlineOutbox()
            )
        )
    step = 0
    while step <= max(joins) or engine.has_requests():
        for k, seq in enumerate(seqs):
            if joins[k] == step:
                engine.add(seq)
        for k, n in (stop_after or {}).items():
            if len(seqs[k].outbox.items) >= n:
                seqs[k].cancelled.set()
        engine.step()
        step += 1
    return seqs, runner


def _records(seq) -> tuple:
    assert seq.outbox.ended and seq.outbox.error is None
    return tuple(_chunk_record(c) for c in seq.outbox.items)


@pytest.mark.parametrize("cloned", [False, True])
def test_alone_is_model_stream(tiny_folder, cloned) -> None:
    model = shared_model(tiny_folder)
    text, seed, chunking, _ = REQUESTS[0]
    seq = model.request(
        text, _voice(tiny_folder, cloned), seed=seed, chunking=chunking, outbox=InlineOutbox()
    )
    got = tuple(_chunk_record(c) for c in model.run_alone(seq))
    assert got == _reference(tiny_folder, 0, cloned)
    tokens = [t for record in got for t in record[1]]
    assert tokens == model.generate(text, _voice(tiny_folder, cloned), seed=seed).tokens.tolist()


def test_the_padded_pass_is_not_exact_here_so_auto_runs_s3gen_per_row() -> None:
    """What the engine measures: this CPU's padded S3Gen pass rounds differently from the rows'
    calls alone (if a machine's kernels made it exact, "auto" would batch it, and the batch
    tests below would check those bits)."""
    model = shared_model(TINY_A)
    exact = padded_s3gen_exact(model, 3)
    _, runner = _run_batch(TINY_A, [0, 2], [0, 0])
    assert any(rows > 1 for rows, _ in runner.passes)
    assert all(padded == exact for rows, padded in runner.passes if rows > 1)


@pytest.mark.parametrize("joins", [(0, 0, 0, 0), (0, 2, 9, 23)])
def test_batched_rows_are_alone_at_any_join_time(tiny_folder, joins) -> None:
    seqs, runner = _run_batch(tiny_folder, [0, 1, 2, 3], list(joins))
    for index, seq in enumerate(seqs):
        assert _records(seq) == _reference(tiny_folder, index), index
    assert max(rows for rows, _ in runner.passes) >= 2  # S3Gen rounds with several rows
    assert max(c.batch_size for seq in seqs for c in seq.outbox.items) >= 3


def test_a_pass_and_the_limit_on_the_same_draw() -> None:
    """max_new_tokens + 1 draws with a pass due on the last: model.stream yields that pass's
    chunk, then the final one (no tokens left for it); the engine's row does the same."""
    model = shared_model(TINY_A)
    for max_new, chunking in (
        (9, StreamChunking(5, 5)),
        (0, StreamChunking(1, 1)),
        (4, StreamChunking(5, 1)),
    ):
        reference = tuple(
            _chunk_record(c)
            for c in model.stream("Hello there.", seed=2, chunking=chunking, max_new_tokens=max_new)
        )
        seq = model.request(
            "Hello there.", seed=2, chunking=chunking, max_new_tokens=max_new, outbox=InlineOutbox()
        )
        assert tuple(_chunk_record(c) for c in model.run_alone(seq)) == reference
        assert reference[-1][4] == "max_tokens"


def test_a_row_stopped_mid_batch_leaves_the_others_alone() -> None:
    seqs, _ = _run_batch(TINY_A, [0, 1, 2], [0, 0, 1], stop_after={1: 2})
    stopped = seqs[1]
    assert stopped.outbox.ended and not any(c.final for c in stopped.outbox.items)
    assert tuple(_chunk_record(c) for c in stopped.outbox.items) == _reference(TINY_A, 1)[:2]
    for index in (0, 2):
        assert _records(seqs[index]) == _reference(TINY_A, index)


# ------------------------------------------------------------ int8 T3: one GPT-2 step for all rows
@pytest.mark.parametrize("joins", [(0, 0, 0, 0), (0, 2, 9, 23)])
def test_int8_t3_rows_step_together_and_are_alone_at_any_join_time(tiny_folder, joins) -> None:
    """With every projection int8 the runner feeds the rows' tokens through ONE GPT-2 step
    (T3Turbo.feed); each request is still `model.stream`'s bits (int8 model) at any join."""
    seqs, runner = _run_batch(tiny_folder, [0, 1, 2, 3], list(joins), quantize="int8")
    assert runner.t3_batched and t3_rows_invariant(runner.model, 4)
    for index, seq in enumerate(seqs):
        assert _records(seq) == _reference(tiny_folder, index, quantize="int8"), index
    assert max(c.batch_size for seq in seqs for c in seq.outbox.items) >= 3


def test_int8_t3_a_row_stopped_mid_batch_leaves_the_others_alone() -> None:
    seqs, _ = _run_batch(TINY_A, [0, 1, 2], [0, 0, 1], stop_after={1: 2}, quantize="int8")
    reference = _reference(TINY_A, 1, quantize="int8")
    assert tuple(_chunk_record(c) for c in seqs[1].outbox.items) == reference[:2]
    for index in (0, 2):
        assert _records(seqs[index]) == _reference(TINY_A, index, quantize="int8")


def test_the_float_t3_keeps_stepping_each_row_alone() -> None:
    assert not ChatterboxRunner(shared_model(TINY_A), 4).t3_batched


def _shared_generator(runner, seq, positions):
    """A mutant prefill: every row draws from one generator (the first row's)."""
    shared = runner.__dict__.setdefault("shared", torch.Generator().manual_seed(seq.seed))
    seq.draws = seq.open_draws(shared)
    seq.first, seq.first_pending = next(seq.draws, None), True
    return True


def _float_head_feed(t3, rows):
    """A mutant: the rows' hidden states nudged by one float32 rounding, as a batched float
    speech head or GEMM would (rows.py): the bits must differ."""
    T3Turbo.feed(t3, rows)
    for row in rows:
        row.hidden = row.hidden * (1 + torch.finfo(torch.float32).eps)


def test_the_int8_batch_test_sees_a_shared_generator(monkeypatch) -> None:
    monkeypatch.setattr(ChatterboxRunner, "prefill", _shared_generator)
    seqs, _ = _run_batch(TINY_A, [0, 1, 2], [0, 0, 1], quantize="int8")
    assert all(
        _records(seq) != _reference(TINY_A, i, quantize="int8") for i, seq in enumerate(seqs)
    )


def _forced_logits(t3, texts, forced: list[torch.Tensor], joins: list[int], feed) -> list[list]:
    """Teacher-forced T3 runs of `texts` (the built-in voice), row k joining at step
    joins[k], stepped in lockstep with every pending row fed by ONE `feed(rows)` call: each
    row's logits per draw."""
    model = _model(TINY_A, "int8")
    voice = model.resolve_voice(None)
    rows = [TurboRow() for _ in forced]
    logits: list[list] = [[] for _ in forced]
    draws = [
        t3.draws(
            voice.speaker_emb,
            voice.t3_prompt_tokens,
            model.text_ids(texts[k]),
            TurboSampling(),
            None,
            forced=tokens,
            logits_seen=logits[k],
            row=rows[k],
        )
        for k, tokens in enumerate(forced)
    ]
    live: list[int] = []
    for step in range(max(joins) + max(len(f) for f in forced) + 1):
        live += [k for k, join in enumerate(joins) if join == step]
        live = [k for k in live if next(draws[k], None) is not None]
        pending = [rows[k] for k in live if rows[k].pending is not None]
        if pending:
            feed(pending)
    return logits


def test_int8_t3_logits_in_a_batched_step_are_each_rows_alone() -> None:
    """T3's own bits (what the tokens hide: a change of a few ulps rarely moves a draw): the
    logits of rows fed together, joining at different steps and one ending early, are each
    row's alone; a mutant feed nudging the hidden states by one rounding is seen."""
    t3 = _model(TINY_A, "int8").t3
    g = torch.Generator().manual_seed(0)
    forced = [torch.randint(0, 6561, (n,), generator=g) for n in (12, 5, 9)]
    joins = [0, 2, 3]
    texts = [request[0] for request in REQUESTS[:3]]
    together = _forced_logits(t3, texts, forced, joins, t3.feed)
    for k, tokens in enumerate(forced):
        alone = _forced_logits(t3, texts[k : k + 1], [tokens], [0], t3.feed)[0]
        assert len(alone) == len(together[k]) == len(tokens)
        assert all(torch.equal(a, b) for a, b in zip(alone, together[k], strict=True)), k
    nudged = _forced_logits(t3, texts, forced, joins, lambda rows: _float_head_feed(t3, rows))
    assert not all(torch.equal(a, b) for a, b in zip(together[0], nudged[0], strict=True))


def test_int8_rows_ops_are_row_invariant() -> None:
    """The ops of a batched step besides the projections (wpe add, LayerNorm, gelu_new,
    residuals) over (B, 1, H) give a row the bits of its (1, 1, H) call."""
    t3 = _model(TINY_A, "int8").t3
    block = t3.tfmr.h[0]
    x = torch.randn(5, 1, t3.tfmr.wpe.weight.shape[1], generator=torch.Generator().manual_seed(0))
    for op in (block.ln_1, t3.tfmr.ln_f, gelu_new, block.mlp.c_fc, lambda h: h + 0.5 * h):
        together = op(x)
        for b in range(5):
            assert torch.equal(op(x[b : b + 1].clone()), together[b : b + 1])


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    error = float(np.sum((reference.astype(np.float64) - other) ** 2))
    return 10 * np.log10(float(np.sum(reference.astype(np.float64) ** 2)) / max(error, 1e-30))


def test_padded_s3gen_keeps_tokens_and_chunks_within_the_snr(tiny_folder) -> None:
    seqs, runner = _run_batch(tiny_folder, [0, 1, 2, 3], [0, 1, 1, 4], mode="padded")
    assert any(padded and rows >= 3 for rows, padded in runner.passes)
    for index, seq in enumerate(seqs):
        got, reference = _records(seq), _reference(tiny_folder, index)
        assert [r[1:] for r in got] == [r[1:] for r in reference]  # tokens, draws, final, stop
        for g, r in zip(got, reference, strict=True):
            a, b = (np.frombuffer(x, dtype=np.float32) for x in (g[0], r[0]))
            assert a.shape == b.shape
            if np.any(b):
                assert _snr_db(b, a) >= PADDED_SNR_DB, index


def test_request_checks() -> None:
    model = shared_model(TINY_A)
    with pytest.raises(ValueError, match="too long"):
        model.request("word " * 3000)
    with pytest.raises(ValueError, match="s3gen_batching"):
        ChatterboxRunner(model, 2, "sometimes")
    assert model.request("Hi.", sampling=TurboSampling(top_k=1)).sampling.top_k == 1


# ---------------------------------------------------------------- the server path, batched
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tts_core.backends.chatterbox import ChatterboxBackend
    from tts_core.engine import Engine, EngineConfig

    backend = ChatterboxBackend(shared_model(TINY_A), TINY_A.name, "cpu", max_batch=4)
    engine = Engine(backend, EngineConfig(fade_ms=0.0))
    voices = tmp_path_factory.mktemp("voices")
    with serve(make_api(engine, voices)) as url:
        yield url, backend, voices
    backend.close()


def _hold_until_queued(scheduler, count: int) -> threading.Event:
    """The scheduler's loop runs its calls (each request is built there) but steps no request
    until `count` are queued: they are admitted at one step, and batched."""
    released, real_step = threading.Event(), scheduler._step

    def gated() -> None:
        if not released.is_set():
            scheduler._run_calls()
            if scheduler.waiting < count:
                time.sleep(0.005)  # the loop wakes on its queue; yield the core meanwhile
                return
            released.set()
        real_step()

    scheduler._step = gated
    return released


def test_concurrent_v1_requests_are_batched_and_each_is_model_stream(served) -> None:
    url, backend, voices = served
    from tts_core.server.voices import VoiceRegistry

    from .conftest import REF_CLIP

    with REF_CLIP.open("rb") as f:
        made = httpx.post(
            f"{url}/v1/audio/voices",
            data={"name": "cb-batch"},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=300,
        )
    assert made.status_code == 201, made.text[:300]
    cases = [
        ("how are you today?", 3, {}),
        ("Hello there, this is a tiny test.", 8, {"first_chunk_tokens": 4, "chunk_tokens": 7}),
        ("Okay.", 11, {"temperature": 0.7, "top_k": 50}),
    ]
    released = _hold_until_queued(backend.loop, len(cases))
    responses: list = [None] * len(cases)

    def post(k: int) -> None:
        text, seed, knobs = cases[k]
        body = {
            "input": text,
            "voice": "cb-batch",
            "response_format": "pcm",
            "seed": seed,
            "watermark": 0,
            **knobs,
        }
        responses[k] = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=600)

    threads = [threading.Thread(target=post, args=(k,)) for k in range(len(cases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert released.is_set()
    assert backend.loop.runner.most_rows == len(cases)  # T3 steps of the 3 rows together

    _, clip = VoiceRegistry(voices).load("cb-batch")  # the clip as the server hands it over
    model = backend.model
    voice = model.create_voice(clip, 24000)
    for (text, seed, knobs), response in zip(cases, responses, strict=True):
        assert response.status_code == 200, response.text[:300]
        chunking = StreamChunking(
            knobs.get("first_chunk_tokens", StreamChunking().first_tokens),
            knobs.get("chunk_tokens", StreamChunking().chunk_tokens),
        )
        sampling = TurboSampling(**{k: v for k, v in knobs.items() if "chunk" not in k})
        audio = np.concatenate(
            [
                c.audio
                for c in model.stream(text, voice, seed=seed, sampling=sampling, chunking=chunking)
            ]
        )
        assert response.content == to_int16(audio).tobytes()
