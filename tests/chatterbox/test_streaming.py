"""Turbo streaming (`model.stream`, streaming.py) on the tiny checkpoints: T3's tokens are
generate's (and the official's), the chunks cover the whole clip, the first one comes after the
first `first_tokens` tokens, and the streamed audio approximates the whole-utterance pass over the
same tokens with the same noise (`generate(stream_noise=True)`) within a measured SNR.

SNR thresholds. Streaming S3Gen is an approximation, not a float rounding, so its error is
measured, not derived (benchmarks/chatterbox_stream_bench.py, BENCHMARKS.md); each threshold
below sits well under the lowest measured value and far above what a real fault gives (audio one
frame late, as from a chunk dropped or repeated: ~13 dB; the source noise one frame off:
19-22 dB; test_a_fault_is_far_below_the_threshold).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.hift import HARMONICS, SAMPLES_PER_FRAME, initial_phases
from tts_core.models.chatterbox.streaming import FlowChunker, HiftStream, S3GenStream, StreamNoise

from .conftest import shared_model

GEN_TEXT = "Hello there, this is a tiny test. [chuckle] Okay"  # test_generate's golden text
# Whole stream vs generate(stream_noise=True), default HiFT margins, chunks of 10/25/50 tokens:
# measured 37.5-39.6 dB on tiny-a with seeds 1 and 3 (11 s and 8.6 s clips; the benchmark's),
# 42.2-45.1 dB with this test's seed 14 (5 s); tiny-b 49.5-62.9 dB (seeds 1, 3, 14).
# The error is the flow's: frames frozen before later tokens exist (bidirectional attention; a
# random model's attention is diffuse, so every later token moves every frame a little). The
# default chunking (passes ramped 12, 36, 64, 96, ... up to every 50 tokens, each over the
# prompt's last 25 tokens and 10 of context): 38.9-41.8 dB on tiny-a (seeds 1, 3, 14),
# 44.9-48.6 on tiny-b; the doubling ramp before it (12, 24, 48, 96) 37.8-40.8 and 45.5-48.6,
# 41.9 at real size (BENCHMARKS.md).
STREAM_SNR_DB = 30.0
# HiftStream in pushes vs one push on the same mel, margins 16/8 frames, voiced F0: measured
# 58.8-74 dB (pushes of 2 to 50 frames); what is left is the decoder's receptive field beyond
# the margins (32/16 frames reach ~80 dB, the float floor of the phase integral).
HIFT_SNR_DB = 50.0


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    error = float(np.sum((reference.astype(np.float64) - other) ** 2))
    return 10 * np.log10(float(np.sum(reference.astype(np.float64) ** 2)) / max(error, 1e-30))


def _stream(model, seed: int, chunking: StreamChunking, **kwargs) -> list:
    return list(model.stream(GEN_TEXT, seed=seed, chunking=chunking, **kwargs))


@pytest.mark.parametrize("tokens", [10, 25, 50, None])
def test_stream_tokens_length_and_snr(tiny_folder, goldens, tokens: int | None) -> None:
    """Chunks of 10, 25 or 50 tokens over the whole context, and the default chunking (None:
    ramped passes over a bounded window)."""
    model = shared_model(tiny_folder)
    seed = int(goldens["meta_seeds"][3])
    chunking = (
        StreamChunking(tokens, tokens, flow_prompt=None, flow_context=None)
        if tokens
        else StreamChunking()
    )
    chunks = _stream(model, seed, chunking)
    exact = model.generate(GEN_TEXT, seed=seed)
    reference = model.generate(GEN_TEXT, seed=seed, stream_noise=True)
    streamed_tokens = torch.cat([c.tokens for c in chunks])
    assert streamed_tokens.tolist() == exact.tokens.tolist() == goldens["gen_tokens"].tolist()
    assert reference.tokens.tolist() == exact.tokens.tolist()
    audio = np.concatenate([c.audio for c in chunks])
    assert audio.shape == exact.audio.shape == reference.audio.shape
    assert snr_db(reference.audio, audio) >= STREAM_SNR_DB
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].stop_reason == exact.stop_reason


def test_last_chunk_kept_and_first_after_first_tokens(tiny_folder, goldens, monkeypatch) -> None:
    """The first chunk comes out of the first flow pass, made right after the first_tokens-th
    draw (T3 still running); the last holds the clip's end (the 3 silence tokens' 6 frames and
    every held-back frame)."""
    model = shared_model(tiny_folder)
    seed, first = int(goldens["meta_seeds"][3]), 8
    passes: list[int] = []
    flow_inference = model.flow.inference

    def counting(*args, **kwargs):
        passes.append(1)
        return flow_inference(*args, **kwargs)

    monkeypatch.setattr(model.flow, "inference", counting)
    stream = model.stream(GEN_TEXT, seed=seed, chunking=StreamChunking(first, 20))
    head = next(stream)
    assert (len(passes), head.t3_draws, head.tokens.numel(), head.final) == (1, first, first, False)
    assert head.audio.size > 0
    rest = list(stream)
    total = len(goldens["gen_tokens"]) + 1  # + the STOP draw
    assert rest[-1].final and rest[-1].t3_draws == total > head.t3_draws
    assert len(passes) == 1 + len(rest)  # one pass per chunk: no pass yielded nothing here
    # frames after the last non-final chunk: >= hold-back (3 tokens) + silence (3 tokens)
    assert rest[-1].audio.size >= 2 * 6 * SAMPLES_PER_FRAME
    assert np.any(rest[-1].audio != 0)


def test_max_new_tokens_in_stream(tiny_folder, goldens) -> None:
    model = shared_model(tiny_folder)
    seed = int(goldens["meta_seeds"][3])
    chunks = _stream(model, seed, StreamChunking(2, 2), max_new_tokens=3)
    exact = model.generate(GEN_TEXT, seed=seed, max_new_tokens=3)
    assert torch.cat([c.tokens for c in chunks]).tolist() == exact.tokens.tolist()
    assert chunks[-1].stop_reason == exact.stop_reason == "max_tokens"
    assert sum(c.audio.size for c in chunks) == exact.audio.size


def test_stream_noise_path_is_the_official_computation(tiny_folder) -> None:
    """The whole-utterance reference differs from generate only in where its noise comes from:
    fed the official's own draws, the flow gives the official's mel bit for bit, and HiftStream
    in one push the official HiFT's waveform (tiny models' F0 is unvoiced, < 10 Hz, so the
    source is the drawn noise alone and every op matches)."""
    model = shared_model(tiny_folder)
    voice = model.builtin_voice
    tokens = torch.randint(0, 6561, (1, 30), generator=torch.Generator().manual_seed(1))
    official = model.tokens_to_mel(tokens, voice, torch.Generator().manual_seed(2))
    generator = torch.Generator().manual_seed(2)
    noise = model.flow.draw_noise(tokens.shape[1], generator)
    full = torch.randn(1, 80, 2 * (voice.prompt_token.shape[1] + 30), generator=generator)
    ours = model.flow.inference(
        tokens,
        voice.prompt_token,
        voice.prompt_feat,
        voice.embedding,
        None,
        noise=noise,
        prompt_noise=full,
    )
    assert torch.equal(ours, official)

    wav = model.vocode(official, torch.Generator().manual_seed(3))[0]
    generator = torch.Generator().manual_seed(3)
    draws = _Draws(initial_phases(1, generator), official.shape[2], generator)
    assert torch.equal(HiftStream(model.hift, draws).push(official, final=True), wav)


class _Draws:
    """StreamNoise's interface over HiFT draws made in the official order."""

    def __init__(self, phases: torch.Tensor, frames: int, generator: torch.Generator) -> None:
        self.phases = phases
        shape = (1, HARMONICS + 1, frames * SAMPLES_PER_FRAME)
        self.noise = torch.randn(shape, generator=generator)

    def source(self, start: int, end: int) -> torch.Tensor:
        return self.noise[..., start:end]


