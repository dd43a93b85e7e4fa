"""Chatterbox's original English model on the one decode engine (models/chatterbox/runner.py's
ChatterboxRunner with english.py's EnglishSequence) on the tiny English checkpoint a: a
request's chunks (audio, tokens, draws, final, stop reason) are `model.stream`'s bit for bit
alone (a private one-row engine: `model.stream` is that engine) and in a batch of 4 with requests
joining at different steps, each with its own voice (built-in or cloned), exaggeration and
cfg_weight (0: T3's 1-row call without guidance); the edges (max_new_tokens 0, a token limit, a
row stopped mid-batch) too. The English CFM is never padded. The server path (/v1/audio/speech
with concurrent requests batched) is `model.stream` byte for byte.

Every test is bounded by events (engine steps, requests queued), not by wall-clock time.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import httpx
import numpy as np
import pytest
from test_openai_api import make_api, serve

from tts_core.audio import to_int16
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.english import EnglishSequence
from tts_core.models.chatterbox.english_t3 import EnglishSampling
from tts_core.models.chatterbox.runner import ChatterboxRunner
from tts_core.serving import BatchEngine, InlineOutbox

from .conftest import FIXTURES, REF_CLIP, ref_clip
from .english_common import english_model
from .test_batching import _chunk_record, _hold_until_queued, _records

TINY_A = FIXTURES / "chatterbox-english-tiny-a"
# (text, seed, chunking, max_new_tokens, exaggeration, cfg_weight, cloned voice): measured on
# tiny-a, 1 thread: 13, 3, 12 and 1 chunks; 162, 31, ~150 and 10 draws (the last: its limit)
REQUESTS = (
    ("how are you today?", 7, StreamChunking(6, 10), 1000, 0.5, 0.5, False),
    ("Hello there, this is a tiny test.", 3, StreamChunking(4, 7), 1000, 0.9, 0.3, True),
    ("Okay.", 11, StreamChunking(6, 10), 1000, 0.8, 0.0, False),
    ("Hello there.", 2, StreamChunking(5, 5), 10, 0.5, 0.5, False),
)


@cache
def _cloned():
    import librosa

    audio, sr = ref_clip()
    clip = librosa.resample(audio, orig_sr=sr, target_sr=24000)
    return english_model(TINY_A).create_voice(clip, 24000)


def _request(index: int, outbox=None):
    text, seed, chunking, max_new, exaggeration, cfg, cloned = REQUESTS[index]
    return EnglishSequence(
        english_model(TINY_A),
        text,
        _cloned() if cloned else None,
        seed,
        exaggeration,
        EnglishSampling(cfg_weight=cfg),
        max_new,
        chunking,
        outbox=outbox or InlineOutbox(),
    )


@cache
def _reference(index: int) -> tuple:
    """REQUESTS[index] through model.stream."""
    text, seed, chunking, max_new, exaggeration, cfg, cloned = REQUESTS[index]
    chunks = english_model(TINY_A).stream(
        text,
        _cloned() if cloned else None,
        seed=seed,
        exaggeration=exaggeration,
        sampling=EnglishSampling(cfg_weight=cfg),
        max_new_tokens=max_new,
        chunking=chunking,
    )
    return tuple(_chunk_record(c) for c in chunks)


def _run_batch(joins: list[int], stop_after: dict[int, int] | None = None):
    """REQUESTS[k] added before engine step joins[k]; stop_after {k: n}: request k is stopped
    after its n-th chunk. Returns (seqs, runner)."""
    runner = ChatterboxRunner(english_model(TINY_A), 4)
    engine = BatchEngine(runner, isolate_failures=False)
    seqs = [_request(k) for k in range(len(joins))]
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


def test_model_stream_is_the_engine_alone_and_its_tokens_are_generates() -> None:
    model = english_model(TINY_A)
    for index in (0, 1):
        got = tuple(_chunk_record(c) for c in model.run_alone(_request(index)))
        assert got == _reference(index)
        text, seed, _, _, exaggeration, cfg, cloned = REQUESTS[index]
        whole = model.generate(
            text,
            _cloned() if cloned else None,
            seed=seed,
            exaggeration=exaggeration,
            sampling=EnglishSampling(cfg_weight=cfg),
        )
        assert [t for record in got for t in record[1]] == whole.draws[:-1].tolist()  # no STOP
        assert got[-1][3:] == (True, "eos") and len(got) > 1


@pytest.mark.parametrize("joins", [(0, 0, 0, 0), (0, 2, 9, 23)])
def test_batched_rows_are_alone_at_any_join_time(joins) -> None:
    seqs, runner = _run_batch(list(joins))
    for index, seq in enumerate(seqs):
        assert _records(seq) == _reference(index), index
    assert runner.most_rows == 4
    if len(set(joins)) == 1:  # joined together, same chunking: S3Gen rounds of several rows
        assert max(rows for rows, _ in runner.passes) >= 2
    assert not any(padded for _, padded in runner.passes)  # the CFG CFM is never padded
    assert _reference(3)[-1][4] == "max_tokens"  # the limit ends one of them


def test_a_row_stopped_mid_batch_leaves_the_others_alone() -> None:
    seqs, _ = _run_batch([0, 0, 1], stop_after={0: 3})
    stopped = seqs[0]
    assert stopped.outbox.ended and not any(c.final for c in stopped.outbox.items)
    assert tuple(_chunk_record(c) for c in stopped.outbox.items) == _reference(0)[:3]
    for index in (1, 2):
        assert _records(seqs[index]) == _reference(index)


def test_no_draws_and_the_limit_on_a_pass() -> None:
    """max_new_tokens 0: no draw, no pass, an empty final chunk ("max_tokens"); a limit on the
    draw of a pass that makes audio: that pass's chunk, then the final one with no tokens."""
    model = english_model(TINY_A)
    (empty,) = model.stream("Hello there.", seed=2, max_new_tokens=0)
    assert (empty.audio.size, empty.tokens.numel(), empty.t3_draws) == (0, 0, 0)
    assert empty.final and empty.stop_reason == "max_tokens"
    text, seed, chunking = REQUESTS[0][:3]
    limit = _reference(0)[1][2]  # the draw of the second pass chunk
    chunks = list(model.stream(text, seed=seed, chunking=chunking, max_new_tokens=limit))
    records = tuple(_chunk_record(c) for c in chunks)
    # (the audio differs: the stream's noise is drawn for max_new_tokens tokens)
    assert [r[1:] for r in records[:2]] == [r[1:] for r in _reference(0)[:2]]
    assert records[2][1:] == ([], limit, True, "max_tokens") and len(records) == 3
    whole = model.generate(text, seed=seed, max_new_tokens=limit)
    assert whole.draws.tolist() == [t for r in records for t in r[1]]
    assert sum(c.audio.size for c in chunks) == whole.audio.size