def _voiced(hift):
    """A copy whose F0 head is scaled x1000: 60-360 Hz, every frame voiced, so the sines (and
    the phase carried across pushes) carry the signal."""
    hift = copy.deepcopy(hift)
    with torch.no_grad():
        hift.f0_predictor.classifier.weight.mul_(1000)
        hift.f0_predictor.classifier.bias.mul_(1000)
    return hift


@pytest.mark.parametrize("step", [2, 13, 50])
def test_hift_stream_pushes_match_one_push(tiny_folder, step: int) -> None:
    hift = _voiced(shared_model(tiny_folder).hift)
    frames = 300
    mel = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(4)) * 2 - 5
    with torch.inference_mode():
        assert bool((hift.f0_predictor(mel) > 10).all())
    draws = _Draws(
        initial_phases(1, torch.Generator().manual_seed(5)),
        frames,
        torch.Generator().manual_seed(6),
    )
    whole = HiftStream(hift, draws).push(mel, final=True).numpy()
    stream = HiftStream(hift, draws)
    pieces = [
        stream.push(mel[..., i : i + step], final=i + step >= frames).numpy()
        for i in range(0, frames, step)
    ]
    audio = np.concatenate(pieces)
    assert audio.shape == whole.shape == (frames * SAMPLES_PER_FRAME,)
    assert snr_db(whole, audio) >= HIFT_SNR_DB


def test_a_fault_is_far_below_the_threshold(tiny_folder) -> None:
    """What the thresholds must catch costs far more than the measured streaming error: the
    waveform one frame late (a chunk dropped or repeated; voiced: measured 13.0-13.4 dB), or
    the source noise one frame off (a wrong slice of the pre-drawn buffer; with the tiny
    models' unvoiced source, which is that noise: measured 18.9-21.6 dB)."""
    model = shared_model(tiny_folder)
    frames = 200
    mel = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(4)) * 2 - 5
    draws = _Draws(
        initial_phases(1, torch.Generator().manual_seed(5)),
        frames + 1,
        torch.Generator().manual_seed(6),
    )
    voiced = HiftStream(_voiced(model.hift), draws).push(mel, final=True).numpy()
    late = np.concatenate([np.zeros(SAMPLES_PER_FRAME), voiced[:-SAMPLES_PER_FRAME]])
    assert snr_db(voiced, late) <= STREAM_SNR_DB - 10
    unvoiced = HiftStream(model.hift, draws).push(mel, final=True).numpy()
    off = _Draws(draws.phases, 0, torch.Generator())
    off.noise = draws.noise[..., SAMPLES_PER_FRAME:]
    misaligned = HiftStream(model.hift, off).push(mel, final=True).numpy()
    assert snr_db(unvoiced, misaligned) <= STREAM_SNR_DB - 5


def _pushes(chunker, tokens: torch.Tensor, cuts: list[int]) -> list[torch.Tensor]:
    return [chunker.push(tokens[:, :n], final=False) for n in cuts] + [chunker.push(tokens, True)]


def _flow_lengths(model, monkeypatch) -> list[int]:  # noqa: ANN001
    """The token count (prompt + tokens) of every flow pass from now on."""
    seen: list[int] = []
    flow_inference = model.flow.inference

    def recording(tokens, prompt_token, *args, **kwargs):  # noqa: ANN001, ANN202
        seen.append(prompt_token.shape[1] + tokens.shape[1])
        return flow_inference(tokens, prompt_token, *args, **kwargs)

    monkeypatch.setattr(model.flow, "inference", recording)
    return seen


def test_a_window_wider_than_the_utterance_is_the_unbounded_stream(tiny_folder) -> None:
    """flow_prompt / flow_context past the prompt and the tokens: every pass is the unbounded
    pass, bit for bit (the window's slicing and hand-out change nothing)."""
    model = shared_model(tiny_folder)
    voice = model.builtin_voice
    tokens = torch.randint(0, 6561, (1, 40), generator=torch.Generator().manual_seed(4))
    out = []
    for prompt, context in ((None, None), (10**6, 10**6)):
        noise = StreamNoise(5, 40, voice.prompt_feat.shape[1] + 2)
        chunker = FlowChunker(model.flow, voice, noise, prompt_tokens=prompt, context=context)
        out.append(torch.cat(_pushes(chunker, tokens, [9, 17, 30]), dim=2))
    assert torch.equal(out[0], out[1])