def test_request_checks() -> None:
    model = english_model(TINY_A)
    with pytest.raises(ValueError, match="text too long"):
        EnglishSequence(model, "word " * 3000)
    with pytest.raises(ValueError, match="text too long"):
        EnglishSequence(model, "Hi.", max_new_tokens=10**6)  # T3's positions
    with pytest.raises(ValueError, match="meanflow"):
        ChatterboxRunner(model, 2, "padded")
    seq = EnglishSequence(model, "Hi.", exaggeration=0.7, sampling=EnglishSampling(cfg_weight=0))
    assert (seq.exaggeration, seq.sampling.cfg_weight, seq.limit) == (0.7, 0.0, 1000)


# ---------------------------------------------------------------- the server path, batched
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tts_core.backends.chatterbox_english import ChatterboxEnglishBackend
    from tts_core.engine import Engine, EngineConfig

    backend = ChatterboxEnglishBackend(english_model(TINY_A), TINY_A.name, "cpu", max_batch=4)
    engine = Engine(backend, EngineConfig(fade_ms=0.0))
    voices = tmp_path_factory.mktemp("voices")
    with serve(make_api(engine, voices)) as url:
        yield url, backend, voices
    backend.close()


def _stream_pcm(model, voice, text: str, seed: int, knobs: dict) -> bytes:
    """model.stream's audio for a /v1 body's knob values, as the PCM response's bytes."""
    default = StreamChunking()
    chunking = StreamChunking(
        knobs.get("first_chunk_tokens", default.first_tokens),
        knobs.get("chunk_tokens", default.chunk_tokens),
    )
    fields = {field.name for field in dataclasses.fields(EnglishSampling)}
    sampling = EnglishSampling(**{k: v for k, v in knobs.items() if k in fields})
    chunks = model.stream(
        text,
        voice,
        seed=seed,
        exaggeration=knobs.get("exaggeration", 0.5),
        sampling=sampling,
        chunking=chunking,
    )
    return to_int16(np.concatenate([c.audio for c in chunks])).tobytes()


def test_concurrent_v1_requests_are_batched_and_each_is_model_stream(served) -> None:
    url, backend, voices = served
    from tts_core.server.voices import VoiceRegistry

    assert backend.default_concurrency == 4  # no lock: the engine admits as many as it batches
    with REF_CLIP.open("rb") as f:
        made = httpx.post(
            f"{url}/v1/audio/voices",
            data={"name": "en-batch"},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=300,
        )
    assert made.status_code == 201, made.text[:300]
    cases = [
        ("how are you today?", 3, {}),
        (
            "Hello there, this is a tiny test.",
            8,
            {"first_chunk_tokens": 4, "chunk_tokens": 7, "exaggeration": 0.9},
        ),
        ("Okay.", 11, {"cfg_weight": 0.0, "min_p": 0.1, "temperature": 0.7}),
    ]
    released = _hold_until_queued(backend.loop, len(cases))

    def post(case: tuple) -> httpx.Response:
        text, seed, knobs = case
        body = {
            "input": text,
            "voice": "en-batch",
            "response_format": "pcm",
            "seed": seed,
            "watermark": 0,
            **knobs,
        }
        return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=600)

    with ThreadPoolExecutor(len(cases)) as pool:  # all at once: batched by the hold above
        responses = list(pool.map(post, cases))
    assert released.is_set() and backend.loop.runner.most_rows == len(cases)

    _, clip = VoiceRegistry(voices).load("en-batch")  # the clip as the server hands it over
    voice = backend.model.create_voice(clip, 24000)
    for case, response in zip(cases, responses, strict=True):
        assert response.status_code == 200, response.text[:300]
        assert response.content == _stream_pcm(backend.model, voice, *case)