def test_a_bounded_pass_is_the_flow_over_its_window(tiny_folder, monkeypatch) -> None:
    """With the prompt's last 6 tokens and 4 tokens of context, a later pass runs the flow over
    exactly those tokens (the prompt tail with its own mel frames and noise columns, the tokens
    from `skipped` with theirs), and hands out the frames the unbounded pass would place at the
    same times of the utterance: the output is the concatenation of those slices."""
    model = shared_model(tiny_folder)
    voice = model.builtin_voice
    tp, tm = voice.prompt_token.shape[1], voice.prompt_feat.shape[1]
    lead = 2 * tp - tm
    tokens = torch.randint(0, 6561, (1, 40), generator=torch.Generator().manual_seed(4))
    noise = StreamNoise(5, 40, tm + 2)
    chunker = FlowChunker(model.flow, voice, noise, prompt_tokens=6, context=4)
    flow_inference = model.flow.inference  # the flow itself, before recording
    seen = _flow_lengths(model, monkeypatch)
    first = chunker.push(tokens[:, :12], final=False)
    emitted = chunker.emitted
    assert emitted == first.shape[2] == lead + 2 * (12 - chunker.holdback)
    second = chunker.push(tokens[:, :30], final=False)
    skipped = (emitted - lead) // 2 - 4
    assert skipped > 0 and seen == [6 + 12, 6 + 30 - skipped]
    expected = flow_inference(
        tokens[:, skipped:30],
        voice.prompt_token[:, tp - 6 :],
        voice.prompt_feat[:, tm - (12 - lead) :],
        voice.embedding,
        None,
        noise=noise.mel[..., 2 * skipped : 60],
        prompt_noise=noise.prompt[..., 2 * (tp - 6) :],
    )
    stable = lead + 2 * (30 - chunker.holdback)
    assert torch.equal(second, expected[..., emitted - 2 * skipped : stable - 2 * skipped])
    assert chunker.emitted == stable


def test_a_bounded_pass_costs_the_same_however_long_the_utterance(tiny_folder, monkeypatch):
    """The default chunking bounds each pass to the prompt's last flow_prompt tokens, the
    flow_context tokens before the first frame not handed out yet, and the new ones: the flow's
    length stays flat along a long stream instead of growing with it."""
    model = shared_model(tiny_folder)
    chunking = StreamChunking()
    seen = _flow_lengths(model, monkeypatch)
    tokens = torch.randint(0, 6561, (1, 200), generator=torch.Generator().manual_seed(4))
    noise = StreamNoise(5, 200, model.builtin_voice.prompt_feat.shape[1] + 2)
    stream = S3GenStream(model.flow, model.hift, model.builtin_voice, noise, chunking)
    for n in chunking.pass_points(200):
        stream.push(tokens[:, :n], final=False)
    bound = (
        chunking.flow_prompt + chunking.flow_context + chunking.chunk_tokens + chunking.holdback + 1
    )
    assert len(seen) == len(chunking.pass_points(200)) > 4 and max(seen) <= bound


@pytest.mark.parametrize("field", ["flow_prompt", "flow_context"])
def test_a_window_below_its_minimum_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        StreamChunking(**{field: -1})


def test_the_passes_ramp_up_to_chunk_tokens() -> None:
    """The second pass 2 first_tokens after the first, each later step ramp_growth (4) tokens
    longer, up to chunk_tokens; without the ramp, every chunk_tokens from the first."""
    assert StreamChunking(12, 50).pass_points(200) == [12, 36, 64, 96, 132, 172]
    assert StreamChunking(12, 50).pass_points(400)[-3:] == [264, 314, 364]
    assert StreamChunking(12, 50, ramp=False).pass_points(200) == [12, 62, 112, 162]
    assert StreamChunking(10, 10).pass_points(35) == [10, 20, 30]
